// Package storetest gives tests a migrated database on the real test server,
// opened through the same constructor ctrld uses.
package storetest
