package tui

import (
	"context"
	"time"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
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
	// Reconnect, if set, runs after a read failed: the connection's own
	// backoff grows to minutes between attempts, and a console that found
	// ctrld back only that late would show it unreachable long after it
	// answers again. (Set it to the gRPC connection's ResetConnectBackoff.)
	Reconnect func()
	// Notices is a directory whose files each hold one line the console
	// shows until the file is gone; `go tool task dev` reports a stack
	// component that died there. Empty outside the dev stack.
	Notices string
}

type page int

const (
	pageRegions page = iota
	pageRegion
	pageDeployments
	pageHistory
)

// Model is the console's root model.
type Model struct {
	op          ctrlv1.OperatorServiceClient
	opts        Options
	styles      Styles
	keys        KeyMap
	help        help.Model
	width       int
	height      int
	page        page
	regions     regionsPage
	detail      detailPage
	deployments deploymentsPage
	history     historyPage
	confirm     *confirmation
	// filter narrows every list to rows containing it; filtering is true
	// while it is being typed.
	filter    string
	filtering bool
	status    string // outcome of the last action
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
	return Model{op: op, opts: opts, styles: NewStyles(opts.NoColor), keys: DefaultKeyMap(), help: h, width: 80, height: 24}
}

// Messages.
type (
	tickMsg        struct{}
	regionsMsg     struct{ regions []*ctrlv1.RegionOverview }
	deploymentsMsg struct {
		deployments []*ctrlv1.DeploymentSummary
		regions     []*ctrlv1.RegionOverview // for the confirmations' warnings
	}
	noticesMsg struct{ notices []string }
	historyMsg struct {
		id        string // the deployment asked for
		revisions []*ctrlv1.DeploymentRevision
	}
	detailMsg struct {
		name    string // the region asked for
		region  *ctrlv1.GetRegionResponse
		pending *ctrlv1.ListPendingChangesResponse
	}
	errMsg struct{ err error }
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

// fetch loads what the current page shows, off the UI goroutine.
func (m Model) fetch() tea.Cmd {
	op, region, id := m.op, m.detail.name, m.history.id
	switch m.page {
	case pageHistory:
		return m.call(func(ctx context.Context) (tea.Msg, error) {
			r, err := op.GetDeploymentHistory(ctx, &ctrlv1.GetDeploymentHistoryRequest{DeploymentId: id, Limit: historyShown})
			return historyMsg{id, r.GetRevisions()}, err
		})
	case pageDeployments:
		return m.call(func(ctx context.Context) (tea.Msg, error) {
			r, err := op.ListDeployments(ctx, &ctrlv1.ListDeploymentsRequest{})
			if err != nil {
				return nil, err
			}
			regions, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
			return deploymentsMsg{r.GetDeployments(), regions.GetRegions()}, err
		})
	case pageRegion:
		return m.call(func(ctx context.Context) (tea.Msg, error) {
			r, err := op.GetRegion(ctx, &ctrlv1.GetRegionRequest{Region: region})
			if err != nil {
				return nil, err
			}
			p, err := op.ListPendingChanges(ctx, &ctrlv1.ListPendingChangesRequest{Region: region, Limit: pendingShown})
			return detailMsg{region, r, p}, err
		})
	}
	return m.call(func(ctx context.Context) (tea.Msg, error) {
		r, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
		return regionsMsg{r.GetRegions()}, err
	})
}

// call runs one read of the operator API as a command, bounded in time;
// a failure becomes errMsg (the banner) and asks the connection to retry
// at once (see Options.Reconnect), so that the next tick finds ctrld as
// soon as it is back.
func (m Model) call(read func(ctx context.Context) (tea.Msg, error)) tea.Cmd {
	reconnect := m.opts.Reconnect
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		msg, err := read(ctx)
		if err != nil {
			// Only a failure to reach ctrld is worth a new connection
			// attempt; an answer (not found, refused) came from it.
			if c := status.Code(err); reconnect != nil && (c == codes.Unavailable || c == codes.DeadlineExceeded) {
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
		return m, nil
	case tickMsg:
		return m, tea.Batch(m.fetch(), m.tick(), m.readNotices())
	case noticesMsg:
		m.notices = msg.notices
		return m, nil
	case regionsMsg:
		m.err = nil
		m.regions.at = m.opts.Now()
		m.regions.set(msg.regions, m.filter)
		return m, nil
	case detailMsg:
		if m.page != pageRegion || msg.name != m.detail.name {
			// Asked for before the operator moved on: applied, it would show
			// another region's rows (and act on them) under this one's name.
			return m, nil
		}
		m.err = nil
		m.detail.at = m.opts.Now()
		m.detail.set(msg.region, msg.pending, m.filter)
		return m, nil
	case historyMsg:
		if m.page != pageHistory || msg.id != m.history.id {
			return m, nil // asked for before the operator moved on (see detailMsg)
		}
		m.err = nil
		m.history.at = m.opts.Now()
		m.history.set(msg.revisions, m.filter)
		return m, nil
	case deploymentsMsg:
		m.err = nil
		m.deployments.at = m.opts.Now()
		m.deployments.set(msg.deployments, m.filter)
		m.regions.at = m.deployments.at
		m.regions.set(msg.regions, m.filter)
		return m, nil
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
		return m, tea.Quit
	}
	if m.filtering {
		switch msg.Code {
		case tea.KeyEnter:
			m.filtering = false
		case tea.KeyEscape:
			m.filtering, m.filter = false, ""
		case tea.KeyBackspace:
			if m.filter != "" {
				m.filter = m.filter[:len(m.filter)-1]
			}
		default:
			m.filter += msg.Text
		}
		m.applyFilter()
		return m, nil
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
		return m, tea.Quit
	case key.Matches(msg, m.keys.Help):
		m.help.ShowAll = !m.help.ShowAll
		return m, nil
	case key.Matches(msg, m.keys.Filter):
		m.filtering, m.filter = true, ""
		m.applyFilter()
		return m, nil
	case key.Matches(msg, m.keys.Switch):
		if m.page == pageDeployments || m.page == pageHistory {
			return m.turnTo(pageRegions)
		}
		return m.turnTo(pageDeployments)
	}
	switch m.page {
	case pageRegions:
		return m.regionsKey(msg)
	case pageDeployments:
		return m.deploymentsKey(msg)
	case pageHistory:
		return m.historyKey(msg)
	}
	return m.detailKey(msg)
}

func (m Model) deploymentsKey(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	r := m.deployments.selected()
	switch {
	case key.Matches(msg, m.keys.Up):
		m.deployments.move(-1)
	case key.Matches(msg, m.keys.Down):
		m.deployments.move(1)
	case key.Matches(msg, m.keys.Stop) && r != nil:
		m.confirm = m.statusConfirmation(r.region, r.region.GetRegion(), ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED)
	case key.Matches(msg, m.keys.Start) && r != nil:
		m.confirm = m.statusConfirmation(r.region, r.region.GetRegion(), ctrlv1.DesiredStatus_DESIRED_STATUS_RUNNING)
	case key.Matches(msg, m.keys.ScaleUp) && r != nil:
		m.confirm = m.scaleConfirmation(r.region, r.region.GetRegion(), r.region.GetReplicas()+1)
	case key.Matches(msg, m.keys.ScaleDown) && r != nil && r.region.GetReplicas() > 0:
		m.confirm = m.scaleConfirmation(r.region, r.region.GetRegion(), r.region.GetReplicas()-1)
	case key.Matches(msg, m.keys.History) && r != nil:
		m.history = historyPage{id: r.deployment.GetDeploymentId()}
		return m.turnTo(pageHistory)
	}
	return m, nil
}

func (m Model) historyKey(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	switch {
	case key.Matches(msg, m.keys.Back):
		return m.turnTo(pageDeployments)
	case key.Matches(msg, m.keys.Up):
		m.history.move(-1)
	case key.Matches(msg, m.keys.Down):
		m.history.move(1)
	case key.Matches(msg, m.keys.Rollback) && m.history.selected() != nil:
		r, ok := m.history.rollback()
		if !ok {
			return m, m.showStatus("nothing to roll back to: this is the deployment's only revision")
		}
		m.confirm = m.rollbackConfirmation(r)
	}
	return m, nil
}

func (m Model) regionsKey(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	r := m.regions.selected()
	switch {
	case key.Matches(msg, m.keys.Up):
		m.regions.move(-1)
	case key.Matches(msg, m.keys.Down):
		m.regions.move(1)
	case key.Matches(msg, m.keys.Open) && r != nil:
		m.detail = detailPage{name: r.Region}
		return m.turnTo(pageRegion)
	case key.Matches(msg, m.keys.Resync) && r != nil:
		m.confirm = m.resyncConfirmation(r.Region)
	case key.Matches(msg, m.keys.Pause) && r != nil:
		m.confirm = m.pauseConfirmation(r.Region, !r.Paused)
	}
	return m, nil
}

func (m Model) detailKey(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	d := m.detail.selected()
	switch {
	case key.Matches(msg, m.keys.Back):
		return m.turnTo(pageRegions)
	case key.Matches(msg, m.keys.Up):
		m.detail.move(-1)
	case key.Matches(msg, m.keys.Down):
		m.detail.move(1)
	case key.Matches(msg, m.keys.Resync):
		m.confirm = m.resyncConfirmation(m.detail.name)
	case key.Matches(msg, m.keys.Pause) && m.detail.region != nil:
		m.confirm = m.pauseConfirmation(m.detail.name, !m.detail.region.GetOverview().GetPaused())
	case key.Matches(msg, m.keys.Stop) && d != nil:
		m.confirm = m.statusConfirmation(d, m.detail.name, ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED)
	case key.Matches(msg, m.keys.Start) && d != nil:
		m.confirm = m.statusConfirmation(d, m.detail.name, ctrlv1.DesiredStatus_DESIRED_STATUS_RUNNING)
	case key.Matches(msg, m.keys.ScaleUp) && d != nil:
		m.confirm = m.scaleConfirmation(d, m.detail.name, d.GetReplicas()+1)
	case key.Matches(msg, m.keys.ScaleDown) && d != nil && d.GetReplicas() > 0:
		m.confirm = m.scaleConfirmation(d, m.detail.name, d.GetReplicas()-1)
	}
	return m, nil
}

// turnTo shows page p. The filter and the status line belong to the page
// they were typed or shown on, so both are cleared.
func (m Model) turnTo(p page) (tea.Model, tea.Cmd) {
	m.page, m.filter, m.status = p, "", ""
	m.applyFilter()
	return m, m.fetch()
}

// applyFilter re-filters every list after the filter changed.
func (m *Model) applyFilter() {
	m.regions.set(m.regions.all, m.filter)
	m.deployments.set(m.deployments.all, m.filter)
	if m.detail.region != nil {
		m.detail.set(m.detail.region, m.detail.pending, m.filter)
	}
	if m.history.loaded {
		m.history.set(m.history.all, m.filter)
	}
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
func (m Model) stale() bool { return m.err != nil && !m.shownAt().IsZero() }

// shownAt is when the shown page's data was read (zero before the first
// read answered).
func (m Model) shownAt() time.Time {
	switch m.page {
	case pageRegion:
		return m.detail.at
	case pageDeployments:
		return m.deployments.at
	case pageHistory:
		return m.history.at
	}
	return m.regions.at
}

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
