#!/usr/bin/env bash
# Fails when a binary links a package that belongs to another binary: each
# binary links what it needs and nothing more (issue 23). agentd and
# unkey-tui are clients of ctrld and must not carry its database layer (a
# bug or a CVE there would be theirs too, and their builds would grow by
# it); ctrld must not carry the agent's Kubernetes machinery or the console.
# design.md's "nothing in agentd/ imports daemon/" is checked here on what
# is linked, not only on what is written.
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

failed=0
for bin in $(cut -d'|' -f1 <<<"$rules" | sort -u); do
	# One line per linked package: the package, then what it imports.
	graph=$(go list -f '{{.ImportPath}}{{range .Imports}} {{.}}{{end}}' -deps "./cmd/$bin")
	while IFS='|' read -r rule_bin forbidden why; do
		[[ $rule_bin == "$bin" ]] || continue
		# The shortest chain of imports from the main package to a package
		# at or below $forbidden (breadth-first), or nothing.
		ok=$(awk -F'|' -v bin="$bin" '$1 == bin { printf "%s ", $2 }' <<<"$allowed")
		chain=$(awk -v root="$module/cmd/$bin" -v bad="$forbidden" -v ok="$ok" '
			BEGIN { k = split(ok, oks, " "); for (i = 1; i <= k; i++) allowed[oks[i]] = 1 }
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
					k = split(imports[p], next_, " ")
					for (j = 2; j <= k; j++) if (!(next_[j] in seen)) {
						seen[next_[j]] = 1; from[next_[j]] = p; queue[n++] = next_[j]
					}
				}
			}' <<<"$graph")
		if [[ -n $chain ]]; then
			failed=1
			echo "check-rooms: cmd/$bin must not link $forbidden ($why), but links ${chain##* -> }:" >&2
			echo "  ${chain//$module\//}" >&2
		fi
	done <<<"$rules"
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
echo "check-rooms: agentd, ctrld and unkey-tui each link only their own packages" >&2
