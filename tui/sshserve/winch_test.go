package sshserve

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// Window changes a session sends before its shell (or with no shell at
// all) must not block the server: 100 connections that ask for a terminal,
// resize it many times and hang up leave no goroutine behind.
func TestWindowChangesLeaveNoGoroutinesBehind(t *testing.T) {
	s, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", HostKeyFile: filepath.Join(t.TempDir(), "host"), GenerateHostKey: true,
		AuthBurst: 1000, AuthPerSecond: 1000, MaxUnauthenticatedPerAddress: 1000, MaxUnauthenticated: 1000},
		everyKey{}, panicking{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := gossh.NewSignerFromKey(priv)
	settle := func(want int) int {
		deadline := time.Now().Add(10 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= want || time.Now().After(deadline) {
				return n
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	before := runtime.NumGoroutine()
	for i := range 100 {
		c, err := gossh.Dial("tcp", s.Addr(), &gossh.ClientConfig{User: "alice", Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
			HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		sess, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		if err := sess.RequestPty("xterm", 24, 80, gossh.TerminalModes{}); err != nil {
			t.Fatal(err)
		}
		for w := range 5 {
			if err := sess.WindowChange(24, 80+w); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
	}
	if after := settle(before + 5); after > before+5 {
		t.Errorf("%d goroutines before 100 resized-and-closed connections, %d after", before, after)
	}
}
