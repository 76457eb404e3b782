#!/usr/bin/env bash
# Fails when generated code is not what `go tool task gen` makes from the
# current sources: it fingerprints every generated file (those carrying Go's
# "Code generated ... DO NOT EDIT." marker) under ent/ and rpc/, regenerates,
# and compares. On a clean checkout this equals `git diff --exit-code` after
# generation; unlike that, it does not trip over hand-written work in
# progress.
set -euo pipefail
cd "$(dirname "$0")/.."

fingerprint() {
	local dirs=()
	for d in ent rpc; do [[ -d $d ]] && dirs+=("$d"); done
	{ grep -rlE --include='*.go' '^// Code generated .* DO NOT EDIT\.$' "${dirs[@]}" || true; } | sort | xargs -r sha256sum
}

before=$(fingerprint)
# Ent's and the protobuf generators (the only go:generate lines, under
# ent/ and rpc/, what fingerprint covers) are separate tools: build and
# run them at once (on a fresh machine each first
# downloads and compiles its tool, much of it one process at a time).
go generate ./ent/... &
ent=$!
go generate ./rpc/... &
rpc=$!
status=0
wait "$ent" || status=$?
wait "$rpc" || status=$?
if ((status != 0)); then
	echo "go generate failed" >&2
	exit "$status"
fi
after=$(fingerprint)
if [[ "$before" != "$after" ]]; then
	echo "generated code is stale; run 'go tool task gen' and commit the result. Changed files:" >&2
	diff <(echo "$before") <(echo "$after") | grep -E '^[<>]' | awk '{print "  " $3}' | sort -u >&2
	exit 1
fi
echo "generated code is up to date" >&2
