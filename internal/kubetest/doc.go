// Package kubetest runs a real Kubernetes control plane for tests: etcd and
// kube-apiserver on 127.0.0.1 with random ports, generated certificates and
// an admin kubeconfig; and, when a test needs Pods that actually run, the
// controller manager, the scheduler and kwok with one fake node.
//
// The binaries are built once by scripts/kube-binaries.sh (the test task runs
// it before go test) and found here through the same script's cache lookup,
// or through DEPLOYSYNC_KUBE_BIN. Without them a test fails in CI and skips
// with the reason elsewhere.
//
// Nothing outlives the test binary: children run through internal/testproc
// (their own process group, a parent-death signal, a directory under its
// reaped state root), Stop kills them newest first with SIGKILL (a SIGTERM'd
// apiserver spends seconds retrying etcd), and Start first reaps whatever a
// killed earlier run left behind.
package kubetest
