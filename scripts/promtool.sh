#!/usr/bin/env bash
# Prints the path of a promtool that checks deploy/monitoring's alert rules,
# fetching it into the user cache on first use; with --server, the path of
# the Prometheus server from the same package instead, which the tests run
# as a real Prometheus (internal/promtest; scripts/prometheus.sh is that
# mode's name).
#
# By default that is Debian's promtool (package prometheus), unpacked from the
# .deb and not installed: no Prometheus service starts, nothing else is
# installed, and it takes seconds. The one .deb yields both binaries, so both
# are unpacked into one cache directory, checked and replaced together.
# Building Prometheus 3's promtool from the module proxy instead compiles
# about 1,100 packages (client-go and the AWS, Azure and GCP SDKs among them,
# even without the service-discovery plugins) and took 23 minutes of a
# newcomer's first test run.
#
# Debian 12 ships Prometheus 2.42, while users run 3.x too. The two read
# some things differently (3.x ranges are left-open, its regex dot matches a
# newline, it takes UTF-8 names), so the rules' unit tests must pass under
# both: `--v3` builds Prometheus 3's promtool (the version below) without
# the service-discovery plugins, and `go tool task monitoring:v3` runs the
# same tests with it. CI runs the Debian one only.
#
# Usage: promtool.sh [--v3 | --server]
# Env: DEPLOYSYNC_PROMTOOL_CACHE overrides the cache root
#      (default ${XDG_CACHE_HOME:-$HOME/.cache}/deploysync/promtool).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root=${DEPLOYSYNC_PROMTOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/deploysync/promtool}
say() { echo "$binary: $*" >&2; }

v3=false
binary=promtool
case "${1:-}" in
--v3) v3=true ;;
--server) binary=prometheus ;;
"") ;;
*) echo "usage: $0 [--v3 | --server]" >&2; exit 2 ;;
esac

# v0.3XX.Y is Prometheus 3.XX.Y.
prometheus_module_version=v0.313.5
if $v3; then
	dir="$root/$prometheus_module_version-nosd"
else
	dir="$root/debian"
fi
# What the directory must hold: Debian's package gives both binaries, the
# v3 build promtool alone. A Debian cache from before --server existed
# holds promtool only, and is fetched again.
if $v3; then
	binaries=(promtool)
else
	binaries=(promtool prometheus)
fi
# A binary that others own or may write to (it, or its directory) could
# have been swapped: the tests would run someone else's binary. Such a
# cache is fetched again.
private() {
	local mode
	mode=$(stat -c %a "$1")
	[[ -O $1 && $mode != *[2367]? && $mode != *[2367] ]]
}
cached() {
	[[ -d $dir ]] && private "$dir" || return 1
	local b
	for b in "${binaries[@]}"; do
		[[ -x "$dir/$b" ]] && private "$dir/$b" || return 1
	done
}
if cached; then
	echo "$dir/$binary"
	exit 0
fi

mkdir -p "$root"
# One fetch at a time: test processes run in parallel, and a second fetch
# would replace the directory under the first one's caller (and two
# apt-get runs collide on apt's lock).
exec 9>"$root/.lock"
flock 9
if cached; then
	echo "$dir/$binary"
	exit 0
fi
tmp=$(mktemp -d "$root/.fetch-XXXXXX") # 0700 until it is complete
trap 'rm -rf "$tmp"' EXIT

if $v3; then
	say "building Prometheus $prometheus_module_version's promtool without service discovery (about 1,100 packages; several minutes)"
	(
		cd "$tmp"
		export GOWORK=off GOFLAGS=-mod=mod
		go mod init promtoolbuild >/dev/null 2>&1
		go get "github.com/prometheus/prometheus/cmd/promtool@$prometheus_module_version" >/dev/null
		bash "$repo/scripts/go-build-progress.sh" promtool -tags remove_all_sd -trimpath -ldflags=-s\ -w \
			-o "$tmp/promtool" github.com/prometheus/prometheus/cmd/promtool
	)
else
	say "fetching Debian's prometheus package for its promtool and server (unpacked into $dir, not installed)"
	(
		cd "$tmp"
		# apt verifies the package against its signed index. It downloads
		# as root here (the private directory is closed to its _apt user),
		# which it only warns about.
		if ! apt-get download prometheus >/dev/null 2>&1; then
			apt-get update -qq
			apt-get download prometheus >/dev/null 2>&1
		fi
		dpkg-deb -x prometheus_*.deb unpacked
		# The server's web UI assets and service files stay behind: the
		# tests use its HTTP API only.
		mv unpacked/usr/bin/promtool unpacked/usr/bin/prometheus "$tmp/"
		rm -rf unpacked prometheus_*.deb
	)
fi
"$tmp/promtool" --version >"$tmp/VERSION" 2>&1
if [[ -e "$tmp/prometheus" ]]; then
	"$tmp/prometheus" --version >>"$tmp/VERSION" 2>&1
fi
chmod 0755 "$tmp"
rm -rf "$dir"
mv -T "$tmp" "$dir"
trap - EXIT
say "$(grep ', version ' "$dir/VERSION" | cut -d'(' -f1 | paste -sd'+' | sed 's/ +/ and /')in $dir"
echo "$dir/$binary"
