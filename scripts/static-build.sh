#!/usr/bin/env bash
# Builds ctrld and agentd with exactly the command in their Dockerfiles'
# build stages (static: CGO_ENABLED=0, -trimpath), into OUTDIR if given,
# else into a temporary directory that is thrown away.
#
# `go tool task test` runs it once before the tests, printing progress, so
# the Dockerfile test (which runs the same commands) and the systemd test
# (which builds through this script) find every package in the build cache
# and only link. Before, they compiled the daemons' world twice more, with
# flags of their own: 12.5 minutes of a newcomer's first run.
#
# Usage: static-build.sh [OUTDIR]
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-}
if [[ -z $out ]]; then
	out=$(mktemp -d)
	trap 'rm -rf "$out"' EXIT
fi
cd "$repo"
for daemon in ctrld agentd; do
	dockerfile="deploy/docker/Dockerfile.$daemon"
	# The build stage's one `RUN ... go build ...` line.
	cmd=$(sed -n 's/^RUN \(.*go build .*\)$/\1/p' "$dockerfile")
	if [[ -z $cmd || $cmd != *"/out/$daemon"* ]]; then
		echo "static-build: no 'RUN ... go build ... -o /out/$daemon' line in $dockerfile" >&2
		exit 1
	fi
	# OUTDIR goes into a shell command: quoted, so that spaces and & in it
	# stay part of the path.
	outq=$(printf %q "$out/")
	cmd=${cmd//\/out\//"$outq"}
	cmd=${cmd/go build /bash scripts\/go-build-progress.sh static-$daemon }
	sh -c "$cmd"
done
