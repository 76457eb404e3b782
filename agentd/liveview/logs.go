package liveview

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"

	"github.com/deploysync/deploysync/internal/textclean"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// logs answers with a container's log: read from the API server a chunk
// at a time, each sent before the next is read, so that a slow reader
// slows the read and nothing piles up in between.
func (s *Server) logs(ctx context.Context, req *ctrlv1.LiveRequest, a *answerCall) error {
	p, err := s.pod(ctx, req)
	if err != nil {
		return err
	}
	container, err := pickContainer(p, req.GetContainer(), req.GetPrevious())
	if err != nil {
		return err
	}
	limit := s.cfg.MaxLogBytes
	if n := req.GetLimitBytes(); n > 0 {
		limit = min(n, limit)
	}
	follow := req.GetFollow()
	// One byte more than the limit, to tell a log that ends there from one
	// that goes on (truncated).
	opts := &corev1.PodLogOptions{Container: container, Previous: req.GetPrevious(), Follow: follow, LimitBytes: new(limit + 1)}
	if n := req.GetTailLines(); n > 0 {
		opts.TailLines = new(int64(min(n, maxTailLines)))
	}

	streamCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var firstByte *time.Timer
	if follow {
		// A follow of a quiet container may wait long for its first line:
		// ctrld learns at once that the agent took it.
		if err := a.send(&ctrlv1.LiveAnswerRequest{}); err != nil {
			return err
		}
	} else {
		firstByte = time.AfterFunc(s.cfg.FirstByte, func() {
			cancel(fmt.Errorf("%w: no log within %v", ErrNoFirstByte, s.cfg.FirstByte))
		})
		defer firstByte.Stop()
	}
	body, err := s.deps.Kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, opts).Stream(streamCtx)
	if err != nil {
		return fmt.Errorf("reading the log of %s/%s: %w", p.Name, container, cause(streamCtx, err))
	}
	defer body.Close()

	raw := &countingReader{r: io.LimitReader(body, limit), n: &s.logBytesRead}
	w := &logWriter{a: a, limit: limit, chunk: make([]byte, 0, ChunkBytes)}
	br := bufio.NewReaderSize(raw, ChunkBytes)
	var carry []byte // the start of a character a cut line split
	for {
		piece, err := br.ReadSlice('\n')
		if firstByte != nil {
			firstByte.Stop()
		}
		if len(piece) > 0 {
			data := append(carry, piece...)
			carry = nil
			if errors.Is(err, bufio.ErrBufferFull) {
				// A line longer than a chunk: cut it where no character is
				// split (an escape sequence it splits loses its introducer
				// and shows the rest as text).
				cut := len(data)
				for i := len(data) - 1; i >= max(0, len(data)-utf8.UTFMax); i-- {
					if utf8.RuneStart(data[i]) {
						if !utf8.FullRune(data[i:]) {
							cut = i
						}
						break
					}
				}
				data, carry = data[:cut], append([]byte(nil), data[cut:]...)
			}
			full, sendErr := w.write(data)
			if sendErr != nil {
				return sendErr
			}
			if full {
				return w.end(true)
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			if _, err := w.write(carry); err != nil {
				return err
			}
			return w.end(raw.read >= limit && (follow || moreThan(body)))
		default:
			return fmt.Errorf("reading the log of %s/%s: %w", p.Name, container, cause(streamCtx, err))
		}
		if br.Buffered() == 0 {
			// Nothing more read yet: what there is goes now (a follow's
			// line as it comes), and the next read waits for the send.
			if err := w.flush(); err != nil {
				return err
			}
		}
	}
}

// moreThan reports whether r holds another byte (the API server was
// asked for one more than the limit).
func moreThan(r io.Reader) bool {
	var one [1]byte
	_, err := io.ReadFull(r, one[:])
	return err == nil
}

// pickContainer names the container whose log is asked: the one named,
// or the Pod's first (the app's). A previous run is asked only of a
// container that restarted (a kubelet has none to show otherwise).
func pickContainer(p *corev1.Pod, name string, previous bool) (string, error) {
	if name == "" {
		if len(p.Spec.Containers) == 0 {
			return "", fmt.Errorf("pod %s has no containers", quote(p.Name))
		}
		name = p.Spec.Containers[0].Name
	}
	found := false
	for _, c := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
		found = found || c.Name == name
	}
	if !found {
		return "", fmt.Errorf("pod %s has no container %s", quote(p.Name), quote(name))
	}
	if previous {
		restarted := false
		for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			restarted = restarted || (cs.Name == name && (cs.RestartCount > 0 || cs.LastTerminationState.Terminated != nil))
		}
		if !restarted {
			return "", fmt.Errorf("container %s of pod %s has not restarted: it has no previous run to show", quote(name), quote(p.Name))
		}
	}
	return name, nil
}

// logWriter gathers cleaned log text into chunks and sends them, up to
// limit bytes in all.
type logWriter struct {
	a       *answerCall
	limit   int64
	sent    int64 // cleaned bytes sent or in chunk
	chunk   []byte
	scratch []byte
}

// write cleans data and adds it to the answer, sending full chunks; full
// says the limit is reached (the rest is not sent).
func (w *logWriter) write(data []byte) (full bool, err error) {
	if len(data) == 0 {
		return false, nil
	}
	w.scratch = textclean.Append(w.scratch[:0], data, -1)
	text := w.scratch
	if room := w.limit - w.sent; int64(len(text)) > room {
		text, full = text[:runeCut(text, int(room))], true
	}
	for len(text) > 0 {
		if len(w.chunk) == ChunkBytes {
			if err := w.flush(); err != nil {
				return false, err
			}
		}
		n := runeCut(text, ChunkBytes-len(w.chunk))
		if n == 0 { // no whole character fits: send what there is first
			if err := w.flush(); err != nil {
				return false, err
			}
			n = runeCut(text, ChunkBytes)
		}
		w.chunk = append(w.chunk, text[:n]...)
		w.sent += int64(n)
		text = text[n:]
	}
	return full, nil
}

// runeCut is the longest prefix of text, at most n bytes, that ends
// between characters.
func runeCut(text []byte, n int) int {
	if n >= len(text) {
		return len(text)
	}
	for n > 0 && !utf8.RuneStart(text[n]) {
		n--
	}
	return n
}

// flush sends the chunk gathered, if any.
func (w *logWriter) flush() error {
	if len(w.chunk) == 0 {
		return nil
	}
	err := w.a.send(&ctrlv1.LiveAnswerRequest{Log: string(w.chunk)})
	w.chunk = w.chunk[:0]
	return err
}

// end sends what is left and ends the answer.
func (w *logWriter) end(truncated bool) error {
	if err := w.flush(); err != nil {
		return err
	}
	return w.a.send(&ctrlv1.LiveAnswerRequest{Done: true, Truncated: truncated})
}

// countingReader counts what is read from the API server, for the tests
// of backpressure.
type countingReader struct {
	r    io.Reader
	read int64
	n    *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += int64(n)
	c.n.Add(int64(n))
	return n, err
}
