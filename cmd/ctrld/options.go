package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/deploysync/deploysync/daemon/cluster"
	"github.com/deploysync/deploysync/daemon/peers"
	"github.com/deploysync/deploysync/daemon/retention"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/stream"
	"github.com/deploysync/deploysync/daemon/tailer"
	"github.com/deploysync/deploysync/daemon/workflow"
	"github.com/deploysync/deploysync/internal/dial"
	"github.com/deploysync/deploysync/tui/sshserve"
)

// serveOptions are `ctrld serve`'s settings. Each flag writes one field
// (flags binds them); Validate refuses settings that cannot work together
// or would be unsafe, naming the flags, before anything is opened or
// listened on.
//
// A new flag is a line in flags writing a field (of Server, when the server
// takes it, else a field here) and, when some of its values are wrong, a
// check in Validate with a row in options_test.go.
type serveOptions struct {
	DatabaseDSN string
	LogLevel    string
	LogFormat   string
	// InsecureListen accepts serving without TLS on a non-loopback
	// Server.ListenAddr.
	InsecureListen bool
	// Migrate migrates the schema before serving.
	Migrate bool
	// ReservedNamespaces is --reserved-namespaces as given; Validate
	// parses it into Server.Reserved.
	ReservedNamespaces string
	// Server is what the server is started with; most flags write a
	// field of it.
	Server server.Config
	// SSH configures the console over SSH (sshconsole.go); off when
	// SSH.Listen is empty.
	SSH sshserve.Config
}

// env names a serve flag's environment variable: CTRLD_NAME.
func env(name string) []string {
	return []string{"CTRLD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}

// flags are serve's flags, each writing its field of o.
func (o *serveOptions) flags() []cli.Flag {
	dsn := *databaseFlag
	dsn.Destination = &o.DatabaseDSN
	reserved := *reservedFlag
	reserved.Destination = &o.ReservedNamespaces
	level, format := *logLevelFlag, *logFormatFlag
	level.Destination, format.Destination = &o.LogLevel, &o.LogFormat
	s := &o.Server
	return []cli.Flag{
		&dsn, &level, &format, &reserved,
		&cli.StringFlag{Name: "listen", Value: ":7070", Destination: &s.ListenAddr, Usage: "gRPC listen address; without --tls-cert a loopback one (127.0.0.1:7070, [::1]:7070, localhost:7070) unless --insecure-listen", EnvVars: env("listen")},
		&cli.BoolFlag{Name: "insecure-listen", Destination: &o.InsecureListen, Usage: "serve without TLS on a non-loopback --listen address: tokens cross the network in the clear (only behind a TLS-terminating proxy or on a network you trust)", EnvVars: env("insecure-listen")},
		&cli.StringFlag{Name: "metrics-listen", Value: ":9090", Destination: &s.MetricsAddr, Usage: "address for /metrics, /healthz and /readyz (empty: off)", EnvVars: env("metrics-listen")},
		&cli.StringFlag{Name: "tls-cert", Destination: &s.TLSCert, Usage: "TLS certificate `file` (PEM); with --tls-key enables TLS", EnvVars: env("tls-cert")},
		&cli.StringFlag{Name: "tls-key", Destination: &s.TLSKey, Usage: "TLS private key `file` (PEM)", EnvVars: env("tls-key")},
		&cli.StringFlag{Name: "tls-client-ca", Destination: &s.TLSClientCA, Usage: "CA `file` (PEM): require client certificates signed by it", EnvVars: env("tls-client-ca")},
		&cli.StringFlag{Name: "advertise-addr", Destination: &s.Peers.AdvertiseAddr, Usage: "`host[:port]` the other ctrld replicas on this database dial to reach this one itself, not a load balancer (e.g. the pod's IP; the port defaults to --listen's). " +
			"Replicas register in the table ctrld_replicas and poke each other after a write, so a change reaches every replica's agents at once. " +
			"Empty: off; a change written through another replica then reaches this one's agents at its next poll, up to --poll-interval later. With --tls-cert, replicas dial each other with TLS (see --peer-ca)", EnvVars: env("advertise-addr")},
		&cli.StringFlag{Name: "peer-ca", Destination: &s.PeerCA, Usage: "CA `file` (PEM) that the other replicas' certificates are verified with when ctrld serves TLS (default: the system's roots). With --tls-client-ca, this replica presents its --tls-cert to them, which must then be signed by that CA and allow client authentication", EnvVars: env("peer-ca")},
		&cli.StringFlag{Name: "peer-server-name", Destination: &s.PeerServerName, Usage: "`name` the other replicas' certificates are verified for (default: the host of each one's --advertise-addr), when their certificates name a service rather than each replica's address", EnvVars: env("peer-server-name")},
		&cli.DurationFlag{Name: "stream-send-timeout", Value: stream.Defaults.SendTimeout, Destination: &s.Stream.SendTimeout, Usage: "a stream whose client takes no data for this long while data waits for it (counted from when it last took some, whatever is queued) is ended and its connection closed (logged, counted in deploysync_stream_stalled_total); the agent dials again and resumes from its last bookmark", EnvVars: env("stream-send-timeout")},
		&cli.IntFlag{Name: "max-full-syncs", Value: stream.Defaults.MaxFullSyncs, Destination: &s.Stream.MaxFullSyncs, Usage: "full syncs reading a page from the database at once; more wait for a slot, holding nothing (a full sync waiting on its client holds no slot)", EnvVars: env("max-full-syncs")},
		&cli.IntFlag{Name: "max-streams-per-token", Value: stream.Defaults.MaxStreamsPerToken, Destination: &s.Stream.MaxStreamsPerToken, Usage: "open streams one agent token may have; more are refused with ResourceExhausted", EnvVars: env("max-streams-per-token")},
		&cli.IntFlag{Name: "max-agents-per-region", Value: cluster.Defaults.MaxAgentsPerRegion, Destination: &s.Cluster.MaxAgentsPerRegion, Usage: "agent records (identities) one region may have; a new identity beyond it takes the place of a record silent for 10m, or is refused with ResourceExhausted", EnvVars: env("max-agents-per-region")},
		&cli.IntFlag{Name: "max-streams", Value: stream.Defaults.MaxStreams, Destination: &s.Stream.MaxStreams, Usage: "open streams this replica serves; more are refused with ResourceExhausted (agents retry, or reach another replica)", EnvVars: env("max-streams")},
		&cli.StringFlag{Name: "instance", Destination: &s.Instance, Usage: "name of this replica in agents' connection records (default: host/pid)", EnvVars: env("instance")},
		&cli.DurationFlag{Name: "poll-interval", Value: tailer.Defaults.PollInterval, Destination: &s.Tailer.PollInterval, Usage: "how often the tailer reads deployment_changes", EnvVars: env("poll-interval")},
		&cli.DurationFlag{Name: "token-recheck", Value: server.DefaultTokenRecheck, Destination: &s.TokenRecheck, Usage: "how often the tokens of running streams are checked again (one query for all of them): a revoked token's streams (an agent's watch, an operator's log follow) end within this", EnvVars: env("token-recheck")},
		&cli.DurationFlag{Name: "database-unavailable-after", Destination: &s.Tailer.UnavailableAfter, Usage: "when no read of the change log has succeeded for this long (failed or hung), every stream ends and client connections are closed (agents dial again, behind a load balancer to a replica whose database answers), new streams are refused and gRPC health and /readyz say not serving, until a read succeeds. 0 (default): 5s on a Galera node, where another replica may reach the cluster through another node; off on a single database server, where no replica could serve meanwhile and ending streams would only delay the agents' return. Negative: off", EnvVars: env("database-unavailable-after")},
		&cli.DurationFlag{Name: "hole-grace", Value: tailer.Defaults.HoleGrace, Destination: &s.Tailer.HoleGrace, Usage: "how long a pk gap may stay open before the filler settles it (bounds how long a rollback holds resume versions)", EnvVars: env("hole-grace")},
		&cli.DurationFlag{Name: "filler-lock-wait", Value: tailer.Defaults.FillerLockWait, Destination: &s.Tailer.FillerLockWait, Usage: "how long one filler attempt waits behind an open transaction", EnvVars: env("filler-lock-wait")},
		&cli.DurationFlag{Name: "change-ttl", Value: retention.Defaults.TTL, Destination: &s.Retention.TTL, Usage: "how long deployment_changes rows are kept", EnvVars: env("change-ttl")},
		&cli.DurationFlag{Name: "change-max-age", Value: retention.Defaults.MaxAge, Destination: &s.Retention.MaxAge, Usage: "how long rows are kept for a lagging agent at most", EnvVars: env("change-max-age")},
		&cli.IntFlag{Name: "revisions-kept", Value: retention.Defaults.RevisionsKept, Destination: &s.Retention.RevisionsKept, Usage: "how many of each deployment's newest revisions (its history, what rollback can restore) are kept", EnvVars: env("revisions-kept")},
		&cli.DurationFlag{Name: "agent-ttl", Value: retention.Defaults.AgentTTL, Destination: &s.Retention.AgentTTL, Usage: "an agent record nothing was heard of (heartbeat, stream, update) for this long is deleted", EnvVars: env("agent-ttl")},
		&cli.DurationFlag{Name: "audit-ttl", Value: retention.Defaults.AuditTTL, Destination: &s.Retention.AuditTTL, Usage: "how long operator_audit_log rows (operators' actions, and writes refused for the token's kind) are kept before retention deletes them; 9600h is 400 days, a year's audit period and a month to export it", EnvVars: env("audit-ttl")},
		&cli.DurationFlag{Name: "cleanup-interval", Value: retention.Defaults.Interval, Destination: &s.Retention.Interval, Usage: "how often retention runs (one replica at a time)", EnvVars: env("cleanup-interval")},
		&cli.DurationFlag{Name: "deploy-timeout", Value: workflow.Defaults.Timeout, Destination: &s.Workflow.Timeout, Usage: "a deployment not ready within this fails", EnvVars: env("deploy-timeout")},
		&cli.BoolFlag{Name: "migrate", Value: true, Destination: &o.Migrate, Usage: "migrate the schema before serving", EnvVars: env("migrate")},
		&cli.DurationFlag{Name: "window-clock", Destination: &s.WindowClock, Usage: "judge freeze windows as if the time were this much later (e.g. 48h: a Thursday evening judged as Saturday's), to rehearse a recurring window or show one in the dev stack; bakes, deadlines and agents' liveness keep the database's clock. Never in production", EnvVars: env("window-clock")},
	}
}

// Validate returns every reason o cannot be served, each naming its flags
// (joined, so that one run lists them all), or nil. It parses
// --reserved-namespaces into Server.Reserved.
func (o *serveOptions) Validate() error {
	var errs []error
	if _, err := newLogger(o.LogLevel, o.LogFormat); err != nil {
		errs = append(errs, err)
	}
	s := &o.Server
	if r, err := reservedNamespaces(o.ReservedNamespaces); err != nil {
		errs = append(errs, err)
	} else {
		s.Reserved = r
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key go together"))
	}
	for _, peer := range []struct{ flag, value string }{{"peer-ca", s.PeerCA}, {"peer-server-name", s.PeerServerName}} {
		if peer.value != "" && (s.Peers.AdvertiseAddr == "" || s.TLSCert == "") {
			errs = append(errs, fmt.Errorf("--%s says how replicas verify each other over TLS: it needs --advertise-addr (peer pokes on) and --tls-cert (TLS)", peer.flag))
		}
	}
	// One host's host:port (peers.CheckAddress), the port --listen's when
	// not given.
	if s.Peers.AdvertiseAddr != "" {
		if _, err := peers.ResolveAdvertiseAddr(s.Peers.AdvertiseAddr, s.ListenAddr); err != nil {
			errs = append(errs, fmt.Errorf("--advertise-addr %w", err))
		}
	}
	if o.plaintextOffMachine() && !o.InsecureListen {
		errs = append(errs, fmt.Errorf("--listen %q is not a loopback address, and without TLS every token would cross the network in the clear: "+
			"give --tls-cert and --tls-key, listen on loopback (--listen 127.0.0.1:7070), or accept it with --insecure-listen", s.ListenAddr))
	}
	errs = append(errs, o.validateSSH())
	return errors.Join(errs...)
}

// plaintextOffMachine reports whether the gRPC listener would take tokens
// in the clear from other machines. It is the clients' rule
// (internal/dial): plaintext stays on this machine unless someone said
// otherwise (--insecure-listen).
func (o *serveOptions) plaintextOffMachine() bool {
	return o.Server.TLSCert == "" && !dial.Loopback(o.Server.ListenAddr)
}

// newLogger is the logger --log-level and --log-format ask for, on stderr.
func newLogger(level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: want text or json, got %q", format)
}
