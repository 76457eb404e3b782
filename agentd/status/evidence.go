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
	lines    map[podContainer]said
	fetching map[podContainer]bool
	slots    chan struct{}
}

// podContainer names one container of one Pod.
type podContainer struct {
	pod  types.UID
	name string
}

// said is what a container's crashed run said, which run, and when it
// was read.
type said struct {
	text     string
	restarts int32
	at       time.Time
}

// Bounds of the evidence kept.
const (
	evidenceLines   = 5
	evidenceTimeout = 5 * time.Second
	// maxEvidenceRuns bounds the containers kept: past it, all are
	// forgotten at once (they are read again if still crashing).
	maxEvidenceRuns = 1000
	// rereadAfter spaces the reads of one container's log: a container
	// crash-looping restarts every few seconds (kwok's, every second),
	// and each restart is a new run; its evidence is the last read's
	// until then, so that 500 crash-looping Pods cost the API server a
	// read each per rereadAfter, not per restart.
	rereadAfter = 30 * time.Second
)

func newEvidence(kube kubernetes.Interface, fetched func(string)) *Evidence {
	return &Evidence{kube: kube, fetched: fetched, lines: map[podContainer]said{}, fetching: map[podContainer]bool{}, slots: make(chan struct{}, 2)}
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
		k := podContainer{pod: p.UID, name: cs.Name}
		e.mu.Lock()
		last, ok := e.lines[k]
		due := !ok || (last.restarts != cs.RestartCount && time.Since(last.at) >= rereadAfter)
		start := due && !e.fetching[k]
		if start {
			// At most len(slots) reads at once; one that finds none
			// waits for a later report rather than a goroutine each.
			select {
			case e.slots <- struct{}{}:
				e.fetching[k] = true
			default:
				start = false
			}
		}
		e.mu.Unlock()
		if start {
			go e.fetch(k, cs.RestartCount, p.Namespace, p.Name, previous, deployment)
		}
		return last.text
	}
	return ""
}

// fetch reads the last lines of a run's log, keeps them, and has the
// deployment reported again.
func (e *Evidence) fetch(k podContainer, restarts int32, namespace, pod string, previous bool, deployment string) {
	defer func() { <-e.slots }()
	ctx, cancel := context.WithTimeout(context.Background(), evidenceTimeout)
	defer cancel()
	tail, limit := int64(evidenceLines), int64(limits.MaxEvidenceBytes)
	text := ""
	s, err := e.kube.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: k.name, Previous: previous,
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
	e.lines[k] = said{text: text, restarts: restarts, at: time.Now()} // "": none could be read; read again after rereadAfter
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
