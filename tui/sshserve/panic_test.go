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
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// everyKey registers every key (narrow fake: the registry is tested with
// ctrld in cmd/ctrld).
type everyKey struct{}

func (everyKey) Find(context.Context, string) (Identity, bool, error) {
	return Identity{Name: "alice"}, true, nil
}

func (everyKey) Live(_ context.Context, fps []string) (map[string]Identity, error) {
	out := map[string]Identity{}
	for _, fp := range fps {
		out[fp] = Identity{Name: "alice"}
	}
	return out, nil
}

// panicking is a console whose opening panics, as a bug would.
type panicking struct{ opened chan struct{} }

func (p panicking) Open(Identity, string, string) (ctrlv1.OperatorServiceClient, func(), func(), error) {
	p.opened <- struct{}{}
	panic("a bug")
}

func TestASessionsPanicEndsOnlyThatSession(t *testing.T) {
	console := panicking{opened: make(chan struct{}, 2)}
	s, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", HostKeyFile: filepath.Join(t.TempDir(), "host"), GenerateHostKey: true},
		everyKey{}, console, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := gossh.NewSignerFromKey(priv)
	for i := range 2 { // the second proves the server outlived the first
		c, err := gossh.Dial("tcp", s.Addr(), &gossh.ClientConfig{User: "alice", Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
			HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		sess, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		sess.Stderr = &stderr
		if err := sess.Run("regions"); err == nil || !strings.Contains(stderr.String(), "ctrld logged why") {
			t.Errorf("session %d: a panicking session ended with %v, stderr %q; want a failure saying so", i+1, err, stderr.String())
		}
		<-console.opened
		c.Close()
	}
}
