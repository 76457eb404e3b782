package systemd

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/deploysync/deploysync/internal/ci"
)

func TestUnitsVerifyAndNameRealSettings(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if ci.Running() {
			t.Fatal("systemd-analyze not found (Debian package systemd): it verifies the units")
		}
		t.Skip("systemd-analyze not found (Debian package systemd); skipping outside CI")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := build(t, root)

	// A root for the verifier: the units where systemd looks for them, the
	// binaries where they say, and the system's own targets they depend on.
	sysroot := t.TempDir()
	units := filepath.Join(sysroot, "etc/systemd/system")
	for _, dir := range []string{units, filepath.Join(sysroot, "usr/local/bin"), filepath.Join(sysroot, "usr/lib/systemd")} {
		os.MkdirAll(dir, 0o755)
	}
	if out, err := exec.Command("cp", "-r", "/lib/systemd/system", filepath.Join(sysroot, "usr/lib/systemd/")).CombinedOutput(); err != nil {
		t.Fatalf("copy the system's units: %v\n%s", err, out)
	}
	for _, daemon := range []string{"ctrld", "agentd"} {
		copyFile(t, filepath.Join(bin, daemon), filepath.Join(sysroot, "usr/local/bin", daemon), 0o755)
		copyFile(t, daemon+".service", filepath.Join(units, daemon+".service"), 0o644)
		// The settings a unit's comments tell the admin to add (TLS,
		// the SSH console), as the drop-in `systemctl edit` would write,
		// so a misspelt one fails the verify below too.
		if dropIn := commentedSettings(t, daemon+".service"); dropIn != "" {
			dir := filepath.Join(units, daemon+".service.d")
			os.MkdirAll(dir, 0o755)
			if err := os.WriteFile(filepath.Join(dir, "commented.conf"), []byte("[Service]\n"+dropIn), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, err := exec.Command(analyze, "verify", "--root="+sysroot, "ctrld.service", "agentd.service").CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}

	// Every setting a unit passes in its environment is one the binary reads.
	setting := regexp.MustCompile(`\b((?:CTRLD|AGENTD)_[A-Z_]+)=`)
	for _, daemon := range []string{"ctrld", "agentd"} {
		help := helpText(t, filepath.Join(bin, daemon))
		unit, err := os.ReadFile(daemon + ".service")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range setting.FindAllStringSubmatch(string(unit), -1) {
			if !strings.Contains(help, "$"+m[1]) {
				t.Errorf("%s.service sets %s, which %s does not read", daemon, m[1], daemon)
			}
		}
		if !strings.Contains(string(unit), "DynamicUser=yes") {
			t.Errorf("%s.service does not run as its own unprivileged user", daemon)
		}
	}
}

// The unit starts `ctrld serve` with whatever ctrld.env holds. With only
// the database DSN there, ctrld would listen on every interface: without
// TLS it refuses to start, naming the ways out, before it touches the
// database, instead of handing every token to the network in the clear.
// CTRLD_INSECURE_LISTEN=true is the explicit way out, and it is logged.
func TestCtrldRefusesPlaintextOnTheNetwork(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctrld := filepath.Join(build(t, root), "ctrld")
	serve := func(env ...string) string {
		cmd := exec.Command(ctrld, "serve")
		// Port 1 refuses connections: getting there means the listen
		// check let ctrld through.
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "CTRLD_DATABASE_DSN=ctrld:pw@tcp(127.0.0.1:1)/ctrld"}, env...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("ctrld serve %v started:\n%s", env, out)
		}
		return string(out)
	}
	out := serve()
	if !strings.Contains(out, `--listen ":7070" is not a loopback address`) || !strings.Contains(out, "--insecure-listen") || strings.Contains(out, "database") {
		t.Fatalf("plaintext on every interface: want a refusal before the database, got:\n%s", out)
	}
	out = serve("CTRLD_INSECURE_LISTEN=true")
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "tokens cross the network in the clear") || !strings.Contains(out, "database") {
		t.Fatalf("with CTRLD_INSECURE_LISTEN: want a warning, then the database, got:\n%s", out)
	}
	out = serve("CTRLD_LISTEN=127.0.0.1:7070")
	if strings.Contains(out, "loopback") || strings.Contains(out, "WARN") || !strings.Contains(out, "database") {
		t.Fatalf("on loopback: want no refusal and no warning, got:\n%s", out)
	}
}

// commentedSettings are the [Service] settings a unit's comments suggest,
// one a line: the comment lines `#   Key=value` whose Key is a setting's
// name (LoadCredential=, Environment=), not a file's path.
func commentedSettings(t *testing.T, unit string) string {
	t.Helper()
	data, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	suggested := regexp.MustCompile(`(?m)^#   ([A-Z][A-Za-z]+=.*)$`)
	var out strings.Builder
	for _, m := range suggested.FindAllStringSubmatch(string(data), -1) {
		out.WriteString(m[1] + "\n")
	}
	return out.String()
}

// build builds both daemons from the repository at root as their
// Dockerfiles do, so that the build cache `go tool task test` filled before
// the tests serves them and this only links.
func build(t *testing.T, root string) string {
	t.Helper()
	bin := t.TempDir()
	cmd := exec.Command("bash", "scripts/static-build.sh", bin)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// helpText is the --help of the binary and of its subcommands.
func helpText(t *testing.T, bin string) string {
	var all strings.Builder
	for _, args := range [][]string{{"--help"}, {"serve", "--help"}, {"migrate", "--help"}} {
		out, _ := exec.Command(bin, args...).CombinedOutput()
		all.Write(out)
	}
	return all.String()
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, mode); err != nil {
		t.Fatal(err)
	}
}
