// Package jsontype holds the Go types of JSON columns. It imports nothing
// of ent, so the generated code can use them without an import cycle
// through the schema and its hooks.
package jsontype

// RegionSpec is a deployment's desired state in one region, as a
// DeploymentRevision keeps it.
type RegionSpec struct {
	Replicas int    `json:"replicas"`
	Status   string `json:"status"`
}
