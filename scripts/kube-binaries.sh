#!/usr/bin/env bash
# Builds the real Kubernetes control plane used by tests (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kwok) from the Go module proxy, and
# caches it. Prints the directory holding the binaries on stdout.
#
# The cache key is the Kubernetes version plus a hash of tools/kube (go.mod,
# go.sum, sources) and this script, so a change to any of them rebuilds, and
# anything else reuses the binaries. A build is written to a temp dir and
# renamed into place with a stamp file, so an interrupted build never leaves a
# half-filled cache entry behind.
#
# Usage: kube-binaries.sh [--cached-only]
#   --cached-only  print the directory if the binaries are cached, else exit 3
#                  without building (the test helper uses it to find them).
# Env: DEPLOYSYNC_KUBE_CACHE overrides the cache root
#      (default ${XDG_CACHE_HOME:-$HOME/.cache}/deploysync/kube).
set -euo pipefail

cached_only=false
case "${1:-}" in
--cached-only) cached_only=true ;;
"") ;;
*) echo "usage: $0 [--cached-only]" >&2; exit 2 ;;
esac

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mod="$repo/tools/kube"
kube_version=v1.36.3

hash=$(cat "$mod/go.mod" "$mod/go.sum" "$mod/tools.go" "$mod/cmd/etcd/main.go" "${BASH_SOURCE[0]}" \
	| sha256sum | cut -c1-16)
root=${DEPLOYSYNC_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/deploysync/kube}
dir="$root/$kube_version-$hash"

if [[ -f "$dir/.complete" ]]; then
	echo "kube binaries: cached in $dir" >&2
	echo "$dir"
	exit 0
fi
if $cached_only; then
	echo "kube binaries: not built yet (run scripts/kube-binaries.sh or go tool task kube:build)" >&2
	exit 3
fi

mkdir -p "$root"
tmp=$(mktemp -d "$root/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "kube binaries: building $kube_version into $dir (a cold build compiles about 2,000 packages: 9-15 minutes on 2 cores)" >&2
start=$(date +%s)
vpkgs=(k8s.io/component-base/version k8s.io/client-go/pkg/version)
ldflags="-s -w"
for p in "${vpkgs[@]}"; do
	ldflags+=" -X $p.gitVersion=$kube_version -X $p.gitMajor=1 -X $p.gitMinor=36 -X $p.gitTreeState=clean"
done
(
	cd "$mod"
	bash "$repo/scripts/go-build-progress.sh" "kube binaries" -trimpath -ldflags "$ldflags" -o "$tmp/" \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler \
		sigs.k8s.io/kwok/cmd/kwok \
		./cmd/etcd
	# kwok needs stage definitions (without them: "no stages found"): a fake
	# node that becomes ready and keeps a lease, pods that become ready,
	# complete and go away when deleted.
	stages="$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage"
	for f in node/fast/node-initialize.yaml \
		node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
		pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
		cat "$stages/$f"
		echo "---"
	done >"$tmp/kwok-stages.yaml"
)
"$tmp/kube-apiserver" --version >"$tmp/.complete"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
# Older builds are dead weight (~400 MB each): drop them.
find "$root" -mindepth 1 -maxdepth 1 -name 'v*-*' ! -name "$(basename "$dir")" -exec rm -rf {} +
echo "kube binaries: built in $(($(date +%s) - start))s: $(cat "$dir/.complete")" >&2
echo "$dir"
