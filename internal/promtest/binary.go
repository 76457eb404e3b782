package promtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Binary is the Prometheus server to run: EnvBin when set, else the one
// scripts/prometheus.sh prints, which fetches Debian's package into the
// user cache on first use (seconds) and answers from the cache after.
// Its errors wrap ErrNoBinary and say why.
func Binary() (string, error) {
	if bin := os.Getenv(EnvBin); bin != "" {
		if err := executable(bin); err != nil {
			return "", fmt.Errorf("%w: %s=%s: %v", ErrNoBinary, EnvBin, bin, err)
		}
		return bin, nil
	}
	return fetched()
}

// fetched asks the script once per test binary: its answer does not change
// while the binary runs, and parallel tests need not each take its lock.
var fetched = sync.OnceValues(func() (string, error) {
	script, err := findScript()
	if err != nil {
		return "", fmt.Errorf("%w (%v; or set %s)", ErrNoBinary, err, EnvBin)
	}
	var stderr bytes.Buffer
	cmd := exec.Command("bash", script)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v\n%s(it unpacks Debian's prometheus package with apt-get download; or set %s)",
			ErrNoBinary, script, err, stderr.String(), EnvBin)
	}
	bin := strings.TrimSpace(string(out))
	if err := executable(bin); err != nil {
		return "", fmt.Errorf("%w: %s printed %q: %v", ErrNoBinary, script, bin, err)
	}
	return bin, nil
})

func executable(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if info.IsDir() || info.Mode()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}

// findScript walks up from the working directory (a package directory
// under go test, the repository under devstack) to scripts/prometheus.sh.
func findScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		script := filepath.Join(dir, "scripts", "prometheus.sh")
		if _, err := os.Stat(script); err == nil {
			return script, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("scripts/prometheus.sh not found above the working directory")
		}
		dir = parent
	}
}
