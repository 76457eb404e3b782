#!/usr/bin/env bash
# Long runs of the two randomized checkers (what `go tool task test` runs
# for a few rounds only):
#   - the change-feed checker (internal/feedcheck): random concurrent
#     transactions on MariaDB, followers of the real stream;
#   - the end-to-end convergence checker (internal/convergecheck): ctrld,
#     agents and real API servers under a fault schedule.
#
#   scripts/chaos.sh [--duration 30m] [--feed-seed N] [--converge-seed N]
#
# --duration is the whole run's time: a third goes to the feed checker, the
# rest to the convergence checker (its rounds are slower). A seed flag
# replays that checker's failing round instead (the seed is printed in the
# failure message) and skips the other checker unless it has a seed too.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=30m feed_seed="" converge_seed=""
while [ $# -gt 0 ]; do
	case "$1" in
	--duration) duration="$2"; shift 2 ;;
	--duration=*) duration="${1#*=}"; shift ;;
	--feed-seed) feed_seed="$2"; shift 2 ;;
	--feed-seed=*) feed_seed="${1#*=}"; shift ;;
	--converge-seed) converge_seed="$2"; shift 2 ;;
	--converge-seed=*) converge_seed="${1#*=}"; shift ;;
	-h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "chaos: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done

# Go parses the duration; a third (rounded down to the second) for the feed.
seconds=$(go run ./scripts/chaos/seconds "$duration")
feed=$((seconds / 3))s
converge=$((seconds - seconds / 3))s
export DEPLOYSYNC_KUBE_BIN="$(bash scripts/kube-binaries.sh)"

if [ -n "$feed_seed$converge_seed" ]; then
	if [ -n "$feed_seed" ]; then
		go test -count=1 -timeout 0 -v -run '^TestChangeFeedMatchesTheDatabase$' ./internal/feedcheck -feedcheck.seed="$feed_seed"
	fi
	if [ -n "$converge_seed" ]; then
		go test -count=1 -timeout 0 -v -run '^TestConvergence$' ./internal/convergecheck -convergecheck.seed="$converge_seed"
	fi
	exit 0
fi

echo "chaos: change-feed checker for $feed, then convergence checker for $converge"
go test -count=1 -timeout 0 -v -run '^TestChangeFeedMatchesTheDatabase$' ./internal/feedcheck -feedcheck.duration="$feed" -feedcheck.txs=1000
go test -count=1 -timeout 0 -v -run '^TestConvergence$' ./internal/convergecheck -convergecheck.duration="$converge"
