package sshserve

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"google.golang.org/grpc"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// removableKey is one registered key until removed (narrow fake).
type removableKey struct{ removed atomic.Bool }

func (k *removableKey) Find(context.Context, string) (Identity, bool, error) {
	return Identity{Name: "alice"}, !k.removed.Load(), nil
}

func (k *removableKey) Live(_ context.Context, fps []string) (map[string]Identity, error) {
	out := map[string]Identity{}
	if !k.removed.Load() {
		for _, fp := range fps {
			out[fp] = Identity{Name: "alice"}
		}
	}
	return out, nil
}

// hangingOperator answers ListRegions only when its caller gives up, as a
// slow call would.
type hangingOperator struct {
	ctrlv1.OperatorServiceClient
	called chan struct{}
}

func (h hangingOperator) ListRegions(ctx context.Context, _ *ctrlv1.ListRegionsRequest, _ ...grpc.CallOption) (*ctrlv1.ListRegionsResponse, error) {
	h.called <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

type hangingConsole struct{ op hangingOperator }

func (c hangingConsole) Open(Identity, string, string) (ctrlv1.OperatorServiceClient, func(), func(), error) {
	return c.op, func() {}, func() {}, nil
}

// Removing a key ends its running one-shot command, as it ends a console.
func TestRemovedKeyEndsItsRunningCommand(t *testing.T) {
	keys := &removableKey{}
	console := hangingConsole{hangingOperator{called: make(chan struct{}, 1)}}
	s, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", HostKeyFile: filepath.Join(t.TempDir(), "host"), GenerateHostKey: true,
		Recheck: 50 * time.Millisecond}, keys, console, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := gossh.NewSignerFromKey(priv)
	c, err := gossh.Dial("tcp", s.Addr(), &gossh.ClientConfig{User: "alice", Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	sess.Stderr = &stderr
	done := make(chan error, 1)
	go func() { done <- sess.Run("regions") }()
	<-console.op.called
	keys.removed.Store(true)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(stderr.String(), "removed") {
			t.Errorf("the command of a removed key ended with %v, stderr %q; want a failure saying the key was removed", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a removed key's command still runs")
	}
}
