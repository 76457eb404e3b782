#!/usr/bin/env bash
# Long runs of the two randomized checkers (what `go tool task test` runs
# for a few rounds only):
#   - the change-feed checker (internal/feedcheck): random concurrent
#     transactions on MariaDB, followers of the real stream;
#   - the end-to-end convergence checker (internal/convergecheck): ctrld,
#     agents and real API servers under a fault schedule.
#
#   scripts/chaos.sh [--duration 30m] [--feed-seed N] [--converge-seed N [--converge-rounds R]]
#
# --duration is the whole run's time: a third goes to the feed checker, the
# rest to the convergence checker (its rounds are slower). A seed flag
# replays that checker's failing run instead (the failure prints the seed)
# and skips the other checker unless it has a seed too. A convergence
# failure in round R > 3 replays with --converge-rounds R (the failure
# message names it). Runs as CI does (CI=true): a missing MariaDB server
# binary or Kubernetes binary fails the run instead of skipping a check.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "chaos: $*" >&2; exit 2; }

duration=30m feed_seed="" converge_seed="" converge_rounds=""
while [ $# -gt 0 ]; do
	case "$1" in
	--duration) duration="${2:?--duration needs a value}"; shift 2 ;;
	--duration=*) duration="${1#*=}"; shift ;;
	--feed-seed) feed_seed="${2:?--feed-seed needs a value}"; shift 2 ;;
	--feed-seed=*) feed_seed="${1#*=}"; shift ;;
	--converge-seed) converge_seed="${2:?--converge-seed needs a value}"; shift 2 ;;
	--converge-seed=*) converge_seed="${1#*=}"; shift ;;
	--converge-rounds) converge_rounds="${2:?--converge-rounds needs a value}"; shift 2 ;;
	--converge-rounds=*) converge_rounds="${1#*=}"; shift ;;
	-h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
if [ -n "$converge_rounds" ]; then
	[[ $converge_rounds =~ ^[1-9][0-9]*$ ]] || die "--converge-rounds $converge_rounds: want a number of rounds, 1 or more"
	[ -n "$converge_seed" ] || die "--converge-rounds replays a seed: give --converge-seed too"
fi

# Go parses the duration; a third (rounded down to the second) for the feed.
seconds=$(go run ./scripts/chaos/seconds "$duration")
feed=$((seconds / 3))s
converge=$((seconds - seconds / 3))s
# Two steps: `export X="$(cmd)"` would hide cmd's failure from set -e.
kube_bin=$(bash scripts/kube-binaries.sh)
export DEPLOYSYNC_KUBE_BIN="$kube_bin"
export CI=true

if [ -n "$feed_seed$converge_seed" ]; then
	if [ -n "$feed_seed" ]; then
		go test -count=1 -timeout 0 -v -run '^TestChangeFeedMatchesTheDatabase$' ./internal/feedcheck -feedcheck.seed="$feed_seed"
	fi
	if [ -n "$converge_seed" ]; then
		go test -count=1 -timeout 0 -v -run '^TestConvergence$' ./internal/convergecheck -convergecheck.seed="$converge_seed" \
			${converge_rounds:+-convergecheck.rounds="$converge_rounds"}
	fi
	exit 0
fi

echo "chaos: change-feed checker for $feed, then convergence checker for $converge"
go test -count=1 -timeout 0 -v -run '^TestChangeFeedMatchesTheDatabase$' ./internal/feedcheck -feedcheck.duration="$feed" -feedcheck.txs=1000
go test -count=1 -timeout 0 -v -run '^TestConvergence$' ./internal/convergecheck -convergecheck.duration="$converge"
