package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/deploysync/deploysync/internal/kubetest"
	"github.com/deploysync/deploysync/internal/manifest"
	"github.com/deploysync/deploysync/internal/promtest"
	"github.com/deploysync/deploysync/internal/trafficsim"
)

// --help says plainly that the traffic is simulated, what for, and what
// it exports.
func TestHelpSaysItIsASimulator(t *testing.T) {
	var out bytes.Buffer
	a := app()
	a.Writer = &out
	if err := a.Run([]string{"trafficsim", "--help"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SIMULATE", "dev and tests", "kwok's Pods run no", trafficsim.RequestsMetric, trafficsim.DurationMetric, ":errors", ":slow", "--kubeconfig", "--listen"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
}

// The binary, on --listen 127.0.0.1:0, prints the address it took, and a
// real Prometheus scraping it there sees the simulated requests of a
// managed Pod the API server says is Running and Ready (set by hand here:
// the control plane runs no kwok).
func TestServesTheTrafficOfTheClustersPods(t *testing.T) {
	c := kubetest.StartForTest(t, kubetest.Options{})
	client := c.Client(t)
	ns := c.Namespace(t)
	pod, err := client.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-0", Labels: map[string]string{
			manifest.ManagedByLabel: manifest.ManagedByValue, manifest.DeploymentLabel: "demo", manifest.SpecHashLabel: "h1"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx:" + trafficsim.ErrorsTag}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := client.CoreV1().Pods(ns).UpdateStatus(t.Context(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	out, printed := io.Pipe()
	a := app()
	a.Writer = printed
	done := make(chan error, 1)
	go func() {
		err := a.RunContext(ctx, []string{"trafficsim", "--kubeconfig", c.Kubeconfig, "--listen", "127.0.0.1:0", "--rate", "20"})
		printed.CloseWithError(fmt.Errorf("trafficsim returned %v", err)) // ends a read that waits for its address
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("trafficsim: %v", err)
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("trafficsim printed no address: %v", err)
	}
	go io.Copy(io.Discard, out) // whatever else it prints
	addr := regexp.MustCompile(`http://(127\.0\.0\.1:\d+)/metrics`).FindStringSubmatch(line)
	if addr == nil || !strings.Contains(line, "SIMULATED") {
		t.Fatalf("trafficsim printed %q, want its address and that its metrics are simulated", line)
	}

	prom := promtest.StartForTest(t, promtest.Options{Targets: []string{addr[1]}})
	query := fmt.Sprintf(`sum by (code) (rate(%s{namespace=%q, deployment="demo", spec_hash="h1"}[10s]))`, trafficsim.RequestsMetric, ns)
	prom.WaitFor(t, time.Minute, query, func(samples []promtest.Sample) error {
		rates := map[string]float64{}
		for _, s := range samples {
			rates[s.Metric["code"]] = s.Value
		}
		// --rate 20, every 5th failing: 16 answered 200 a second, 4 500.
		if rates["200"] < 15 || rates["200"] > 17 || rates["500"] < 3.5 || rates["500"] > 4.5 {
			return fmt.Errorf("rates by code %v, want 200 at 16/s and 500 at 4/s", rates)
		}
		return nil
	})
}

// A rate of 0 or less is refused before anything starts.
func TestRefusesANonPositiveRate(t *testing.T) {
	err := app().Run([]string{"trafficsim", "--kubeconfig", "/nonexistent", "--rate", "0"})
	if err == nil || !strings.Contains(err.Error(), "--rate") {
		t.Fatalf("got %v, want --rate refused", err)
	}
}
