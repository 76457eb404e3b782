package tailer

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploysync/deploysync/daemon/metrics"
)

// A database that fails every other poll writes one log line per
// failureLogEvery, not one per failure: a poll that succeeds in between
// does not start a new run of them.
func TestAFlappingDatabaseLogsOncePerInterval(t *testing.T) {
	var out bytes.Buffer
	tl := New(nil, Config{}, slog.New(slog.NewTextHandler(&out, nil)), metrics.New(prometheus.NewRegistry()))
	start := time.Now()
	lost := errors.New("connection refused")
	for i := range 100 { // ten seconds of polls, every 100 ms
		var err error
		if i%2 == 0 {
			err = lost
		}
		tl.notePoll(err, start.Add(time.Duration(i)*100*time.Millisecond))
	}
	if n := strings.Count(out.String(), "poll failed"); n != 1 {
		t.Errorf("%d log lines for 10 s of polls failing every other time, want 1:\n%s", n, out.String())
	}
}
