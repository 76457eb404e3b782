package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// agentd refuses a token file other users may read before it dials ctrld,
// and says how to fix it.
func TestRefusesATokenFileOthersMayRead(t *testing.T) {
	file := filepath.Join(t.TempDir(), "eu.token")
	if err := os.WriteFile(file, []byte("dsa_x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	err := app().Run([]string{"agentd", "--region", "eu", "--token-file", file, "--kubeconfig", filepath.Join(t.TempDir(), "none"), "--ctrld-address", "127.0.0.1:1", "--insecure", "--metrics-listen", ""})
	if err == nil || !strings.Contains(err.Error(), "chmod 600 "+file) {
		t.Fatalf("got %v, want the refusal saying `chmod 600 %s`", err, file)
	}
}
