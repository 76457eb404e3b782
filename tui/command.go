package tui

import (
	"fmt"
	"slices"
	"strings"

	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/textinput"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
)

// command is one of the command line's commands, k9s-like: a view to go
// to (every one is a view, so read-only sessions get them all), or quit.
type command struct {
	name string
	// params are the arguments it takes, in order; none for most.
	params []param
	// flags are the flags it may take after them ("--previous").
	flags []string
	// shown lists whole argument lists from the page shown, which tab
	// offers first while the first argument is typed (:logs on a pods
	// page: its deployment, region and each pod); nil for none.
	shown func(known) [][]string
}

// param is one argument of a command.
type param struct {
	// name is how usage names it ("DEPLOYMENT"), what how an error does
	// ("deployment").
	name, what string
	// of lists its possible values, from what the console has read (see
	// commandLine.args); nil when the console does not know them (a pod:
	// ctrld checks it).
	of func(known) []string
	// suggest, when of is nil, lists values tab offers for it, given the
	// arguments before it, which the console does not check (a pod of the
	// pods page shown: others may exist).
	suggest func(k known, before []string) []string
}

var (
	deploymentParam = param{name: "DEPLOYMENT", what: "deployment", of: known.deploymentIDs}
	regionParam     = param{name: "REGION", what: "region", of: known.regionNames}
)

// known is what the console has read that a command's argument may
// name: the regions (with the regions or the deployments page) and the
// deployments (with the deployments page, read when the command line
// opens), and the pods of the pods page shown, or of the one the page
// shown was opened from.
type known struct {
	regions, deployments []string
	pods                 shownPods
	// place is the deployment and region the page shown is about (a
	// pods, events or log page, or a rollout's selected region), or of
	// the page it was opened from; empty when none is.
	place [2]string
}

// shownPods are the pods of a deployment in a region, as a pods page
// shows them.
type shownPods struct {
	id, region string
	names      []string
}

func (k known) regionNames() []string   { return k.regions }
func (k known) deploymentIDs() []string { return k.deployments }

// podsOf is the pods shown of the deployment and region in before.
func (k known) podsOf(before []string) []string {
	if len(before) < 2 || before[0] != k.pods.id || before[1] != k.pods.region {
		return nil
	}
	return k.pods.names
}

// shownLogs is :logs of each pod shown: its deployment, region and name.
func (k known) shownLogs() [][]string {
	var out [][]string
	for _, pod := range k.pods.names {
		out = append(out, []string{k.pods.id, k.pods.region, pod})
	}
	return out
}

// shownPlace is :pods or :events of the deployment and region shown.
func (k known) shownPlace() [][]string {
	if k.place[0] == "" {
		return nil
	}
	return [][]string{{k.place[0], k.place[1]}}
}

// placeOf is the deployment and region p is about, if it is about one.
func placeOf(p page) (id, region string, ok bool) {
	switch p := p.(type) {
	case podsPage:
		return p.id, p.region, true
	case eventsPage:
		return p.id, p.region, true
	case logsPage:
		return p.id, p.region, true
	case rolloutPage:
		if r := p.selected(); r != nil {
			return p.id, r.GetRegion(), true
		}
	}
	return "", "", false
}

// usage is how the command is typed: ":history DEPLOYMENT".
func (c command) usage() string {
	words := []string{":" + c.name}
	for _, p := range c.params {
		words = append(words, p.name)
	}
	for _, f := range c.flags {
		words = append(words, "["+f+"]")
	}
	return strings.Join(words, " ")
}

// completion is what tab completes its name to: with a space when an
// argument follows.
func (c command) completion() string {
	if len(c.params) > 0 {
		return c.name + " "
	}
	return c.name
}

// commands are the command line's commands, in the order completion
// offers them.
var commands = []command{
	{name: "deployments"},
	{name: "events", params: []param{deploymentParam, regionParam}, shown: known.shownPlace},
	{name: "fleet"},
	{name: "history", params: []param{deploymentParam}},
	{name: "logs", params: []param{deploymentParam, regionParam, {name: "POD", what: "pod", suggest: known.podsOf}}, flags: []string{"--previous"},
		shown: known.shownLogs},
	{name: "pods", params: []param{deploymentParam, regionParam}, shown: known.shownPlace},
	{name: "q"},
	{name: "quit"},
	{name: "region", params: []param{{name: "NAME", what: "region", of: known.regionNames}}},
	{name: "regions"},
	{name: "rollout", params: []param{deploymentParam}},
	{name: "rollouts"},
}

// commandNamed is the command called name; ok is false when none is.
func commandNamed(name string) (command, bool) {
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == name })
	if i < 0 {
		return command{}, false
	}
	return commands[i], true
}

// commandLine is the ":" prompt at the bottom of the screen while it is
// open: the text typed (bubbles' textinput, which also shows the first
// completion greyed after the cursor), what tab completes, and the error
// of the last command run, if it was refused.
type commandLine struct {
	input textinput.Model
	// stem is the text tab completes from, and cycle the completion shown
	// last (the index of it among stem's completions); a key other than
	// tab starts afresh. A unique completion starts a new stem from it:
	// ":hi" tab ":history ", tab again the first deployment.
	stem  string
	cycle int
	// shown is the text the last tab left, to tell whether the operator
	// typed since.
	shown string
	err   string
}

// newCommandLine opens the prompt, empty.
func newCommandLine(noColor bool, width int) *commandLine {
	in := textinput.New()
	in.Prompt = ":"
	in.CharLimit = MaxInput
	in.ShowSuggestions = true
	in.KeyMap.AcceptSuggestion = key.NewBinding() // tab is ours: it cycles
	in.KeyMap.NextSuggestion, in.KeyMap.PrevSuggestion = key.NewBinding(), key.NewBinding()
	styles := textinput.DefaultDarkStyles()
	styles.Cursor.Blink = false
	if noColor {
		// The completion after the cursor is faint, not grey: typed
		// text and what tab would add must still read apart.
		plain := lipgloss.NewStyle()
		styles.Focused = textinput.StyleState{Text: plain, Placeholder: plain, Suggestion: plain.Faint(true), Prompt: plain}
		styles.Blurred = styles.Focused
		styles.Cursor.Color = nil
	}
	in.SetStyles(styles)
	in.SetWidth(max(width-2, 1))
	in.Focus()
	return &commandLine{input: in}
}

// completions are the texts that complete s: command names while the
// first word is typed, then the values of the argument being typed, then
// the command's flags.
func completions(s string, k known) []string {
	words := strings.Split(s, " ")
	var out []string
	if len(words) == 1 {
		for _, c := range commands {
			if strings.HasPrefix(c.name, s) {
				out = append(out, c.completion())
			}
		}
		return out
	}
	c, ok := commandNamed(words[0])
	n := len(words) - 2 // the argument being typed
	if !ok || n >= len(c.params)+len(c.flags) {
		return nil
	}
	var values []string
	switch {
	case n >= len(c.params):
		values = c.flags
	case c.params[n].of != nil:
		values = c.params[n].of(k)
	case c.params[n].suggest != nil:
		values = c.params[n].suggest(k, words[1:len(words)-1])
	}
	typed, before := words[len(words)-1], strings.Join(words[:len(words)-1], " ")
	if n == 0 && c.shown != nil {
		for _, args := range c.shown(k) {
			if strings.HasPrefix(args[0], typed) {
				out = append(out, before+" "+strings.Join(args, " "))
			}
		}
	}
	for _, v := range values {
		if strings.HasPrefix(v, typed) {
			out = append(out, before+" "+v)
		}
	}
	return out
}

// update handles a key while the prompt is open; it does not see enter
// and esc (see Model.commandKey).
func (c *commandLine) update(msg tea.KeyPressMsg, k known) tea.Cmd {
	c.err = ""
	if msg.Code == tea.KeyTab {
		c.complete(k)
		return nil
	}
	var cmd tea.Cmd
	c.input, cmd = c.input.Update(msg)
	c.input.SetSuggestions(completions(c.input.Value(), k))
	return cmd
}

// complete is tab: the next completion of the stem, or, after a unique
// one or anything typed, the first of the text's own.
func (c *commandLine) complete(k known) {
	value := c.input.Value()
	if value != c.shown || len(completions(c.stem, k)) < 2 {
		c.stem, c.cycle = value, 0
	} else {
		c.cycle++
	}
	all := completions(c.stem, k)
	if len(all) == 0 {
		c.err = "nothing completes " + fmt.Sprintf("%q", ":"+Clean(c.stem))
		return
	}
	c.shown = all[c.cycle%len(all)]
	c.input.SetValue(c.shown)
	c.input.CursorEnd()
	c.input.SetSuggestions(completions(c.shown, k))
}

// commandTarget is where a command goes: a home page, and a page opened
// from it (nil for the home page itself); quit ends the console.
type commandTarget struct {
	top    int
	opened page
	quit   bool
}

// parseCommand reads a command line's text against what the console
// has read; err says, in a line, what it cannot run and why.
func parseCommand(text string, k known) (commandTarget, error) {
	fields := strings.Fields(text)
	if len(fields) == 0 {
		return commandTarget{}, fmt.Errorf("no command")
	}
	c, ok := commandNamed(fields[0])
	if !ok {
		return commandTarget{}, fmt.Errorf("unknown command %q (tab on an empty line goes through the commands)", ":"+Clean(fields[0]))
	}
	args, flags := fields[1:], map[string]bool{}
	if len(args) < len(c.params) {
		return commandTarget{}, fmt.Errorf("usage: %s", c.usage())
	}
	for _, f := range args[len(c.params):] {
		if !slices.Contains(c.flags, f) || flags[f] {
			return commandTarget{}, fmt.Errorf("usage: %s", c.usage())
		}
		flags[f] = true
	}
	for i, p := range c.params {
		if p.of == nil {
			continue
		}
		if values := p.of(k); !slices.Contains(values, args[i]) {
			return commandTarget{}, fmt.Errorf("%s: unknown %s %q (%s)", c.usage(), p.what, Clean(args[i]), knownText(p.what, values))
		}
	}
	switch c.name {
	case "regions":
		return commandTarget{top: homeRegions}, nil
	case "deployments":
		return commandTarget{top: homeDeployments}, nil
	case "rollouts":
		return commandTarget{top: homeRollouts}, nil
	case "fleet":
		return commandTarget{top: homeRollouts, opened: fleetPage{}}, nil
	case "region":
		return commandTarget{top: homeRegions, opened: detailPage{name: args[0]}}, nil
	case "history":
		return commandTarget{top: homeDeployments, opened: historyPage{id: args[0]}}, nil
	case "rollout":
		return commandTarget{top: homeRollouts, opened: rolloutPage{id: args[0]}}, nil
	case "pods":
		return commandTarget{top: homeDeployments, opened: newPodsPage(args[0], args[1], nil)}, nil
	case "events":
		// esc returns to the pods, as from events opened there.
		return commandTarget{top: homeDeployments, opened: newEventsPage(args[0], args[1], newPodsPage(args[0], args[1], nil))}, nil
	case "logs":
		return commandTarget{top: homeDeployments, opened: newLogsPage(args[0], args[1], args[2], flags["--previous"], newPodsPage(args[0], args[1], nil))}, nil
	}
	return commandTarget{quit: true}, nil // q, quit
}

// knownText names the values the console knows, a few of them.
func knownText(what string, values []string) string {
	const named = 5
	switch {
	case len(values) == 0:
		return "the console has read no " + what + "s yet"
	case len(values) > named:
		return fmt.Sprintf("known: %s, … %d more", Clean(strings.Join(values[:named], ", ")), len(values)-named)
	}
	return "known: " + Clean(strings.Join(values, ", "))
}

// known is what the console has read that commands may name.
func (m Model) known() known {
	var k known
	for _, o := range m.overviews {
		k.regions = append(k.regions, o.GetRegion())
	}
	if d, ok := m.home[homeDeployments].(deploymentsPage); ok {
		for _, dep := range d.all {
			k.deployments = append(k.deployments, dep.GetDeploymentId())
		}
	}
	slices.Sort(k.regions)
	slices.Sort(k.deployments)
	for p := m.opened; p != nil; p = openedFrom(p) {
		if id, region, ok := placeOf(p); ok {
			k.place = [2]string{id, region}
			break
		}
	}
	for p := m.opened; p != nil; p = openedFrom(p) {
		if pods, ok := p.(podsPage); ok && pods.answered {
			k.pods = shownPods{id: pods.id, region: pods.region}
			for _, pod := range pods.all {
				k.pods.names = append(k.pods.names, pod.GetName())
			}
			break
		}
	}
	return k
}

// commandKey handles a key while the command line is open: enter runs
// the command, esc closes the line, others edit it.
func (m Model) commandKey(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	switch msg.Code {
	case tea.KeyEscape:
		m.command = nil
		return m, nil
	case tea.KeyEnter:
		text := strings.TrimSpace(m.command.input.Value())
		if text == "" {
			m.command = nil
			return m, nil
		}
		to, err := parseCommand(text, m.known())
		if err != nil {
			c := *m.command
			c.err = err.Error()
			m.command = &c // the line stays, to be corrected or left with esc
			return m, nil
		}
		m.command = nil
		m.leave()
		if to.quit {
			return m, tea.Quit
		}
		m.top, m.opened = to.top, to.opened
		return m.turn()
	}
	c := *m.command
	cmd := c.update(msg, m.known())
	m.command = &c
	return m, cmd
}

// openCommandLine is ":": the prompt opens, and the deployments (and the
// regions with them) are read, for its completions and checks.
func (m Model) openCommandLine() (tea.Model, tea.Cmd) {
	m.command = newCommandLine(m.opts.NoColor, m.width)
	return m, m.call(deploymentsPage{}.read(m.op))
}

// commandView is the command line's lines: its error, if the last
// command was refused, and the prompt.
func (m Model) commandView() string {
	var b strings.Builder
	if m.command.err != "" {
		b.WriteString(m.styles.Bad.Render(elide(m.command.err, m.width)) + "\n")
	}
	b.WriteString(m.command.input.View())
	return b.String()
}
