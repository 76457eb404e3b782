package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/operatorkeys"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/store"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui/sshserve"
)

// The console over SSH is wired here, the one place that sees both rooms:
// tui/sshserve (the SSH server and the console) gets ctrld's key registry
// and, per session, an operator client whose credential ctrld minted for
// that session alone (see docs/design.md, "The console over SSH").

// sshFlags are serve's flags for the SSH console, each writing its field
// of o.SSH.
func (o *serveOptions) sshFlags() []cli.Flag {
	c, d := &o.SSH, sshserve.Defaults
	return []cli.Flag{
		&cli.StringFlag{Name: "ssh-listen", Destination: &c.Listen, Usage: "serve the operator console over SSH on this address (e.g. :2222) to the keys registered with `ctrld operator add-key`; empty: off", EnvVars: env("ssh-listen")},
		&cli.StringFlag{Name: "ssh-host-key", Destination: &c.HostKeyFile, Usage: "the SSH server's private host key `file` (ssh-keygen -t ed25519 -N '' -f FILE); needed with --ssh-listen", EnvVars: env("ssh-host-key")},
		&cli.BoolFlag{Name: "ssh-generate-host-key", Destination: &c.GenerateHostKey, Usage: "create --ssh-host-key (ed25519) if it does not exist (the dev stack; in production make the key once and keep it, or clients learn to accept any key)", EnvVars: env("ssh-generate-host-key")},
		&cli.DurationFlag{Name: "ssh-idle-timeout", Value: d.IdleTimeout, Destination: &c.IdleTimeout, Usage: "a console session with no keystroke for this long ends", EnvVars: env("ssh-idle-timeout")},
		&cli.DurationFlag{Name: "ssh-max-session", Value: d.MaxSessionTime, Destination: &c.MaxSessionTime, Usage: "a console session ends after this long, whatever it does", EnvVars: env("ssh-max-session")},
		&cli.IntFlag{Name: "ssh-max-sessions-per-key", Value: d.MaxSessionsPerKey, Destination: &c.MaxSessionsPerKey, Usage: "open console sessions one key may have on this replica", EnvVars: env("ssh-max-sessions-per-key")},
		&cli.IntFlag{Name: "ssh-max-sessions", Value: d.MaxSessions, Destination: &c.MaxSessions, Usage: "open console sessions this replica serves", EnvVars: env("ssh-max-sessions")},
	}
}

// maxSSHSession is the longest --ssh-max-session: a week.
const maxSSHSession = 7 * 24 * time.Hour

// validateSSH refuses SSH settings that cannot work.
func (o *serveOptions) validateSSH() error {
	c := o.SSH
	var errs []error
	if c.Listen == "" {
		if c.HostKeyFile != "" || c.GenerateHostKey {
			return errors.New("--ssh-host-key and --ssh-generate-host-key are for the SSH console: give --ssh-listen too")
		}
		return nil // off: the other settings do not matter
	}
	if c.HostKeyFile == "" {
		errs = append(errs, errors.New("--ssh-listen needs --ssh-host-key (the server's private host key file)"))
	}
	for _, n := range []struct {
		flag string
		v    int
	}{{"ssh-max-sessions-per-key", c.MaxSessionsPerKey}, {"ssh-max-sessions", c.MaxSessions}} {
		if n.v < 1 {
			errs = append(errs, errors.New("--"+n.flag+": want at least 1"))
		}
	}
	if c.IdleTimeout <= 0 || c.MaxSessionTime <= 0 {
		errs = append(errs, errors.New("--ssh-idle-timeout and --ssh-max-session: want a positive duration"))
	}
	// A session checks for idleness every quarter of the timeout: a few
	// nanoseconds would make that no interval at all. Neither bound means
	// anything under a second.
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"ssh-idle-timeout", c.IdleTimeout}, {"ssh-max-session", c.MaxSessionTime}} {
		if d.v > 0 && d.v < time.Second {
			errs = append(errs, fmt.Errorf("--%s %v: want at least 1s", d.flag, d.v))
		}
	}
	// Connections are closed a minute after the maximum (a backstop):
	// bounded, that sum cannot overflow.
	if c.MaxSessionTime > maxSSHSession {
		errs = append(errs, fmt.Errorf("--ssh-max-session %v: want at most %v", c.MaxSessionTime, maxSSHSession))
	}
	return errors.Join(errs...)
}

// startSSHConsole serves the console over SSH when cfg.Listen is set
// (else it returns nil): keys from db, each session's calls through srv
// in-process with a credential minted for it.
func startSSHConsole(ctx context.Context, cfg sshserve.Config, db *store.DB, srv *server.Server, log *slog.Logger) (*sshserve.Server, error) {
	if cfg.Listen == "" {
		return nil, nil
	}
	return sshserve.Start(ctx, cfg, registeredKeys{operatorkeys.New(db.Ent)}, sessionConsole{srv}, log)
}

// registeredKeys is sshserve.Keys on the operator_keys table.
type registeredKeys struct{ r *operatorkeys.Registry }

func identity(k operatorkeys.Key) sshserve.Identity {
	return sshserve.Identity{Name: k.Name, ReadOnly: k.Role != operatorkeys.Operator, Logs: k.Logs}
}

func (k registeredKeys) Find(ctx context.Context, fingerprint string) (sshserve.Identity, bool, error) {
	key, ok, err := k.r.Find(ctx, fingerprint)
	return identity(key), ok, err
}

func (k registeredKeys) Live(ctx context.Context, fingerprints []string) (map[string]sshserve.Identity, error) {
	keys, err := k.r.Live(ctx, fingerprints)
	if err != nil {
		return nil, err
	}
	out := make(map[string]sshserve.Identity, len(keys))
	for fp, key := range keys {
		out[fp] = identity(key)
	}
	return out, nil
}

// sessionConsole is sshserve.Console on this process's operator service:
// a credential per session, minted in memory, revoked when it closes.
type sessionConsole struct{ srv *server.Server }

func (c sessionConsole) Open(who sshserve.Identity, fingerprint, remoteAddr string) (ctrlv1.OperatorServiceClient, func(), func(), error) {
	credential, revoke := c.srv.Sessions.Mint(auth.SessionIdentity{Name: who.Name, Fingerprint: fingerprint, RemoteAddr: remoteAddr, ReadOnly: who.ReadOnly, Logs: who.Logs})
	conn, err := c.srv.DialInProcess(credential)
	if err != nil {
		revoke()
		return nil, nil, nil, err
	}
	return ctrlv1.NewOperatorServiceClient(conn), conn.ResetConnectBackoff, func() {
		revoke()
		conn.Close()
	}, nil
}
