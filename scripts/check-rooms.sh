#!/usr/bin/env bash
# Fails when a binary links a package that belongs to another binary: each
# binary links what it needs and nothing more (issue 23). agentd and
# unkey-tui are clients of ctrld and must not carry its database layer (a
# bug or a CVE there would be theirs too, and their builds would grow by
# it); ctrld must not carry the agent's Kubernetes machinery or the console.
# design.md's "nothing in agentd/ imports daemon/" is checked here on what
# is linked, not only on what is written.
#
# What is linked depends on the target and the build tags, so each binary
# is checked for every GOOS it ships to and with every build tag the
# module's own files use: a forbidden import in a _windows.go file or
# behind //go:build sometag would be missed by the host's default build.
#
# On a failure it names the binary, the forbidden package and the chain of
# imports that pulls it in, shortest first, so the import to cut is plain.
set -euo pipefail
cd "$(dirname "$0")/.."

module=$(go list -m)

# binary | forbidden import path (itself and everything below it) | why
rules="
agentd|$module/daemon|ctrld's packages
agentd|$module/ent|ctrld's Ent layer
agentd|entgo.io/ent|ctrld's Ent layer
agentd|github.com/go-sql-driver/mysql|ctrld's MySQL driver
agentd|$module/tui|the console
unkey-tui|$module/daemon|ctrld's packages
unkey-tui|$module/ent|ctrld's Ent layer
unkey-tui|entgo.io/ent|ctrld's Ent layer
unkey-tui|github.com/go-sql-driver/mysql|ctrld's MySQL driver
unkey-tui|$module/agentd|the agent's packages
unkey-tui|k8s.io/client-go|the agent's Kubernetes client
ctrld|$module/agentd|the agent's packages
ctrld|$module/tui|the console, but for the SSH console's packages (see allowed)
ctrld|k8s.io/client-go|the agent's Kubernetes client; only internal/manifest's apply configurations are allowed
"

# binary | import path allowed although a rule forbids a path above it
# (itself only, not what is below it) | why. ctrld serves the console over
# SSH itself (docs/design.md, "The console over SSH"): so that no console
# host holds a credential, ctrld links the console (tui) and its SSH server
# (tui/sshserve) and the one-shot commands a session may run (tui/cmdline),
# wired in cmd/ctrld; daemon/ still links none of tui/, nor tui/ any of
# daemon/ (checked after the rules). Any other package of tui/ stays out
# until it is allowed here with its reason.
allowed="
ctrld|$module/tui|the console the SSH server runs per session
ctrld|$module/tui/sshserve|the SSH server: listener, key auth, session limits
ctrld|$module/tui/cmdline|the one-shot commands an SSH session runs (ssh HOST regions)
"

# binary | import path allowed, with everything it imports, although a
# rule forbids a path above it | why. The check does not look past it:
# what it imports is linked only for it. ctrld shows operators the objects
# the agent applies (OperatorService.GetDesiredState), built by the
# agent's own code (internal/manifest) as client-go's apply
# configurations. Those are data types, but client-go/applyconfigurations/
# meta/v1 imports client-go/discovery for its unstructured extractor,
# which brings client-go's REST client, transport and scheme along: linked,
# never reachable from ctrld's own code, since any other import of
# client-go (the clientset, informers, rest itself) still fails here.
allowed_with_imports="
ctrld|k8s.io/client-go/applyconfigurations/apps/v1|a deployment's StatefulSet as the agent applies it (internal/manifest)
ctrld|k8s.io/client-go/applyconfigurations/core/v1|a deployment's Service and pod template as the agent applies them (internal/manifest)
ctrld|k8s.io/client-go/applyconfigurations/meta/v1|their metadata (internal/manifest)
"

goos_list="linux darwin windows"

# The union of the build tags in the module's non-test files (nested
# modules, testdata and vendor left out), without the names the toolchain
# sets itself (GOOS, GOARCH, unix, cgo, gc, gccgo, go1.N, goexperiment.X)
# and without ignore, which marks files that are never built.
prune=(-name .git -o -name testdata -o -name vendor)
while read -r dir; do
	prune+=(-o -path "$dir")
done < <(find . -mindepth 2 -name go.mod | sed 's|/go.mod$||')
toolchain=" $(go tool dist list | tr '/' '\n' | sort -u | tr '\n' ' ') unix cgo gc gccgo ignore "
tags=$(find . -type d \( "${prune[@]}" \) -prune -o -type f -name '*.go' ! -name '*_test.go' -print0 |
	{ xargs -0 grep -h '^//go:build' || true; } |
	sed 's|^//go:build||' | grep -oE '[A-Za-z0-9_.]+' | sort -u |
	while read -r tag; do
		[[ $toolchain == *" $tag "* || $tag == go1.* || $tag == goexperiment.* ]] || echo "$tag"
	done | paste -sd, -)
# Without the tags as well when there are any: a file behind
# //go:build !sometag is built only then.
tag_sets=("")
[[ -z $tags ]] || tag_sets+=("$tags")

failed=0
reported=" " # bin|forbidden ..., each told once however many targets link it
for goos in $goos_list; do
	for tag_set in "${tag_sets[@]}"; do
		# One line per package linked by any of the binaries: the package,
		# then what it imports. A package imports the same whichever binary
		# links it, so one listing serves them all.
		bins=$(cut -d'|' -f1 <<<"$rules" | sort -u)
		graph=$(GOOS=$goos go list -tags "$tag_set" -f '{{.ImportPath}}{{range .Imports}} {{.}}{{end}}' -deps $(printf './cmd/%s ' $bins))
		for bin in $bins; do
			while IFS='|' read -r rule_bin forbidden why; do
				[[ $rule_bin == "$bin" && $reported != *" $bin|$forbidden "* ]] || continue
				ok=$(awk -F'|' -v bin="$bin" '$1 == bin { printf "%s ", $2 }' <<<"$allowed")
				leaves=$(awk -F'|' -v bin="$bin" '$1 == bin { printf "%s ", $2 }' <<<"$allowed_with_imports")
				# The shortest chain of imports from the main package to a package
				# at or below $forbidden (breadth-first), or nothing; a package
				# allowed with its imports is not looked past.
				chain=$(awk -v root="$module/cmd/$bin" -v bad="$forbidden" -v ok="$ok $leaves" -v leaves="$leaves" '
					BEGIN {
						k = split(ok, oks, " "); for (i = 1; i <= k; i++) allowed[oks[i]] = 1
						k = split(leaves, ls, " "); for (i = 1; i <= k; i++) leaf[ls[i]] = 1
					}
					{ imports[$1] = $0 }
					function forbidden(p) { return !(p in allowed) && (p == bad || index(p, bad "/") == 1) }
					END {
						queue[0] = root; seen[root] = 1; n = 1
						for (i = 0; i < n; i++) {
							p = queue[i]
							if (forbidden(p)) {
								path = p
								while (p in from) { p = from[p]; path = p " -> " path }
								print path
								exit
							}
							if (p in leaf) continue
							k = split(imports[p], next_, " ")
							for (j = 2; j <= k; j++) if (!(next_[j] in seen)) {
								seen[next_[j]] = 1; from[next_[j]] = p; queue[n++] = next_[j]
							}
						}
					}' <<<"$graph")
				if [[ -n $chain ]]; then
					failed=1
					reported+="$bin|$forbidden "
					echo "check-rooms: cmd/$bin must not link $forbidden ($why), but links ${chain##* -> } (GOOS=$goos${tag_set:+ -tags $tag_set}):" >&2
					echo "  ${chain//$module\//}" >&2
				fi
			done <<<"$rules"
		done
	done
done
# The rooms inside ctrld: its packages (daemon/) link no console, and the
# console (tui/) links none of ctrld's packages; cmd/ctrld alone wires the
# two together.
for pair in "daemon:tui" "tui:daemon"; do
	from=${pair%%:*} to=${pair##*:}
	if linked=$(go list -deps "./$from/..." | grep -E "^$module/$to(/|\$)"); then
		failed=1
		echo "check-rooms: $from/ must not link $to/, but links: $(tr '\n' ' ' <<<"$linked")" >&2
	fi
done
if ((failed)); then
	echo "check-rooms: cut the import named above (move what is needed into a package both sides may link, e.g. internal/bearer)" >&2
	exit 1
fi
echo "check-rooms: agentd, ctrld and unkey-tui each link only their own packages (GOOS $goos_list; tags: ${tags:-none})" >&2
