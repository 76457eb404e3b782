// Package galeracheck checks deploysync on a multi-primary database: a
// three-node MariaDB Galera cluster on loopback (internal/testmariadb),
// with a ctrld replica on each node. Its tests, in galera_test.go, run the
// change-feed checker (internal/feedcheck) with the workers writing
// through all three nodes at once and followers watching through every
// replica, then again while a database node and a ctrld replica are lost,
// and check that operators never see the certification conflicts that
// writes through several nodes cause.
//
// The package holds no code of its own: only the tests and this text.
package galeracheck
