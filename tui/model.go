package tui

import (
	"context"
	"slices"
	"time"
	"unicode/utf8"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Options configure the console.
type Options struct {
	// Refresh is the poll interval (default 1s).
	Refresh time.Duration
	// NoColor drops colors (set it from NO_COLOR).
	NoColor bool
	// Now is the clock (tests pin it for stable output).
	Now func() time.Time
	// StatusFor is how long an action's outcome stays on the status line
	// (default 5s): long enough to read, gone before it is taken for news.
	StatusFor time.Duration
	// Reconnect, if set, runs after a read found ctrld unreachable: the
	// connection's own backoff grows between attempts (to 5 s with
	// internal/dial, to minutes with gRPC's default), and a console that
	// found ctrld back only that late would show it unreachable after it
	// answers again. (Set it to the gRPC connection's ResetConnectBackoff.)
	Reconnect func()
	// ReadOnly is a person who may look, not change anything (a
	// read-only SSH key): the keys that change something are neither
	// shown nor taken, so no confirmation offers a change ctrld would
	// refuse (it refuses them whatever the console does).
	ReadOnly bool
	// Notices is a directory whose files each hold one line the console
	// shows until the file is gone; `go tool task dev` reports a stack
	// component that died there. Empty outside the dev stack.
	Notices string
}

// The home pages, which tab cycles through.
const (
	homeRegions = iota
	homeDeployments
	homeRollouts
	homePages
)

// MaxInput is the most characters the filter and the command line take;
// keys beyond it are dropped. Nothing the console names is longer, and
// each key re-filters every list with the whole filter.
const MaxInput = 128

// Model is the console's root model.
type Model struct {
	op     ctrlv1.OperatorServiceClient
	opts   Options
	styles Styles
	keys   KeyMap
	help   help.Model
	width  int
	height int
	// home is the regions, the deployments and the rollouts page; each
	// keeps its rows and cursor while another is shown. top is the one
	// shown, or the one opened was opened from.
	home [homePages]page
	top  int
	// opened is the page opened from home[top] (a region, a deployment's
	// history) while it is shown; nil when none is. esc closes it.
	opened page
	// overviews are the regions' health as last read (see pageContext).
	overviews []*ctrlv1.RegionOverview
	confirm   *confirmation
	// filter narrows every list to rows containing it; filtering is true
	// while it is being typed.
	filter    string
	filtering bool
	// command is the ":" command line while it is open.
	command *commandLine
	status  string // outcome of the last action
	// statusSeq numbers each status shown, so that the expiry of an older
	// one does not clear a newer one.
	statusSeq int
	err       error // why ctrld is not answering, if it is not
	notices   []string
}

// New returns the console on an operator client.
func New(op ctrlv1.OperatorServiceClient, opts Options) Model {
	if opts.Refresh <= 0 {
		opts.Refresh = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.StatusFor <= 0 {
		opts.StatusFor = 5 * time.Second
	}
	h := help.New()
	if opts.NoColor {
		plain := lipgloss.NewStyle()
		h.Styles = help.Styles{Ellipsis: plain, ShortKey: plain, ShortDesc: plain, ShortSeparator: plain,
			FullKey: plain, FullDesc: plain, FullSeparator: plain}
	}
	keys := DefaultKeyMap()
	if opts.ReadOnly {
		keys = keys.withoutChanges()
	}
	return Model{op: op, opts: opts, styles: NewStyles(opts.NoColor), keys: keys, help: h, width: 80, height: 24,
		home: [homePages]page{homeRegions: regionsPage{}, homeDeployments: deploymentsPage{}, homeRollouts: rolloutsPage{}}}
}

// The root's messages; each page has its own for its reads.
type (
	tickMsg    struct{}
	noticesMsg struct{ notices []string }
	errMsg     struct{ err error }
	// statusExpiredMsg clears the status line if it still shows status seq.
	statusExpiredMsg struct{ seq int }
	actionMsg        struct {
		what, done string // see confirmation
		err        error
	}
)

// Init implements tea.Model.
func (m Model) Init() tea.Cmd { return tea.Batch(m.fetch(), m.tick(), m.readNotices()) }

// showStatus puts s on the status line and returns the command that
// clears it after Options.StatusFor.
func (m *Model) showStatus(s string) tea.Cmd {
	m.status = s
	m.statusSeq++
	seq := m.statusSeq
	return tea.Tick(m.opts.StatusFor, func(time.Time) tea.Msg { return statusExpiredMsg{seq} })
}

// showRunning puts an action in progress on the status line until its
// outcome replaces it: an action may take longer than Options.StatusFor,
// and a blank line would look as if it had ended.
func (m *Model) showRunning(what string) {
	m.status = "running: " + what + " ..."
	m.statusSeq++ // an older status's expiry must not clear it
}

func (m Model) tick() tea.Cmd {
	return tea.Tick(m.opts.Refresh, func(time.Time) tea.Msg { return tickMsg{} })
}

// fetch loads what the shown page shows, off the UI goroutine.
func (m Model) fetch() tea.Cmd {
	p := m.shown()
	within := readTimeout
	if slow, ok := p.(slowReader); ok {
		within = slow.readTimeout()
	}
	return m.callWithin(p.read(m.op), within)
}

// readTimeout bounds a read of ctrld's own state.
const readTimeout = 5 * time.Second

// call runs one read of the operator API as a command, bounded in time;
// a failure becomes errMsg (the banner) and asks the connection to retry
// at once (see Options.Reconnect), so that the next tick finds ctrld as
// soon as it is back.
func (m Model) call(read func(ctx context.Context) (tea.Msg, error)) tea.Cmd {
	return m.callWithin(read, readTimeout)
}

// callWithin is call bounded by within.
func (m Model) callWithin(read func(ctx context.Context) (tea.Msg, error), within time.Duration) tea.Cmd {
	reconnect := m.opts.Reconnect
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		msg, err := read(ctx)
		if err != nil {
			// Only a failure to reach ctrld is worth a new connection
			// attempt; an answer (not found, refused) came from it.
			if reconnect != nil && unreachable(err) {
				reconnect()
			}
			return errMsg{err}
		}
		return msg
	}
}

// Update implements tea.Model.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		if m.command != nil {
			c := *m.command
			c.input.SetWidth(max(m.width-2, 1))
			m.command = &c
		}
		return m, nil
	case tickMsg:
		return m, tea.Batch(m.fetch(), m.tick(), m.readNotices())
	case noticesMsg:
		m.notices = msg.notices
		return m, nil
	case regionsMsg:
		m.overviews = msg.regions
		return m.deliver(msg), nil
	case deploymentsMsg:
		m.overviews = msg.regions
		return m.deliver(msg), nil
	case detailMsg, historyMsg, rolloutMsg, rolloutsMsg, yamlMsg, podsMsg, eventsMsg, fleetMsg:
		return m.deliver(msg), nil
	case continuedMsg:
		m, took := m.deliverTook(msg)
		if !took {
			msg.abandoned() // its page is gone: nobody reads on
			return m, nil
		}
		return m, msg.continued()
	case errMsg:
		m.err = msg.err // shown as a banner; the next tick tries again
		return m, nil
	case statusExpiredMsg:
		if msg.seq == m.statusSeq {
			m.status = ""
		}
		return m, nil
	case actionMsg:
		outcome := msg.done
		if msg.err != nil {
			outcome = "FAILED: " + msg.what + ": " + ErrorText(msg.err)
		}
		return m, tea.Batch(m.fetch(), m.showStatus(outcome))
	case tea.KeyPressMsg:
		return m.key(msg)
	}
	return m, nil
}

func (m Model) key(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	if key.Matches(msg, m.keys.Interrupt) { // `task dev` is stopped with it
		m.leave()
		return m, tea.Quit
	}
	if m.filtering {
		switch msg.Code {
		case tea.KeyEnter:
			m.filtering = false
		case tea.KeyEscape:
			m.filtering, m.filter = false, ""
		case tea.KeyBackspace:
			if _, size := utf8.DecodeLastRuneInString(m.filter); size > 0 {
				m.filter = m.filter[:len(m.filter)-size]
			}
		default:
			if utf8.RuneCountInString(m.filter)+utf8.RuneCountInString(msg.Text) <= MaxInput {
				m.filter += msg.Text
			}
		}
		m.applyFilter()
		return m, nil
	}
	if m.command != nil {
		return m.commandKey(msg)
	}
	if m.confirm != nil && m.confirm.form != nil {
		return m.formKey(msg)
	}
	if m.confirm != nil {
		switch {
		case key.Matches(msg, m.keys.Yes):
			c := m.confirm
			m.confirm = nil
			m.showRunning(c.what)
			return m, c.run
		case key.Matches(msg, m.keys.No):
			c := m.confirm
			m.confirm = nil
			return m, m.showStatus("cancelled: " + c.what)
		}
		return m, nil
	}
	switch {
	case key.Matches(msg, m.keys.Quit):
		m.leave()
		return m, tea.Quit
	case key.Matches(msg, m.keys.Help):
		m.help.ShowAll = !m.help.ShowAll
		return m, nil
	case key.Matches(msg, m.keys.Filter):
		m.filtering, m.filter = true, ""
		m.applyFilter()
		return m, nil
	case key.Matches(msg, m.keys.Command):
		return m.openCommandLine()
	case key.Matches(msg, m.keys.Switch):
		m.leave()
		m.opened, m.top = nil, (m.top+1)%homePages // the next home page
		return m.turn()
	case key.Matches(msg, m.keys.Fleet):
		if _, on := m.shown().(fleetPage); !on {
			m.leave()
			m.opened = fleetPage{}
			return m.turn()
		}
	case key.Matches(msg, m.keys.Back) && m.opened != nil:
		m.leave()
		m.opened = openedFrom(m.opened)
		return m.turn()
	}
	p, act := m.shown().update(msg, m.pageContext())
	m.setShown(p)
	return m.do(act)
}

// do does what a page asked for.
func (m Model) do(a action) (tea.Model, tea.Cmd) {
	switch {
	case a.open != nil:
		m.leave()
		m.opened = a.open
		return m.turn()
	case a.confirm != nil:
		m.confirm = a.confirm
	case a.status != "":
		return m, m.showStatus(a.status)
	case a.read:
		return m, m.fetch()
	}
	return m, nil
}

// leave ends what the page shown runs (a log's follow): another page
// takes the screen, or the console quits.
func (m Model) leave() {
	if l, ok := m.shown().(leaver); ok {
		l.leave()
	}
}

// turn shows the page now chosen and reads it. The filter and the status
// line belong to the page they were typed or shown on, so both are
// cleared.
func (m Model) turn() (tea.Model, tea.Cmd) {
	m.filter, m.status = "", ""
	m.applyFilter()
	return m, m.fetch()
}

// shown is the page on the screen.
func (m Model) shown() page {
	if m.opened != nil {
		return m.opened
	}
	return m.home[m.top]
}

// setShown replaces the page on the screen with p, its next state.
func (m *Model) setShown(p page) {
	if m.opened != nil {
		m.opened = p
	} else {
		m.home[m.top] = p
	}
}

// eachPage replaces every page the root holds with next(page).
func (m *Model) eachPage(next func(page) page) {
	for i, p := range m.home {
		m.home[i] = next(p)
	}
	if m.opened != nil {
		m.opened = next(m.opened)
	}
}

// deliver hands a read's answer to the pages it is for; ctrld answered,
// so the banner goes. An answer no page takes (asked for before the
// operator moved on) says nothing of now.
func (m Model) deliver(msg tea.Msg) Model {
	m, _ = m.deliverTook(msg)
	return m
}

// deliverTook is deliver, saying whether a page took msg.
func (m Model) deliverTook(msg tea.Msg) (Model, bool) {
	pc, took := m.pageContext(), false
	m.eachPage(func(p page) page {
		p, ok := p.receive(msg, pc)
		took = took || ok
		return p
	})
	if took {
		m.err = nil
	}
	return m, took
}

// pageContext is what the pages read from the root now.
func (m Model) pageContext() pageContext {
	return pageContext{styles: m.styles, keys: m.keys, op: m.op, now: m.opts.Now(), asOf: m.asOf(), width: m.width,
		height: m.height - frameLines, stale: m.stale(), filter: m.filter, overviews: m.overviews}
}

// frameLines is about the lines the root draws around a page: title, the
// blank lines around it, the one-line help.
const frameLines = 5

// shownHelp is the help of the page shown: its keys, then the root's that
// work there.
func (m Model) shownHelp() pageHelp {
	k := m.keys
	short, keys := m.shown().help(k)
	// Tab in a word on the one line, which must fit 80 columns; the full
	// help names the pages.
	for i, b := range short {
		if slices.Equal(b.Keys(), k.Switch.Keys()) {
			short[i].SetHelp("tab", "next page")
		}
	}
	moves := []key.Binding{k.Switch, k.Command, k.Filter}
	if _, on := m.shown().(fleetPage); !on {
		moves = append(moves, k.Fleet)
	}
	if m.opened != nil {
		moves = append([]key.Binding{k.Back}, moves...)
	}
	line := append(short, k.Filter, k.Help, k.Quit)
	if ansi.StringWidth(m.help.ShortHelpView(line)) > m.width {
		// It does not fit the window: the filter gives way first (the
		// full help lists it), so that help and quit stay in view.
		line = append(short, k.Help, k.Quit)
	}
	return pageHelp{short: line, full: [][]key.Binding{keys, moves, {k.Help, k.Quit}}}
}

// applyFilter re-filters every list after the filter changed.
func (m *Model) applyFilter() {
	m.eachPage(func(p page) page { return p.filter(m.filter) })
}

// View implements tea.Model.
func (m Model) View() tea.View {
	v := tea.NewView(m.render())
	v.AltScreen = true
	return v
}

// Content is the console's screen as text (what View shows).
func (m Model) Content() string { return m.render() }

// stale reports whether the page shows data that may no longer be true:
// ctrld does not answer, and the rows are the last it sent.
func (m Model) stale() bool { return noAnswer(m.err) && !m.shownAt().IsZero() }

// unreachable reports whether err is a failure to reach ctrld, or to hear
// from it in time: only then is the connection worth a new attempt.
func unreachable(err error) bool {
	c := status.Code(err)
	return err != nil && (c == codes.Unavailable || c == codes.DeadlineExceeded)
}

// noAnswer reports whether err left the read without an answer: ctrld
// unreachable, or failing to serve it (Internal, Unknown). Then the rows
// shown are its last answer, marked stale. Any other code is ctrld's
// answer (a deployment not found, a permission refused): said as such,
// with nothing marked stale.
func noAnswer(err error) bool {
	c := status.Code(err)
	return unreachable(err) || c == codes.Internal || c == codes.Unknown
}

// shownAt is when the shown page's data was read (zero before the first
// read answered).
func (m Model) shownAt() time.Time { return m.shown().readAt() }

// asOf is the time the page's ages are counted to: now while ctrld
// answers, the last good read while it does not, so that "3m ago" does
// not keep counting as if it had just been read.
func (m Model) asOf() time.Time {
	if m.stale() {
		return m.shownAt()
	}
	return m.opts.Now()
}

// ErrorText is how the console (and the script commands) show an error:
// a gRPC error as its code and the server's own message, cleaned (see
// Clean).
func ErrorText(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Code().String() + ": " + Clean(s.Message())
	}
	return Clean(err.Error())
}
