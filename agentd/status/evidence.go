package status

import (
	"context"
	"io"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/deploysync/deploysync/internal/limits"
	"github.com/deploysync/deploysync/internal/textclean"
)

// Evidence is what crashed containers said before they died, for the
// report (Instance.evidence) and so for the halt of a rollout that fails
// on them: a run's termination message, else the last lines of its log.
// Logs are read in the background, a few at a time, and the Pod's
// deployment is reported again once one is in: a log read must never
// hold a report, nor the heartbeat behind it.
type Evidence struct {
	kube    kubernetes.Interface
	fetched func(deployment string) // marks a deployment to report again

	mu       sync.Mutex
	lines    map[run]string
	fetching map[run]bool
	slots    chan struct{}
}

// run names one run of a container: a crashed run's log does not change.
type run struct {
	pod       types.UID
	container string
	restarts  int32
}

// Bounds of the evidence kept.
const (
	evidenceLines   = 5
	evidenceTimeout = 5 * time.Second
	// maxEvidenceRuns bounds the runs kept: past it, the oldest are
	// forgotten all at once (they are read again if still crashing).
	maxEvidenceRuns = 1000
)

func newEvidence(kube kubernetes.Interface, fetched func(string)) *Evidence {
	return &Evidence{kube: kube, fetched: fetched, lines: map[run]string{}, fetching: map[run]bool{}, slots: make(chan struct{}, 2)}
}

// For is what p's crashed container said: the termination message of its
// last (or current) run, else the last lines of that run's log once they
// are read (their read starts now when they are not). "" when no
// container of p crashed.
func (e *Evidence) For(p *corev1.Pod, deployment string) string {
	for _, cs := range p.Status.ContainerStatuses {
		t := cs.LastTerminationState.Terminated
		previous := true
		if t == nil {
			t, previous = cs.State.Terminated, false
		}
		if t == nil || (t.ExitCode == 0 && t.Reason != ReasonOOMKilled) {
			continue
		}
		if t.Message != "" {
			return clean(t.Message)
		}
		k := run{pod: p.UID, container: cs.Name, restarts: cs.RestartCount}
		e.mu.Lock()
		lines, ok := e.lines[k]
		start := !ok && !e.fetching[k]
		if start {
			e.fetching[k] = true
		}
		e.mu.Unlock()
		if start {
			go e.fetch(k, p.Namespace, p.Name, previous, deployment)
		}
		return lines
	}
	return ""
}

// fetch reads the last lines of a run's log, keeps them, and has the
// deployment reported again.
func (e *Evidence) fetch(k run, namespace, pod string, previous bool, deployment string) {
	e.slots <- struct{}{}
	defer func() { <-e.slots }()
	ctx, cancel := context.WithTimeout(context.Background(), evidenceTimeout)
	defer cancel()
	tail, limit := int64(evidenceLines), int64(limits.MaxEvidenceBytes)
	text := ""
	s, err := e.kube.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: k.container, Previous: previous,
		TailLines: &tail, LimitBytes: &limit}).Stream(ctx)
	if err == nil {
		b, _ := io.ReadAll(io.LimitReader(s, limit))
		s.Close()
		text = clean(string(b))
	}
	e.mu.Lock()
	if len(e.lines) >= maxEvidenceRuns {
		clear(e.lines)
	}
	e.lines[k] = text // "" when none could be read: not read again
	delete(e.fetching, k)
	e.mu.Unlock()
	if text != "" {
		e.fetched(deployment)
	}
}

// clean is a container's words as a report carries them: no terminal
// controls (lines and tabs stay), valid UTF-8, at most MaxEvidenceBytes.
func clean(s string) string {
	return strings.TrimSpace(textclean.Clean(s, limits.MaxEvidenceBytes))
}
