package sshserve

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The host key is a private key: a file that users other than its owner
// may read is refused, as token files are, saying how to fix it.
func TestAHostKeyOthersMayReadIsRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "host_ed25519")
	start := func() error {
		s, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", HostKeyFile: file, GenerateHostKey: true},
			everyKey{}, emptyConsole{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err == nil {
			s.Stop()
		}
		return err
	}
	if err := start(); err != nil { // generates it, 0600
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o600, true}, {0o400, true}, {0o644, false}, {0o640, false}, {0o604, false}, {0o660, false}} {
		if err := os.Chmod(file, c.mode); err != nil {
			t.Fatal(err)
		}
		err := start()
		if c.ok && err != nil {
			t.Errorf("mode %04o: %v", c.mode, err)
		}
		if !c.ok && (err == nil || !strings.Contains(err.Error(), "chmod 600 "+file)) {
			t.Errorf("mode %04o: %v; want a refusal saying chmod 600", c.mode, err)
		}
	}
}
