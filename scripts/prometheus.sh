#!/usr/bin/env bash
# Prints the path of Debian's Prometheus server (package prometheus, 2.42 on
# Debian 12), fetching it into the user cache on first use: the real server
# tests run through internal/promtest. It is scripts/promtool.sh --server:
# the same .deb, unpacked (not installed) into the same cache directory
# beside promtool, with the same ownership checks and lock.
#
# Usage: prometheus.sh
# Env: DEPLOYSYNC_PROMTOOL_CACHE overrides the cache root (see promtool.sh).
set -euo pipefail
if (($#)); then
	echo "usage: $0" >&2
	exit 2
fi
exec bash "$(dirname "${BASH_SOURCE[0]}")/promtool.sh" --server
