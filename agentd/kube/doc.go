// Package kube holds what every agentd controller shares about the objects
// it manages: the labels that mark them, the one server-side-apply field
// manager, the spec hash that makes no-op applies free, whether a live
// object already holds what an apply would write (Holds), and the rules
// that an object without the managed-by label is never touched and that
// nothing is written into a namespace without it (ErrForeignNamespace).
package kube
