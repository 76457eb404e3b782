// Package k8s holds the Kubernetes manifests for ctrld and agentd. Its test
// applies them to a real API server with strict field validation, so a
// misspelt field or an invalid value fails here instead of at
// `kubectl apply`. (That the agent's RBAC is sufficient is proven in
// agentd/agent's TestShippedRoleIsSufficient.)
package k8s
