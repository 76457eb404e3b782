// Package testcerts writes a throwaway CA with a server certificate for
// 127.0.0.1/localhost and a client certificate, for tests of TLS and
// mutual TLS.
package testcerts
