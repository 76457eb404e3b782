package tui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"google.golang.org/grpc"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// The bounds of a log in the console: a follow runs for as long as the
// page is shown, and the console keeps only its newest lines.
const (
	// logTail is how many of the newest lines a log starts with.
	logTail = 500
	// maxLogLines and maxLogBytes bound the lines a log page keeps; the
	// oldest go first, and the page says how many went.
	maxLogLines = 5000
	maxLogBytes = 2 << 20
	// maxLineBytes is the longest line kept as one; a longer one is kept
	// in pieces of this size, each a line.
	maxLineBytes = 16 << 10
)

// logLines is the text of a log as the page keeps it: cleaned (CleanLog,
// tabs as spaces), in lines, at most maxLogLines and maxLogBytes of them
// with the newest, and how many older lines were dropped.
type logLines struct {
	lines []string
	// partial is the text after the last line break, as it came (a piece
	// may end inside an escape sequence, which the next one ends), and
	// shown cleaned as the last line meanwhile.
	partial, partialShown string
	bytes                 int // of lines and partial
	dropped               int // lines dropped from the front
}

// add takes a piece of log text, as the agent sent it.
func (l *logLines) add(text string) {
	l.bytes -= len(l.partial)
	parts := strings.Split(strings.ReplaceAll(l.partial+text, "\r\n", "\n"), "\n")
	l.partial = parts[len(parts)-1]
	for len(l.partial) > maxLineBytes { // kept as lines of its own
		cut := maxLineBytes
		for cut > 0 && !utf8.RuneStart(l.partial[cut]) {
			cut--
		}
		parts = slices.Insert(parts, len(parts)-1, l.partial[:cut])
		l.partial = l.partial[cut:]
	}
	for _, line := range parts[:len(parts)-1] {
		// CleanLog makes a line break of a carriage return or a line
		// separator.
		for _, clean := range strings.Split(cleanLine(line), "\n") {
			l.push(clean)
		}
	}
	l.partialShown = strings.ReplaceAll(cleanLine(l.partial), "\n", " ")
	l.bytes += len(l.partial)
	l.trim()
}

// cleanLine is a line of log as shown: CleanLog's, tabs as spaces.
func cleanLine(s string) string {
	return strings.ReplaceAll(CleanLog(s), "\t", "    ")
}

// push appends a whole line, in pieces if it is too long to keep as one.
func (l *logLines) push(line string) {
	for len(line) > maxLineBytes {
		cut := maxLineBytes
		for cut > 0 && !utf8.RuneStart(line[cut]) {
			cut--
		}
		l.lines = append(l.lines, line[:cut])
		l.bytes += cut
		line = line[cut:]
	}
	l.lines = append(l.lines, line)
	l.bytes += len(line)
}

// trim drops the oldest lines beyond the bounds. The dropped places are
// cleared, so that the array under lines holds no text it does not show.
func (l *logLines) trim() {
	n := 0
	for len(l.lines)-n > maxLogLines || l.bytes > maxLogBytes && n < len(l.lines) {
		l.bytes -= len(l.lines[n])
		n++
	}
	if n == 0 {
		return
	}
	clear(l.lines[:n])
	l.lines = l.lines[n:]
	l.dropped += n
}

// shown is the lines to show, the partial one last.
func (l logLines) shown() []string {
	if l.partial == "" {
		return l.lines
	}
	return append(l.lines[:len(l.lines):len(l.lines)], l.partialShown)
}

// count is how many lines are kept, the partial one included.
func (l logLines) count() int { return len(l.shown()) }

// logStream is one StreamLogs call of a log page, shared by the page's
// copies: read starts it once, and stop ends it (the page left, or the
// run or following switched).
type logStream struct {
	ctx     context.Context
	cancel  context.CancelCauseFunc
	started atomic.Bool
}

// Why a log stream ended on the console's side.
var (
	errLogLeft    = errors.New("the log's page was left")
	errLogNoStart = fmt.Errorf("ctrld did not begin to answer within %s", liveTimeout)
)

func newLogStream() *logStream {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &logStream{ctx: ctx, cancel: cancel}
}

// stop ends the stream, if it runs.
func (s *logStream) stop() { s.cancel(errLogLeft) }

// open starts the call and reads its first piece. ctrld answers within
// 10 s even when the agent does not; if ctrld does not, the console stops
// waiting after liveTimeout.
func (s *logStream) open(op ctrlv1.OperatorServiceClient, req *ctrlv1.StreamLogsRequest) tea.Msg {
	var begun atomic.Bool
	t := time.AfterFunc(liveTimeout, func() {
		if !begun.Load() {
			s.cancel(errLogNoStart)
		}
	})
	defer t.Stop()
	c, err := op.StreamLogs(s.ctx, req)
	if err != nil {
		return logsMsg{stream: s, end: s.why(err)}
	}
	msg := s.recv(c)
	begun.Store(true)
	return msg
}

// recv reads the stream's next piece; its message carries the command
// that reads the one after it.
func (s *logStream) recv(c grpc.ServerStreamingClient[ctrlv1.StreamLogsResponse]) tea.Msg {
	r, err := c.Recv()
	if err != nil {
		return logsMsg{stream: s, end: s.why(err)}
	}
	return logsMsg{stream: s, text: r.GetLog(), truncated: r.GetTruncated(), next: func() tea.Msg { return s.recv(c) }}
}

// why is how the stream ended: io.EOF (all of it came), ctrld's error,
// or the console's own reason for ending it.
func (s *logStream) why(err error) error {
	if cause := context.Cause(s.ctx); cause != nil {
		return cause
	}
	return err
}

// logsMsg is a piece of a pod's log, or how its stream ended.
type logsMsg struct {
	stream    *logStream
	text      string
	truncated bool
	// end is why the stream ended: io.EOF when all was sent; nil while
	// it goes on.
	end error
	// next reads the next piece; nil once the stream ended.
	next tea.Cmd
}

// continued is the command that reads the next piece while the page
// that took this one is shown (see Model.Update).
func (m logsMsg) continued() tea.Cmd { return m.next }

// abandoned ends the stream of a piece no page took: the page is gone.
func (m logsMsg) abandoned() { m.stream.stop() }

// logsPage is a pod's log in one region, through its agent: the newest
// logTail lines of a container (the app's, or the one picked on the
// containers page), of its current run or of the
// one before (p: the run that crashed), and, following (f), the lines
// that come while the page is shown, in a viewport that scrolls and
// stays on the newest line until scrolled up. It keeps at most
// maxLogLines and maxLogBytes, dropping the oldest and saying so. The
// follow ends when the page is left. A read-only key may not read logs
// (they may carry secrets): the page shows ctrld's refusal.
type logsPage struct {
	id, region, pod string
	// container is the one whose log is read; empty: the pod's first,
	// the app's (the agent picks it).
	container        string
	previous, follow bool
	from             page // the pods page esc returns to
	stream           *logStream
	log              logLines
	// begun: a piece or the end came, at at.
	begun bool
	at    time.Time
	// end is why the stream ended; nil while it runs.
	end       error
	truncated bool // ctrld cut the answer at its size cap
	window    logView
}

// newLogsPage is the log of pod of deployment id in region: the run
// before the current one when previous, else the current one,
// following it.
func newLogsPage(id, region, pod string, previous bool, from page) logsPage {
	return logsPage{id: id, region: region, pod: pod, previous: previous, follow: !previous, from: from,
		stream: newLogStream(), window: logView{pinned: true}}
}

// ofContainer is the page reading container's log.
func (p logsPage) ofContainer(container string) logsPage {
	p.container = container
	return p
}

// parent is the page esc returns to (see openedFrom).
func (p logsPage) parent() page { return p.from }

// leave ends the follow: the page is no longer shown (see Model.leave).
func (p logsPage) leave() { p.stream.stop() }

func (p logsPage) title() string {
	if p.container != "" {
		return "log of " + Clean(p.pod) + " container " + Clean(p.container) + " (" + liveWhere(p.id, p.region) + ")  (esc: back)"
	}
	return "log of " + Clean(p.pod) + " (" + liveWhere(p.id, p.region) + ")  (esc: back)"
}

func (p logsPage) request() *ctrlv1.StreamLogsRequest {
	return &ctrlv1.StreamLogsRequest{DeploymentId: p.id, Region: p.region, Pod: p.pod, Container: p.container, TailLines: logTail, Previous: p.previous,
		Follow: p.follow && !p.previous}
}

// read starts the page's stream, once: its pieces come as messages, each
// with the command that reads the next (see logsMsg).
func (p logsPage) read(op ctrlv1.OperatorServiceClient) func(ctx context.Context) (tea.Msg, error) {
	s, req := p.stream, p.request()
	return func(context.Context) (tea.Msg, error) {
		if !s.started.CompareAndSwap(false, true) {
			return nil, nil
		}
		return s.open(op, req), nil
	}
}

func (p logsPage) receive(msg tea.Msg, pc pageContext) (page, bool) {
	r, ok := msg.(logsMsg)
	if !ok || r.stream != p.stream {
		return p, false
	}
	if !p.begun {
		p.begun, p.at = true, pc.now
	}
	p.log.add(r.text)
	p.truncated = p.truncated || r.truncated
	p.end = r.end
	p.window.lines = filtered(p.log.shown(), pc.filter)
	p.window = p.laid(pc)
	return p, true
}

func (p logsPage) filter(f string) page {
	p.window.lines = filtered(p.log.shown(), f)
	return p
}

func (p logsPage) readAt() time.Time { return p.at }

// restarted is the page reading its pod's log anew, of the run and
// following as asked; the old stream ends.
func (p logsPage) restarted(previous, follow bool) logsPage {
	p.stream.stop()
	n := newLogsPage(p.id, p.region, p.pod, previous, p.from).ofContainer(p.container)
	n.follow = follow
	n.window.width, n.window.height = p.window.width, p.window.height
	return n
}

func (p logsPage) update(msg tea.KeyPressMsg, pc pageContext) (page, action) {
	k, v := pc.keys, p.laid(pc)
	switch {
	case key.Matches(msg, k.Previous):
		return p.restarted(!p.previous, p.previous), action{read: true} // back on the current run, following
	case key.Matches(msg, k.Follow):
		if p.previous { // the crashed run ends where it ended: follow the current one
			return p.restarted(false, true), action{read: true}
		}
		return p.restarted(false, !p.follow), action{read: true}
	case key.Matches(msg, k.Newest):
		v.pinned = true
	case key.Matches(msg, k.Up):
		v = v.scrolled(-1)
	case key.Matches(msg, k.Down):
		v = v.scrolled(1)
	case key.Matches(msg, k.PageUp):
		v = v.scrolled(-v.page())
	case key.Matches(msg, k.PageDown):
		v = v.scrolled(v.page())
	}
	p.window = v
	return p, action{}
}

func (p logsPage) help(k KeyMap) (short, keys []key.Binding) {
	prev, follow := k.Previous, k.Follow
	switch {
	case p.previous:
		prev.SetHelp("p", "current run")
		follow.SetHelp("f", "follow the current run")
	case p.follow:
		follow.SetHelp("f", "stop following")
	}
	short = []key.Binding{k.Back, prev, follow}
	keys = []key.Binding{prev, follow}
	if v := p.window; p.begun {
		if !v.atTop() {
			keys = append(keys, k.Up, k.PageUp)
		}
		if !v.atBottom() {
			keys = append(keys, k.Down, k.PageDown, k.Newest)
		}
	}
	return short, keys
}

func (p logsPage) view(pc pageContext) string {
	s := pc.styles
	var b strings.Builder
	what := fmt.Sprintf("current run: the last %d lines (f: follow)", logTail)
	switch {
	case p.previous:
		what = fmt.Sprintf("the run before (the one that crashed): its last %d lines", logTail)
	case p.follow:
		what = fmt.Sprintf("current run: the last %d lines, then new ones as they come", logTail)
	}
	which := "app container"
	if p.container != "" {
		which = "container " + Clean(p.container)
	}
	b.WriteString(s.Dim.Render(clip("  "+which+" · "+what, pc.width)) + "\n")
	v := p.laid(pc)
	switch {
	case !p.begun:
		return b.String() + s.Dim.Render(clip("  asking "+Clean(p.region)+"'s agent for the log of "+Clean(p.pod)+" ...", pc.width)) + "\n"
	case len(v.lines) == 0:
		// No lines to scroll: what the stream said, without an empty
		// view between.
		return b.String() + "\n" + p.footer(pc, v)
	}
	b.WriteString(v.view() + "\n")
	b.WriteString(p.footer(pc, v))
	return b.String()
}

// footer says where the view is in the log, what the page dropped, and
// how the stream ended (ctrld's error in its words).
func (p logsPage) footer(pc pageContext, v logView) string {
	s := pc.styles
	where := "no lines yet"
	switch {
	case p.log.count() == 0 && p.end != nil:
		where = "no lines"
	case p.log.count() == 0:
	case len(v.lines) == 0:
		where = fmt.Sprintf(`no lines match "%s"`, Clean(pc.filter))
	default:
		where = v.where()
	}
	switch {
	case p.end == nil && p.follow && !p.previous:
		where += " · following"
	case p.end == nil:
		where += " · reading ..."
	case errors.Is(p.end, io.EOF) && p.follow && !p.previous:
		where += " · the follow ended: the container stopped, or its pod is gone"
	case errors.Is(p.end, io.EOF):
		where += " · the end of the log"
	}
	out := s.Dim.Render(elide("  "+where, pc.width)) + "\n"
	for _, note := range p.notes() {
		out += s.Warn.Render(elide("  "+note, pc.width)) + "\n"
	}
	if p.end != nil && !errors.Is(p.end, io.EOF) {
		out += s.Bad.Render(indented("  ", ErrorText(p.end), pc.width, 3)) + "\n"
	}
	return out
}

// notes say what the page's lines leave out, a line each.
func (p logsPage) notes() []string {
	var out []string
	if p.log.dropped > 0 {
		out = append(out, fmt.Sprintf("%d older lines dropped (the console keeps %d lines, %d MiB)", p.log.dropped, maxLogLines, maxLogBytes>>20))
	}
	if p.truncated {
		out = append(out, "the rest was cut: the answer reached ctrld's size cap (f follows instead)")
	}
	return out
}

// laid is the page's window at its size in pc: the lines around it
// (what it is, where it is, the notes and an error) are left out.
func (p logsPage) laid(pc pageContext) logView {
	around := 2 + len(p.notes())
	if p.end != nil && !errors.Is(p.end, io.EOF) {
		around += strings.Count(indented("  ", ErrorText(p.end), pc.width, 3), "\n") + 1
	}
	pc.height -= around
	return p.window.laid(pc)
}
