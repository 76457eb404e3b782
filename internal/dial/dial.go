package dial

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/deploysync/deploysync/internal/bearer"
	"github.com/deploysync/deploysync/internal/limits"
)

// Options say how to reach ctrld.
type Options struct {
	Address string
	Token   string
	// Insecure sends the token without TLS; to a loopback address only,
	// unless InsecureNonLoopback is set too.
	Insecure bool
	// InsecureNonLoopback lets Insecure reach a non-loopback address: the
	// token crosses the network in the clear.
	InsecureNonLoopback bool
	// CA verifies ctrld (default: system roots); Cert and Key are a client
	// certificate for mutual TLS.
	CA, Cert, Key string
}

// maxReconnectDelay is the longest a client waits between attempts to
// reach ctrld again.
const maxReconnectDelay = 5 * time.Second

// Ctrld returns a client connection to ctrld.
func Ctrld(o Options) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limits.MaxMessageBytes)),
		// gRPC's default reconnect backoff grows to 120 s: after a long
		// ctrld outage, agents and the console would wait up to two
		// minutes more once it is back (issue 13 saw 40 s). Capped at
		// maxReconnectDelay, with jitter so a fleet does not reconnect in
		// step.
		grpc.WithConnectParams(Reconnect()),
	}
	if o.InsecureNonLoopback && !o.Insecure {
		return nil, fmt.Errorf("--insecure-non-loopback only goes with --insecure")
	}
	if o.Insecure {
		if !o.InsecureNonLoopback && !Loopback(o.Address) {
			return nil, fmt.Errorf("%w: %q is not a loopback address; use TLS (drop --insecure), or add --insecure-non-loopback if the network to ctrld is trusted",
				ErrPlaintextNonLoopback, o.Address)
		}
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithPerRPCCredentials(bearer.Credentials{Token: o.Token, Insecure: true}))
		return grpc.NewClient(o.Address, opts...)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CA != "" {
		pem, err := os.ReadFile(o.CA)
		if err != nil {
			return nil, fmt.Errorf("TLS CA: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA %s holds no PEM certificate", o.CA)
		}
	}
	if o.Cert != "" || o.Key != "" {
		pair, err := tls.LoadX509KeyPair(o.Cert, o.Key)
		if err != nil {
			return nil, fmt.Errorf("TLS client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(tc)),
		grpc.WithPerRPCCredentials(bearer.Credentials{Token: o.Token}))
	return grpc.NewClient(o.Address, opts...)
}

// Flags are the flags that say how to reach ctrld, the same in every
// client; env names a flag's environment variables.
func Flags(env func(flag string) []string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "ctrld-address", Value: "localhost:7070", Usage: "ctrld's gRPC address", EnvVars: env("ctrld-address")},
		&cli.BoolFlag{Name: "insecure", Usage: "talk to ctrld without TLS: to a loopback --ctrld-address only (127.0.0.1, ::1, localhost), unless --insecure-non-loopback", EnvVars: env("insecure")},
		&cli.BoolFlag{Name: "insecure-non-loopback", Usage: "with --insecure: allow any --ctrld-address, so the token crosses the network in the clear (only on a network you trust)", EnvVars: env("insecure-non-loopback")},
		&cli.StringFlag{Name: "tls-ca", Usage: "CA `file` to verify ctrld (default: system roots)", EnvVars: env("tls-ca")},
		&cli.StringFlag{Name: "tls-cert", Usage: "client certificate `file` for mutual TLS", EnvVars: env("tls-cert")},
		&cli.StringFlag{Name: "tls-key", Usage: "client key `file` for mutual TLS", EnvVars: env("tls-key")},
	}
}

// FromFlags is the Options that Flags set, with token.
func FromFlags(c *cli.Context, token string) Options {
	return Options{Address: c.String("ctrld-address"), Token: token, Insecure: c.Bool("insecure"), InsecureNonLoopback: c.Bool("insecure-non-loopback"),
		CA: c.String("tls-ca"), Cert: c.String("tls-cert"), Key: c.String("tls-key")}
}

// Reconnect is how clients of ctrld reconnect: gRPC's default backoff,
// capped at maxReconnectDelay. Tests that stand in for agents and
// operators dial with it too, so they meet a restarted ctrld as soon as
// real clients do.
func Reconnect() grpc.ConnectParams {
	b := backoff.DefaultConfig
	b.MaxDelay = maxReconnectDelay
	return grpc.ConnectParams{
		Backoff:           b,
		MinConnectTimeout: 20 * time.Second, // gRPC's default, which a zero here would not mean
	}
}
