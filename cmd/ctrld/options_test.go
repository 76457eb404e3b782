package main

import (
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/deploysync/deploysync/daemon/retention"
	"github.com/deploysync/deploysync/daemon/stream"
)

// parseServe parses serve's command line (after "serve") into options, as
// the real command does, without serving.
func parseServe(t *testing.T, args ...string) *serveOptions {
	t.Helper()
	o := &serveOptions{}
	a := &cli.App{Commands: []*cli.Command{{Name: "serve", Flags: o.flags(), Action: func(*cli.Context) error { return nil }}}}
	if err := a.Run(append([]string{"ctrld", "serve", "--database-dsn", "u:p@tcp(db:3306)/ds"}, args...)); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return o
}

func TestServeOptionsValidate(t *testing.T) {
	tlsPair := []string{"--tls-cert", "c.pem", "--tls-key", "k.pem"}
	for _, c := range []struct {
		name string
		args []string
		// want are the texts the error must hold; none: valid.
		want []string
	}{
		{name: "plaintext on loopback", args: []string{"--listen", "127.0.0.1:7070"}},
		{name: "plaintext on IPv6 loopback", args: []string{"--listen", "[::1]:7070"}},
		{name: "plaintext on localhost", args: []string{"--listen", "localhost:7070"}},
		{name: "plaintext on every interface, the default", want: []string{`--listen ":7070" is not a loopback address`, "--insecure-listen"}},
		{name: "plaintext on a network address", args: []string{"--listen", "10.0.0.5:7070"}, want: []string{`--listen "10.0.0.5:7070"`}},
		{name: "plaintext on a network address, accepted", args: []string{"--listen", "10.0.0.5:7070", "--insecure-listen"}},
		{name: "TLS on every interface", args: tlsPair},
		{name: "certificate without key", args: []string{"--listen", "127.0.0.1:7070", "--tls-cert", "c.pem"}, want: []string{"--tls-cert and --tls-key go together"}},
		{name: "key without certificate", args: []string{"--listen", "127.0.0.1:7070", "--tls-key", "k.pem"}, want: []string{"--tls-cert and --tls-key go together"}},
		{name: "mutual TLS", args: append([]string{"--tls-client-ca", "ca.pem"}, tlsPair...)},
		{name: "peers over TLS", args: append([]string{"--advertise-addr", "10.0.0.5", "--peer-ca", "ca.pem", "--peer-server-name", "ctrld.example"}, tlsPair...)},
		{name: "peer CA without peer pokes", args: append([]string{"--peer-ca", "ca.pem"}, tlsPair...), want: []string{"--peer-ca says how replicas verify each other", "needs --advertise-addr"}},
		{name: "peer server name without TLS", args: []string{"--listen", "127.0.0.1:7070", "--advertise-addr", "127.0.0.1", "--peer-server-name", "ctrld.example"}, want: []string{"--peer-server-name says"}},
		{name: "peers at the metadata address", args: append([]string{"--advertise-addr", "169.254.169.254"}, tlsPair...), want: []string{`--advertise-addr "169.254.169.254"`, "link-local"}},
		{name: "peers at every interface", args: append([]string{"--advertise-addr", "0.0.0.0:7070"}, tlsPair...), want: []string{`--advertise-addr "0.0.0.0:7070"`}},
		{name: "peers at a name that reads as a number", args: append([]string{"--advertise-addr", "0x7f.1"}, tlsPair...), want: []string{`--advertise-addr "0x7f.1"`}},
		{name: "a reserved namespace that is no namespace name", args: []string{"--listen", "127.0.0.1:7070", "--reserved-namespaces", "cert-manager,Kube"}, want: []string{"--reserved-namespaces", `"Kube"`}},
		{name: "unknown log level", args: []string{"--listen", "127.0.0.1:7070", "--log-level", "loud"}, want: []string{"--log-level", "loud"}},
		{name: "unknown log format", args: []string{"--listen", "127.0.0.1:7070", "--log-format", "xml"}, want: []string{"--log-format", "xml"}},
		{name: "every mistake at once", args: []string{"--tls-key", "k.pem", "--peer-ca", "ca.pem", "--log-format", "xml"},
			want: []string{"--log-format", "--tls-cert and --tls-key go together", "--peer-ca says", `--listen ":7070"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := parseServe(t, c.args...).Validate()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("%v: %v, want valid", c.args, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("%v: valid, want an error naming %q", c.args, c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: %q does not name %q", c.args, err, w)
				}
			}
		})
	}
}

// Every flag lands in its field: defaults, flags and environment variables.
func TestServeFlagsFillTheOptions(t *testing.T) {
	o := parseServe(t)
	if o.DatabaseDSN != "u:p@tcp(db:3306)/ds" || o.Server.ListenAddr != ":7070" || !o.Migrate ||
		o.Server.Stream.SendTimeout != stream.Defaults.SendTimeout || o.Server.Retention.RevisionsKept != retention.Defaults.RevisionsKept ||
		o.Server.Retention.AuditTTL != retention.Defaults.AuditTTL || o.Server.Retention.AuditTTL < 365*24*time.Hour {
		t.Fatalf("defaults: %+v", o)
	}
	t.Setenv("CTRLD_STREAM_SEND_TIMEOUT", "7s")
	t.Setenv("CTRLD_TLS_CLIENT_CA", "ca.pem")
	o = parseServe(t, "--max-streams", "9", "--advertise-addr", "10.0.0.5", "--migrate=false", "--change-ttl", "1h", "--audit-ttl", "48h")
	if o.Server.Stream.SendTimeout != 7*time.Second || o.Server.TLSClientCA != "ca.pem" || o.Server.Stream.MaxStreams != 9 ||
		o.Server.Peers.AdvertiseAddr != "10.0.0.5" || o.Migrate || o.Server.Retention.TTL != time.Hour || o.Server.Retention.AuditTTL != 48*time.Hour {
		t.Fatalf("flags and environment: %+v", o)
	}
	o = parseServe(t, "--listen", "127.0.0.1:7070", "--reserved-namespaces", "cert-manager, platform-agents")
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if why, reserved := o.Server.Reserved.Why("cert-manager"); !reserved {
		t.Fatalf("--reserved-namespaces cert-manager: not reserved (%s)", why)
	}
	if _, reserved := o.Server.Reserved.Why("acme-prod"); reserved {
		t.Fatalf("flags and environment: %+v", o)
	}
}

// serve refuses bad flags before it opens anything: the database here
// answers nowhere, and the refusal names the flag, not the database.
func TestServeRefusesBadFlagsBeforeStarting(t *testing.T) {
	a := app()
	a.ExitErrHandler = func(*cli.Context, error) {}
	err := a.Run([]string{"ctrld", "serve", "--database-dsn", "u:p@tcp(127.0.0.1:1)/ds", "--listen", "10.0.0.5:7070", "--migrate=false"})
	if err == nil || !strings.Contains(err.Error(), `--listen "10.0.0.5:7070" is not a loopback address`) {
		t.Fatalf("got %v, want the --listen refusal", err)
	}
}
