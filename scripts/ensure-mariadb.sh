#!/usr/bin/env bash
# Makes sure a MariaDB server answers for development and tests.
#
# When nothing answers on $DEPLOYSYNC_MYSQL_HOST:$DEPLOYSYNC_MYSQL_PORT
# (default 127.0.0.1:3306) this installs mariadb-server from Debian's packages
# (root, non-interactive), binds it to 127.0.0.1 only, starts it and waits
# until it answers. It then makes sure the test user exists (default
# deploysync/deploysync, allowed to create and drop databases). Safe to run
# any number of times; exits non-zero with the reason when it cannot.
#
# A server that already answers (yours, or one in CI) is left as it is; only
# the user is added, when this script can reach the server as root over its
# local socket. Either way it also makes sure mariadbd and mariadb-install-db
# are installed, for the convergence checker's own server.
set -euo pipefail

host=${DEPLOYSYNC_MYSQL_HOST:-127.0.0.1}
port=${DEPLOYSYNC_MYSQL_PORT:-3306}
user=${DEPLOYSYNC_MYSQL_USER:-deploysync}
password=${DEPLOYSYNC_MYSQL_PASSWORD:-deploysync}

say() { echo "ensure-mariadb: $*" >&2; }
die() { say "$*"; exit 1; }

answers() {
	# A MySQL server greets first: a successful TCP connect plus a non-empty
	# first read means something speaking the protocol is listening.
	timeout 2 bash -c "exec 3<>/dev/tcp/$host/$port && head -c 4 <&3 | grep -q ." 2>/dev/null
}

start_local() {
	mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
	if command -v service >/dev/null && service mariadb start >/dev/null 2>&1; then
		return 0
	fi
	# No init system that knows the service (minimal containers): start the
	# server directly in the background.
	nohup mysqld_safe >/tmp/deploysync-mysqld.log 2>&1 &
}

if ! answers; then
	case "$host" in
	127.0.0.1 | localhost) ;;
	*) die "no MySQL server answers on $host:$port, and only a local one can be installed; start yours or unset DEPLOYSYNC_MYSQL_HOST" ;;
	esac
	[[ $(id -u) -eq 0 ]] || die "no MySQL server on $host:$port and installing one needs root (run as root, or start MariaDB/MySQL yourself)"
	if ! command -v mariadbd >/dev/null && ! command -v mysqld >/dev/null; then
		command -v apt-get >/dev/null || die "no MySQL server on $host:$port and no apt-get to install mariadb-server; install MariaDB >= 10.6 or MySQL 8 yourself"
		say "installing mariadb-server from Debian packages"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >/dev/null || die "apt-get update failed"
		apt-get install -y -qq mariadb-server >/dev/null || die "apt-get install mariadb-server failed"
	fi
	conf=/etc/mysql/mariadb.conf.d/99-deploysync.cnf
	if [[ ! -f $conf ]]; then
		mkdir -p "$(dirname "$conf")"
		cat >"$conf" <<CNF
# Written by deploysync's scripts/ensure-mariadb.sh: loopback only, and room
# for the tests' concurrent writers.
[mysqld]
bind-address = 127.0.0.1
port = $port
max_connections = 1000
CNF
	fi
	say "starting MariaDB on 127.0.0.1:$port"
	start_local
	for _ in $(seq 1 60); do
		answers && break
		sleep 0.5
	done
	answers || die "MariaDB did not answer on $host:$port within 30s (see /tmp/deploysync-mysqld.log or the system log)"
fi

# The test user: created through the root socket when we can get there.
if command -v mariadb >/dev/null && [[ $(id -u) -eq 0 ]] && mariadb -uroot -e 'SELECT 1' >/dev/null 2>&1; then
	mariadb -uroot <<SQL
CREATE USER IF NOT EXISTS '$user'@'127.0.0.1' IDENTIFIED BY '$password';
CREATE USER IF NOT EXISTS '$user'@'localhost' IDENTIFIED BY '$password';
GRANT ALL PRIVILEGES ON *.* TO '$user'@'127.0.0.1';
GRANT ALL PRIVILEGES ON *.* TO '$user'@'localhost';
SQL
fi
say "MariaDB answers on $host:$port (user $user)"

# The convergence checker (internal/convergecheck) also runs a MariaDB server
# of its own, to kill and restart as a fault, so it needs mariadbd and
# mariadb-install-db even where the server above is someone else's. Debian
# puts mariadbd in /usr/sbin, which a non-root PATH may lack (the checker
# looks there too). Debian's mariadb-server-core has both and no service
# that would start.
has_server_binaries() {
	local b
	for b in mariadbd mariadb-install-db; do
		command -v "$b" >/dev/null || [[ -x /usr/sbin/$b || -x /usr/local/sbin/$b ]] || return 1
	done
}
if ! has_server_binaries; then
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
		say "installing mariadb-server-core (mariadbd, mariadb-install-db) for the convergence checker's own server"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >/dev/null || die "apt-get update failed"
		apt-get install -y -qq --no-install-recommends mariadb-server-core >/dev/null || die "apt-get install mariadb-server-core failed"
		has_server_binaries || die "mariadb-server-core installed, but mariadbd or mariadb-install-db is still missing"
	else
		say "warning: no mariadbd or mariadb-install-db: the convergence checker cannot run its own MariaDB (with CI=true its tests fail); install mariadb-server-core"
	fi
fi

# The Galera checks (internal/galeracheck) run a three-node Galera cluster of
# their own: they need Debian's galera-4 (the replication library) and rsync
# (the state transfer that lets a node join), both of which mariadb-server
# depends on, and, as root, the mysql user to run the nodes as.
has_galera() {
	[[ -e /usr/lib/galera/libgalera_smm.so ]] && command -v rsync >/dev/null &&
		{ command -v wsrep_sst_rsync >/dev/null || [[ -x /usr/bin/wsrep_sst_rsync ]]; } &&
		{ command -v ss >/dev/null || command -v lsof >/dev/null; } &&
		{ [[ $(id -u) -ne 0 ]] || id mysql >/dev/null 2>&1; }
}
if ! has_galera; then
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
		say "installing mariadb-server's state-transfer scripts, galera-4, rsync and iproute2 for the Galera checks' own cluster"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >/dev/null || die "apt-get update failed"
		# mariadb-server holds wsrep_sst_rsync; its service must not start
		# here (another server may own 3306): policy-rc.d says no.
		own_policy=
		if [[ ! -e /usr/sbin/policy-rc.d ]]; then
			printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && own_policy=1
		fi
		status=0
		apt-get install -y -qq --no-install-recommends mariadb-server galera-4 rsync iproute2 >/dev/null || status=$?
		[[ -z $own_policy ]] || rm -f /usr/sbin/policy-rc.d
		[[ $status -eq 0 ]] || die "apt-get install mariadb-server galera-4 rsync iproute2 failed"
		id mysql >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin mysql || die "could not create the mysql user"
		has_galera || die "galera-4 and rsync installed, but the Galera checks' needs are still missing"
	else
		say "warning: no galera-4, rsync, wsrep_sst_rsync, ss/lsof or mysql user: the Galera checks cannot run their own cluster (with CI=true their tests fail); install mariadb-server, galera-4, rsync and iproute2"
	fi
fi
