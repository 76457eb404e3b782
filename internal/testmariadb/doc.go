// Package testmariadb runs MariaDB servers of a test's own: one server
// (Start), or a three-node Galera cluster on loopback (StartGalera). Each
// lives in a directory of its own under internal/testproc's reaped state
// root, on free loopback ports, so a test may kill and restart it without
// disturbing the shared test server on 127.0.0.1:3306 that other packages
// use at the same time, and a killed test binary leaves neither a process
// nor its data behind.
//
// The servers need Debian's mariadb-server (mariadbd, mariadb-install-db,
// and for Galera galera-4 and rsync, which it brings along):
// scripts/ensure-mariadb.sh installs it. Own and OwnGalera fail the test in
// CI when it is missing and go on without a server elsewhere.
package testmariadb
