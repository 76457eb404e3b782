// Package naming derives Kubernetes names from deploysync IDs, in one place,
// so ctrld (which puts them in events) and agentd (which finds objects by
// them) can never disagree; and holds the one rule of which namespaces no
// workspace's environment may have (Reserved), which ctrld refuses to
// assign and agentd refuses to write into.
package naming
