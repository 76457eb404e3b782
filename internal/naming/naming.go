package naming

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxLabel is Kubernetes' limit for namespace names (RFC 1123 labels).
const maxLabel = 63

// Namespace is the namespace of a workspace's environment: "<ws>-<env>",
// shortened with a hash suffix when that would exceed 63 characters. IDs
// are already DNS labels (internal/validate), so the result is one too.
//
// It is not injective: ("acme-prod", "x") and ("acme", "prod-x") both give
// "acme-prod-x", and two shortened names can share a hash. daemon/desired
// therefore registers which pair owns each name and refuses the others. The
// result must never change for an existing pair: running clusters hold
// their objects under it.
func Namespace(workspaceID, environmentID string) string {
	name := workspaceID + "-" + environmentID
	if len(name) <= maxLabel {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := hex.EncodeToString(sum[:])[:10]
	prefix := name[:maxLabel-len(suffix)-1]
	for len(prefix) > 0 && prefix[len(prefix)-1] == '-' {
		prefix = prefix[:len(prefix)-1]
	}
	return prefix + "-" + suffix
}

// sentinelPrefix starts the names of a sentinel's objects. Deployments are
// named by their ID in the same namespace, so no deployment ID may start
// with it (see DeploymentIDFree).
const sentinelPrefix = "sentinel-"

// Sentinel is the name of a sentinel's Deployment and Service.
func Sentinel(id string) string { return sentinelPrefix + id }

// DeploymentIDFree reports whether a deployment may have id without its
// objects taking a sentinel's names.
func DeploymentIDFree(id string) bool { return !strings.HasPrefix(id, sentinelPrefix) }
