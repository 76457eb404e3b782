package tui

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// The states of a rollout (ctrlv1.Rollout.state) and of a region in one
// (ctrlv1.RolloutRegion.state), as ctrld names them.
const (
	rolloutProgressing = "progressing"
	rolloutPaused      = "paused"
	rolloutHalted      = "halted"
	rolloutRolledBack  = "rolled_back"
	// rolloutQueued waits for the fleet's controls to let its first wave
	// start (a halt, a freeze window, a pacing bound): in flight, no
	// region promoted.
	rolloutQueued = "queued"

	regionWaiting     = "waiting"
	regionProgressing = "progressing"
	regionPassed      = "passed"
	regionFailed      = "failed"
)

// inFlight reports whether a rollout in state may still be acted on: it
// has not succeeded or rolled back.
func inFlight(state string) bool {
	return state == rolloutProgressing || state == rolloutPaused || state == rolloutHalted || state == rolloutQueued
}

// rolloutMsg is a read of one deployment's rollout: the one in flight,
// else its newest; none is ctrld's word when it has none.
type rolloutMsg struct {
	id      string // the deployment asked for
	rollout *ctrlv1.Rollout
	none    string
}

// rolloutPage is one deployment's rollout: what it moves, its state and
// why, its waves, each region's state and time left with why, and what
// comes next; its keys promote, pause or resume, and abort it.
type rolloutPage struct {
	id      string
	rollout *ctrlv1.Rollout
	none    string
	// from is the page it was opened from that esc returns to (the
	// fleet page), or nil: home.
	from page
	// list holds the rollout's regions (in wave order) the filter
	// matches; its cursor picks the region whose pods enter opens (the
	// first that failed, at first), the other keys act on the rollout.
	list[*ctrlv1.RolloutRegion]
}

func (p *rolloutPage) set(r *ctrlv1.Rollout, filter string) {
	p.rollout = r
	var rows []*ctrlv1.RolloutRegion
	for _, reg := range r.GetRegions() {
		if strings.Contains(reg.GetRegion(), filter) || strings.Contains(reg.GetState(), filter) || strings.Contains(reg.GetWhy(), filter) {
			rows = append(rows, reg)
		}
	}
	p.show(rows, (*ctrlv1.RolloutRegion).GetRegion)
}

func (p rolloutPage) parent() page { return p.from }

func (p rolloutPage) title() string { return "rollout of " + Clean(p.id) + "  (esc: back)" }

func (p rolloutPage) read(op ctrlv1.OperatorServiceClient) func(ctx context.Context) (tea.Msg, error) {
	return func(ctx context.Context) (tea.Msg, error) {
		r, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: p.id})
		if s, ok := status.FromError(err); ok && s.Code() == codes.NotFound {
			// An answer, not a failure: a deployment whose changes all
			// went to every region at once has no rollout to show.
			return rolloutMsg{id: p.id, none: s.Message()}, nil
		}
		return rolloutMsg{id: p.id, rollout: r.GetRollout()}, err
	}
}

// receive takes the rollout of this page's deployment only (see
// detailPage.receive).
func (p rolloutPage) receive(msg tea.Msg, pc pageContext) (page, bool) {
	r, ok := msg.(rolloutMsg)
	if !ok || r.id != p.id {
		return p, false
	}
	first := p.at.IsZero()
	p.at, p.none = pc.now, r.none
	p.set(r.rollout, pc.filter)
	if first {
		// Where the operator looks first: why a region failed.
		if i := slices.IndexFunc(p.rows, func(reg *ctrlv1.RolloutRegion) bool { return reg.GetState() == regionFailed }); i >= 0 {
			p.cursor = i
		}
	}
	return p, true
}

func (p rolloutPage) filter(f string) page {
	p.set(p.rollout, f)
	return p
}

// controls are the keys that act on the rollout now, each with the help
// that says what it does in the rollout's state: none once it ended.
func (p rolloutPage) controls(k KeyMap) (promote, pause, abort *key.Binding) {
	state := p.rollout.GetState()
	if !inFlight(state) {
		return nil, nil, nil
	}
	abort = &k.Abort
	if state == rolloutQueued {
		// No wave started: nothing to promote, pause or resume (ctrld
		// refuses them); abort ends it, break-glass starts it.
		return nil, nil, abort
	}
	promote = &k.Promote
	if haltedByFleet(p.rollout) {
		// ctrld refuses an operator's resume while the halt stands.
		return promote, nil, abort
	}
	b := k.Pause
	if state == rolloutProgressing {
		b.SetHelp("p", "pause rollout")
	} else {
		b.SetHelp("p", "resume rollout")
	}
	return promote, &b, abort
}

// breakGlass is BreakGlass when it does something: on a rollout in
// flight no one broke glass for yet.
func (p rolloutPage) breakGlass(k KeyMap) *key.Binding {
	if !inFlight(p.rollout.GetState()) || p.rollout.GetBreakGlassBy() != "" || !k.BreakGlass.Enabled() {
		return nil
	}
	return &k.BreakGlass
}

// shortly is b with a shorter description, for the one-line help, which
// must fit 80 columns beside the root's keys.
func shortly(b key.Binding, desc string) key.Binding {
	b.SetHelp(b.Help().Key, desc)
	return b
}

func (p rolloutPage) update(msg tea.KeyPressMsg, pc pageContext) (page, action) {
	if p.moveKey(msg, pc.keys) {
		return p, action{}
	}
	if reg := p.selected(); reg != nil && key.Matches(msg, pc.keys.Pods) {
		return p, action{open: newPodsPage(p.id, reg.GetRegion(), p)}
	}
	promote, pause, abort := p.controls(pc.keys)
	matches := func(b *key.Binding) bool { return b != nil && key.Matches(msg, *b) }
	switch {
	case matches(promote):
		return p, action{confirm: p.controlConfirmation(pc, ctrlv1.RolloutAction_ROLLOUT_ACTION_PROMOTE)}
	case matches(pause) && p.rollout.GetState() == rolloutProgressing:
		return p, action{confirm: p.controlConfirmation(pc, ctrlv1.RolloutAction_ROLLOUT_ACTION_PAUSE)}
	case matches(pause):
		return p, action{confirm: p.controlConfirmation(pc, ctrlv1.RolloutAction_ROLLOUT_ACTION_RESUME)}
	case matches(abort):
		return p, action{confirm: p.controlConfirmation(pc, ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT)}
	case matches(p.breakGlass(pc.keys)):
		return p, action{confirm: p.breakGlassConfirmation(pc)}
	}
	return p, action{}
}

func (p rolloutPage) help(k KeyMap) (short, keys []key.Binding) {
	short, keys = []key.Binding{k.Back}, p.moveKeys(k)
	promote, pause, abort := p.controls(k)
	if promote != nil {
		keys, short = append(keys, *promote), append(short, shortly(*promote, "promote"))
	}
	if pause != nil {
		keys, short = append(keys, *pause), append(short, shortly(*pause, strings.TrimSuffix(pause.Help().Desc, " rollout")))
	}
	if abort != nil {
		keys, short = append(keys, *abort), append(short, shortly(*abort, "abort"))
	}
	if b := p.breakGlass(k); b != nil {
		keys = append(keys, *b)
		if p.rollout.GetHeld() != "" || haltedByFleet(p.rollout) {
			short = append(short, *b) // what the held one's operator looks for
		}
	}
	if p.selected() != nil {
		pods := p.pods(k)
		short, keys = append(short, shortly(pods, "pods")), append(keys, pods)
	}
	return short, keys
}

// pods is Pods with this page's words.
func (rolloutPage) pods(k KeyMap) key.Binding {
	b := k.Pods
	b.SetHelp("enter", "pods of the selected region")
	return b
}

func (p rolloutPage) view(pc pageContext) string {
	s := pc.styles
	r := p.rollout
	switch {
	case p.readAt().IsZero():
		return s.Dim.Render("  loading the rollout of "+Clean(p.id)+" ...") + "\n"
	case r == nil:
		return s.Dim.Render(indented("  ", "no rollout: "+p.none, pc.width, 3)) + "\n"
	}
	now := pc.asOf
	var b strings.Builder
	line := func(text string, style lipgloss.Style) {
		b.WriteString(pc.rowStyle(elide(text, pc.width), false, style) + "\n")
	}
	move := fmt.Sprintf("revision %d -> %d", r.GetFromRevision(), r.GetRevision())
	if r.GetFromRevision() == 0 {
		move = fmt.Sprintf("revision %d (the first)", r.GetRevision())
	}
	image := r.GetToImage()
	if r.GetFromImage() != "" && r.GetFromImage() != image {
		image = r.GetFromImage() + " -> " + image
	}
	line(fmt.Sprintf("  %s, image %s, by %s %s", move, image, orNone(r.GetActor()), ago(now, r.GetCreatedAt().AsTime())), s.Plain)
	state := strings.ToUpper(strings.ReplaceAll(r.GetState(), "_", " "))
	head := fmt.Sprintf("  state %s, wave %d of %d, on failure %s", state, r.GetWave(), len(r.GetStrategy().GetWaves()), r.GetStrategy().GetOnFailure())
	if r.GetFinishedAt() != nil {
		head += ", ended " + ago(now, r.GetFinishedAt().AsTime())
	}
	line(head, rolloutStyle(s, r.GetState()))
	if r.GetReason() != "" {
		b.WriteString(pc.rowStyle(indented("  why: ", r.GetReason(), pc.width, 3), false, rolloutStyle(s, r.GetState())) + "\n")
	}
	for _, held := range heldLines(r) {
		b.WriteString(pc.rowStyle(indented("  ", held, pc.width, 2), false, s.Warn) + "\n")
	}
	b.WriteString(pc.rowStyle(indented("  next: ", r.GetNext(), pc.width, 2), false, s.Plain) + "\n\n")

	// The waves: what each must pass, and how far it got.
	cols := []column{{header: ""}, {header: "WAVE", numeric: true}, {header: "REGIONS"}, {header: "BAKE"}, {header: "MAX FAILURES", numeric: true},
		{header: "DEADLINE"}, {header: "STATE"}}
	waves := r.GetStrategy().GetWaves()
	cells := make([][]string, len(waves))
	for i, w := range waves {
		cells[i] = []string{pc.marker(), fmt.Sprint(i + 1), clip(strings.Join(w.GetRegions(), ", "), 40), exact(w.GetBake().AsDuration()),
			fmt.Sprint(w.GetMaxFailures()), exact(w.GetDeadline().AsDuration()), waveState(r, int32(i+1))}
	}
	lines := tableLines(cols, cells, pc.width)
	b.WriteString(s.Header.Render(lines[0]) + "\n")
	for i, l := range lines[1:] {
		style := s.Plain
		if int32(i+1) == r.GetWave() && inFlight(r.GetState()) {
			style = s.Title // the wave in progress stands out
		}
		b.WriteString(pc.rowStyle(l, false, style) + "\n")
	}

	// The regions, in wave order: where each stands, and why.
	b.WriteString("\n")
	// TIME LEFT keeps its width while times count down, so that WHY
	// stands still; with none to count (an ended rollout) WHY gets it.
	left := column{header: "TIME LEFT"}
	for _, reg := range r.GetRegions() {
		if timeLeft(reg) != "-" {
			left.min = len("deadline 10m59s")
		}
	}
	cols = []column{{header: ""}, {header: "WAVE", numeric: true}, {header: "REGION"}, {header: "STATE"}, left, {header: "WHY", elide: true}}
	cells = make([][]string, len(p.rows))
	for i, reg := range p.rows {
		why := reg.GetWhy()
		if reg.GetState() == regionWaiting && why == "" && r.GetState() == rolloutRolledBack {
			// What the rollback proves: the bad revision never came here.
			why = fmt.Sprintf("never reached: ran revision %d throughout", r.GetFromRevision())
		}
		cells[i] = []string{pc.marker(), fmt.Sprint(reg.GetWave()), clip(reg.GetRegion(), 14), clip(reg.GetState(), 11), timeLeft(reg), Clean(why)}
	}
	lines = tableLines(cols, cells, pc.width)
	b.WriteString(s.Header.Render(lines[0]) + "\n")
	if len(p.rows) == 0 {
		b.WriteString(s.Dim.Render("  "+emptyText("regions", pc.filter, len(r.GetRegions()), "no regions")) + "\n")
	}
	for i, l := range lines[1:] {
		style := s.Plain
		switch p.rows[i].GetState() {
		case regionFailed:
			style = s.Bad
		case regionWaiting:
			style = s.Dim
		}
		b.WriteString(pc.rowStyle(l, i == p.cursor, style) + "\n")
	}
	b.WriteString(checksTable(pc, p.rows))
	return b.String()
}

// checksTable is the rollout's checks in its promoted regions: a row per
// region and check, its latest value against its bound and baseline,
// the values over the bake as a chart, and the verdict; "" without
// checks.
func checksTable(pc pageContext, regions []*ctrlv1.RolloutRegion) string {
	s := pc.styles
	cols := []column{{header: ""}, {header: "REGION"}, {header: "CHECK"}, {header: "VERDICT"}, {header: "VALUE", numeric: true},
		{header: "BOUND"}, {header: "BASELINE"}, {header: "SAMPLES", numeric: true}, {header: "OVER THE BAKE"}, {header: "WHY", elide: true}}
	var cells [][]string
	var verdicts []string
	for _, reg := range regions {
		for _, c := range reg.GetChecks() {
			cells = append(cells, []string{pc.marker(), clip(reg.GetRegion(), 14), clip(c.GetName(), 20), c.GetVerdict(), CheckValue(c),
				clip(c.GetBound(), 14), clip(CheckBaseline(c), 28), fmt.Sprint(c.GetSamples()), Sparkline(c.GetValues()), Clean(c.GetWhy())})
			verdicts = append(verdicts, c.GetVerdict())
		}
	}
	if len(cells) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n")
	lines := tableLines(cols, cells, pc.width)
	b.WriteString(s.Header.Render(lines[0]) + "\n")
	for i, l := range lines[1:] {
		style := s.Plain
		switch verdicts[i] {
		case "failed":
			style = s.Bad
		case "inconclusive":
			style = s.Dim
		}
		b.WriteString(pc.rowStyle(l, false, style) + "\n")
	}
	return b.String()
}

// rolloutStyle is how a rollout's state line looks: bad once it failed,
// a warning while it waits for an operator.
func rolloutStyle(s Styles, state string) lipgloss.Style {
	switch state {
	case rolloutHalted, rolloutRolledBack:
		return s.Bad
	case rolloutPaused, rolloutQueued:
		return s.Warn
	}
	return s.Plain
}

// waveState says where wave n (from 1) of r stands, from its regions:
// failed if one failed, passed when all did, waiting before it started,
// in progress otherwise.
func waveState(r *ctrlv1.Rollout, n int32) string {
	counts := map[string]int{}
	total := 0
	for _, reg := range r.GetRegions() {
		if reg.GetWave() == n {
			counts[reg.GetState()]++
			total++
		}
	}
	switch {
	case counts[regionFailed] > 0:
		return fmt.Sprintf("failed (%d of %d regions)", counts[regionFailed], total)
	case counts[regionPassed] == total:
		return "passed"
	case counts[regionWaiting] == total && !inFlight(r.GetState()):
		return "never reached"
	case counts[regionWaiting] == total:
		return "waiting"
	}
	return "in progress"
}

// indented is text after prefix, fitted (see fit) in at most lines lines
// of width, the lines after the first indented as far as the first.
func indented(prefix, text string, width, lines int) string {
	pad := ansi.StringWidth(prefix)
	wrapped := strings.Split(fit(text, max(width-pad, 1), lines), "\n")
	for i := range wrapped {
		if i == 0 {
			wrapped[i] = prefix + wrapped[i]
		} else {
			wrapped[i] = strings.Repeat(" ", pad) + wrapped[i]
		}
	}
	return strings.Join(wrapped, "\n")
}

// timeLeft is a region's time left in its state: the bake a baking region
// has still to stay healthy, the deadline a progressing one has to turn
// healthy; "-" in the other states.
func timeLeft(reg *ctrlv1.RolloutRegion) string {
	switch {
	case reg.GetBakeLeft() != nil:
		return "bake " + exact(reg.GetBakeLeft().AsDuration())
	case reg.GetDeadlineLeft() != nil:
		return "deadline " + exact(reg.GetDeadlineLeft().AsDuration())
	}
	return "-"
}

// exact is a duration to the second, as the strategy gives it and as a
// bake counts down: 45s, 1m, 1m30s, 2h (span rounds to the largest unit,
// too coarse for a bake's last minute).
func exact(d time.Duration) string {
	d = max(0, d.Round(time.Second))
	if d < time.Minute {
		return fmt.Sprintf("%ds", int(d.Seconds()))
	}
	s := d.String()
	s = strings.TrimSuffix(s, "0s")
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// controlConfirmation asks before an operator's action on the rollout,
// saying what it does in its state now, and runs it through
// ControlRollout (which ctrld audits under the operator's name), fenced
// by the rollout as shown when it asked: if the rollout moved on while
// the dialog was open (the driver passed a wave, another operator acted,
// another rollout started), ctrld does nothing and says what changed,
// and the page, read again, shows it.
func (p rolloutPage) controlConfirmation(pc pageContext, a ctrlv1.RolloutAction) *confirmation {
	r, id := p.rollout, p.id
	fence := fenceOf(r)
	shownID := Clean(id)
	waves := r.GetStrategy().GetWaves()
	current := r.GetWave()
	var verb, past, question string
	var lines []string
	switch a {
	case ctrlv1.RolloutAction_ROLLOUT_ACTION_PROMOTE:
		verb, past = "promote", "promoted"
		question = fmt.Sprintf("Promote the rollout of %s now?", shownID)
		lines = append(lines, fmt.Sprintf("Wave %d (%s) passes now, skipping what is left of its bake.", current, regionsOfWave(r, current)))
		if unproven := unprovenRegions(r, current); unproven != "" {
			lines = append(lines, "Not proven healthy yet: "+unproven+".")
		}
		if int(current) < len(waves) {
			lines = append(lines, fmt.Sprintf("Wave %d (%s) gets revision %d (image %s).", current+1, regionsOfWave(r, current+1), r.GetRevision(), Clean(r.GetToImage())))
		} else {
			lines = append(lines, fmt.Sprintf("It was the last wave: the rollout ends succeeded, every region on revision %d.", r.GetRevision()))
		}
	case ctrlv1.RolloutAction_ROLLOUT_ACTION_PAUSE:
		verb, past = "pause", "paused"
		question = fmt.Sprintf("Pause the rollout of %s?", shownID)
		lines = append(lines, "It holds where it is: every region keeps the revision it runs, and no wave starts until it is resumed or aborted.")
	case ctrlv1.RolloutAction_ROLLOUT_ACTION_RESUME:
		verb, past = "resume", "resumed"
		question = fmt.Sprintf("Resume the %s rollout of %s?", Clean(r.GetState()), shownID)
		lines = append(lines, fmt.Sprintf("It goes on from wave %d of %d.", current, len(waves)))
		if r.GetState() == rolloutHalted {
			lines = append(lines, "Its failed regions get another chance, with a new deadline.")
		}
	case ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT:
		verb, past = "abort", "aborted"
		question = fmt.Sprintf("Abort the rollout of %s and roll back?", shownID)
		reached := reachedRegions(r)
		back := fmt.Sprintf("revision %d (image %s)", r.GetFromRevision(), Clean(r.GetFromImage()))
		if r.GetFromRevision() == 0 {
			back = "nothing: the deployment is new, so they stop running it"
		}
		lines = append(lines, fmt.Sprintf("Every region it reached (%s) returns to %s; the regions it did not reach keep what they run.", reached, back))
	}
	what := verb + " the rollout of " + shownID
	return &confirmation{
		what:   what,
		detail: question + "\n" + strings.Join(lines, "\n"),
		run: actSaying(what, func(ctx context.Context) (string, error) {
			resp, err := pc.op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: id, Action: a, Fence: fence})
			got := resp.GetRollout()
			return fmt.Sprintf("%s the rollout of %s: now %s, wave %d of %d", past, shownID, strings.ReplaceAll(got.GetState(), "_", " "),
				got.GetWave(), len(got.GetStrategy().GetWaves())), err
		}),
	}
}

// fenceOf is what a person confirms an action on: r as shown.
func fenceOf(r *ctrlv1.Rollout) *ctrlv1.RolloutFence {
	return &ctrlv1.RolloutFence{RolloutId: r.GetId(), Revision: r.GetRevision(), Wave: r.GetWave(), Version: r.GetVersion()}
}

// regionsOfWave names the regions of wave n (from 1) of r.
func regionsOfWave(r *ctrlv1.Rollout, n int32) string {
	if n < 1 || int(n) > len(r.GetStrategy().GetWaves()) {
		return ""
	}
	return Clean(strings.Join(r.GetStrategy().GetWaves()[n-1].GetRegions(), ", "))
}

// unprovenRegions names the regions of wave n that a promotion passes
// before their gate did: those not baking yet (baking ones are healthy).
func unprovenRegions(r *ctrlv1.Rollout, n int32) string {
	var out []string
	for _, reg := range r.GetRegions() {
		if reg.GetWave() == n && (reg.GetState() == regionProgressing || reg.GetState() == regionWaiting) {
			out = append(out, Clean(reg.GetRegion())+" ("+Clean(reg.GetState())+")")
		}
	}
	return strings.Join(out, ", ")
}

// reachedRegions names the regions r promoted (those not waiting), which
// an abort rolls back.
func reachedRegions(r *ctrlv1.Rollout) string {
	var out []string
	for _, reg := range r.GetRegions() {
		if reg.GetState() != regionWaiting {
			out = append(out, Clean(reg.GetRegion()))
		}
	}
	return strings.Join(out, ", ")
}
