package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deploysync/deploysync/internal/dial"
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

// agentd takes a root-owned token file that only root and a group of its
// own may read: how the kubelet mounts a Secret volume with defaultMode
// 0440 for a pod with an fsGroup (deploy/k8s/agentd.yaml).
func TestTakesASecretVolumeToken(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to own the file")
	}
	file := filepath.Join(t.TempDir(), "eu.token")
	if err := os.WriteFile(file, []byte("dsa_x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o440); err != nil { // root's group: one of ours
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "none")
	err := app().Run([]string{"agentd", "--region", "eu", "--token-file", file, "--kubeconfig", kubeconfig, "--ctrld-address", "127.0.0.1:1", "--insecure", "--metrics-listen", ""})
	// Past the token, agentd stops at the missing kubeconfig.
	if err == nil || errors.Is(err, dial.ErrTokenFileReadable) || !strings.Contains(err.Error(), kubeconfig) {
		t.Fatalf("got %v, want the token read and the missing kubeconfig refused", err)
	}
}
