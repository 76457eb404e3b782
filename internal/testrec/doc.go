// Package testrec runs a test helper against a recording testing.TB, to
// test how helpers end a test (fail in CI, skip elsewhere) without ending
// the test that checks them.
package testrec
