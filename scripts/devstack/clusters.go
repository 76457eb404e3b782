package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/deploysync/deploysync/internal/kubetest"
	"github.com/deploysync/deploysync/internal/promtest"
)

// The ways devstack gives each region a Kubernetes cluster.
const (
	modeAuto  = "auto"  // kind when a Docker engine answers, else local
	modeKind  = "kind"  // one kind cluster per region (Docker)
	modeLocal = "local" // one locally built control plane + kwok per region
)

// kindConfig is the cluster config every region's kind cluster is created from.
const kindConfig = "scripts/kind/cluster.yaml"

// regionCluster is the Kubernetes cluster one region's agent applies to,
// and the region's Prometheus.
type regionCluster struct {
	region     string
	kubeconfig string
	config     *rest.Config

	// prometheusURL is the region's own Prometheus, scraping the region's
	// traffic simulator: what the agent will query for the metric gates
	// (issue 30). prometheus is that server.
	prometheusURL string
	prometheus    *promtest.Server
}

// chooseMode resolves the --mode flag and says why, so a user who expected
// the other mode knows what to change.
func chooseMode(requested string) (mode, why string, err error) {
	docker := dockerAnswers()
	switch requested {
	case modeAuto:
		if docker == nil {
			return modeKind, "a Docker engine answers: one kind cluster per region (" + kindConfig + ")", nil
		}
		return modeLocal, fmt.Sprintf("%v, so kind cannot run: using the locally built kube-apiserver + controller manager + scheduler + kwok per region (--mode kind forces kind)", docker), nil
	case modeKind:
		if docker != nil {
			return "", "", fmt.Errorf("--mode kind needs a Docker engine: %v", docker)
		}
		return modeKind, "--mode kind: one kind cluster per region (" + kindConfig + ")", nil
	case modeLocal:
		return modeLocal, "--mode local: the locally built kube-apiserver + controller manager + scheduler + kwok per region", nil
	}
	return "", "", fmt.Errorf("--mode %q: want %s, %s or %s", requested, modeAuto, modeKind, modeLocal)
}

// dockerAnswers is nil when a Docker engine answers `docker info`, else why not.
func dockerAnswers() error {
	if _, err := exec.LookPath("docker"); err != nil {
		return errors.New("no docker command on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := exec.CommandContext(ctx, "docker", "info").Run(); err != nil {
		return fmt.Errorf("no Docker engine answers (`docker info`: %v)", err)
	}
	return nil
}

// startLocal starts one local control plane with kwok per region; they stop
// with the stack.
func startLocal(ctx context.Context, s *stack) ([]regionCluster, error) {
	say("building (or reusing) the Kubernetes binaries")
	kubeBin, err := exec.Command("bash", "scripts/kube-binaries.sh").Output()
	if err != nil {
		return nil, fmt.Errorf("kube binaries: %w", err)
	}
	os.Setenv(kubetest.EnvBinDir, strings.TrimSpace(string(kubeBin)))

	say("starting one Kubernetes control plane per region (%s)", strings.Join(regions, ", "))
	if err := os.MkdirAll(filepath.Join(stateDir, "kube"), 0o755); err != nil {
		return nil, err
	}
	var clusters []regionCluster
	for _, r := range regions {
		// PodLogs: kwok serves the Pods' logs, so the console's live views
		// show them (a crash-looping Pod's last run logs a panic).
		c, err := kubetest.Start(ctx, kubetest.Options{Workloads: true, PodLogs: true})
		if err != nil {
			return nil, fmt.Errorf("region %s: %w", r, err)
		}
		s.onStop(c.Stop)
		// The same paths as in kind mode, for the README to name.
		kubeconfig, err := filepath.Abs(regionKubeconfig(r))
		if err != nil {
			return nil, err
		}
		data, err := os.ReadFile(c.Kubeconfig)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(kubeconfig, data, 0o600); err != nil {
			return nil, err
		}
		logs := filepath.Join(stateDir, "logs", "kube-"+r)
		if err := os.Symlink(c.Dir, logs); err != nil {
			return nil, err
		}
		clusters = append(clusters, regionCluster{region: r, kubeconfig: kubeconfig, config: c.Config})
		say("  %s: kubeconfig %s, control-plane logs %s/", r, kubeconfig, logs)
	}
	return clusters, nil
}

// regionKubeconfig is where a region's admin kubeconfig is, in either mode.
func regionKubeconfig(region string) string {
	return filepath.Join(stateDir, "kube", region+".kubeconfig")
}

// kindClustersFile lists the kind clusters up created ("<kind binary>\t<name>"
// per line), written before each is created so that `devstack down` can
// delete them after a crash.
func kindClustersFile() string { return filepath.Join(stateDir, "kind-clusters") }

// startKind creates one kind cluster per region, in parallel (each takes
// about a minute); they are deleted with the stack.
func startKind(ctx context.Context, s *stack) ([]regionCluster, error) {
	kind, err := kindBinary()
	if err != nil {
		return nil, err
	}
	config, err := filepath.Abs(kindConfig)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(stateDir, "kube"), 0o755); err != nil {
		return nil, err
	}
	say("creating one kind cluster per region with %s (%s; logs in %s/logs/kind-*.log)", kind, strings.Join(regions, ", "), stateDir)
	clusters := make([]regionCluster, len(regions))
	errs := make([]error, len(regions))
	var wg sync.WaitGroup
	for i, r := range regions {
		name := "deploysync-" + r
		if err := recordKindCluster(kind, name); err != nil {
			return nil, err
		}
		s.onStop(func() { deleteKindCluster(kind, name) })
		kubeconfig, _ := filepath.Abs(regionKubeconfig(r))
		clusters[i] = regionCluster{region: r, kubeconfig: kubeconfig}
		wg.Go(func() {
			errs[i] = createKindCluster(ctx, kind, name, config, kubeconfig, filepath.Join(stateDir, "logs", "kind-"+r+".log"))
		})
	}
	wg.Wait()
	for i, c := range clusters {
		if errs[i] != nil {
			return nil, fmt.Errorf("region %s: %w", c.region, errs[i])
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("region %s: kubeconfig from kind: %w", c.region, err)
		}
		clusters[i].config = cfg
		say("  %s: kind cluster deploysync-%s, kubeconfig %s", c.region, c.region, c.kubeconfig)
	}
	return clusters, nil
}

// kindBinary is --kind, else kind on PATH, else the version pinned in
// tools/kind built into the state directory.
func kindBinary() (string, error) {
	if kindPath != "" {
		return kindPath, nil
	}
	if p, err := exec.LookPath("kind"); err == nil {
		return p, nil
	}
	bin, err := filepath.Abs(filepath.Join(stateDir, "bin", "kind"))
	if err != nil {
		return "", err
	}
	say("building kind (pinned in tools/kind/go.mod)")
	build := exec.Command("go", "build", "-modfile=tools/kind/go.mod", "-o", bin, "sigs.k8s.io/kind")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("build kind: %w", err)
	}
	return bin, nil
}

func createKindCluster(ctx context.Context, kind, name, config, kubeconfig, logFile string) error {
	log, err := os.Create(logFile)
	if err != nil {
		return err
	}
	defer log.Close()
	create := exec.CommandContext(ctx, kind, "create", "cluster", "--name", name, "--config", config,
		"--kubeconfig", kubeconfig, "--wait", "3m")
	create.Stdout, create.Stderr = log, log
	if err := create.Run(); err != nil {
		return fmt.Errorf("kind create cluster %s: %w (see %s)", name, err, logFile)
	}
	return nil
}

func recordKindCluster(kind, name string) error {
	f, err := os.OpenFile(kindClustersFile(), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "%s\t%s\n", kind, name)
	return err
}

// deleteKindCluster deletes a cluster up created; kind treats a cluster
// that is already gone as deleted.
func deleteKindCluster(kind, name string) {
	say("deleting kind cluster %s", name)
	if out, err := exec.Command(kind, "delete", "cluster", "--name", name).CombinedOutput(); err != nil {
		say("kind delete cluster %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
}

// deleteRecordedKindClusters deletes the kind clusters a crashed up left.
func deleteRecordedKindClusters() {
	f, err := os.Open(kindClustersFile())
	if err != nil {
		return
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		if kind, name, ok := strings.Cut(lines.Text(), "\t"); ok {
			deleteKindCluster(kind, name)
		}
	}
}
