// Package testdb gives each test (or test package) a fresh, uniquely named
// database on a real MySQL/MariaDB server and drops it afterwards.
//
// The server comes from DEPLOYSYNC_TEST_MYSQL_DSN (a go-sql-driver DSN
// without a database name; default: the server scripts/ensure-mariadb.sh
// starts). A test that needs the database fails when the server is
// unreachable and CI=true, and skips with the reason otherwise, so a
// developer without MariaDB still gets the rest of the suite while CI can
// never pass by silently skipping.
package testdb
