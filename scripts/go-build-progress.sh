#!/usr/bin/env bash
# Runs `go build -v ARGS...` for a slow one-time build and prints a line of
# progress to stderr every 100 packages compiled, so a newcomer watching a
# cold first run sees what is happening instead of a silent terminal. Only
# packages that are not in the build cache are compiled, and counted. Lines
# that are not a package path (compiler errors) pass through as they are.
#
# Usage: go-build-progress.sh LABEL [go build flags and packages...]
set -euo pipefail

label=$1
shift

report() {
	local compiled=0 line
	while IFS= read -r line; do
		if [[ $line =~ ^[^[:space:]#:]+$ ]]; then
			compiled=$((compiled + 1))
			if ((compiled % 100 == 0)); then
				echo "$label: $compiled packages compiled (${SECONDS}s)" >&2
			fi
		else
			echo "$line" >&2
		fi
	done
	echo "$label: $compiled packages compiled in ${SECONDS}s" >&2
}

SECONDS=0
go build -v "$@" 2>&1 | report
