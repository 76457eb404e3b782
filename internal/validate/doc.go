// Package validate holds the rules for values that end up as Kubernetes
// object names, labels or container specs: IDs, regions, image references,
// resource sizes, command arguments and environment values, and Cilium
// policy specs. The Ent schema and the gRPC API both use these, so a value
// is judged the same way wherever it enters.
package validate
