package tui

import "charm.land/bubbles/v2/key"

// KeyMap is every key the console knows.
type KeyMap struct {
	Up, Down, Open, Back, Switch, Resync, Pause, Stop, Start, ScaleUp, ScaleDown, Filter, Yes, No, Help, Quit key.Binding
	// History opens a deployment's revisions; Rollback, there, restores
	// one (r: force resync elsewhere).
	History, Rollback key.Binding
	// Rollout opens a deployment's rollout; Promote and Abort act on it
	// there (Pause pauses and resumes it).
	Rollout, Promote, Abort key.Binding
	// Sort cycles the column the regions and deployments are sorted by
	// (back to ctrld's order after the last); Reverse flips the order. s
	// and S, k9s's sort keys, stop and start a deployment here.
	Sort, Reverse key.Binding
	// YAML shows a deployment's desired objects in a region, as the agent
	// applies them (k9s's y; y is also yes, but only in a confirmation).
	YAML key.Binding
	// Command opens the command line (":regions", ":history api"); Diff
	// shows what a rollback or a region's pending changes change.
	Command, Diff key.Binding
	// Interrupt quits from anywhere, even while typing a filter or
	// answering a confirmation, where q is taken.
	Interrupt key.Binding
	// Pods opens a deployment's pods in a region, live from its agent
	// (enter on a rollout's region, a deployment's row, a region's
	// deployment); there Events opens their events and Logs a pod's log.
	Pods, Events, Logs key.Binding
	// On a log: Previous switches between the container's run that
	// crashed and the current one, Follow starts and stops following,
	// Newest scrolls to the newest line (and stays there while
	// following), PageUp and PageDown scroll a page.
	Previous, Follow, Newest, PageUp, PageDown key.Binding
	// Fleet opens the fleet page (the fleet's controls and every rollout
	// in flight) from anywhere; Halt halts rollouts in bulk (there, on the
	// rollouts page and on a region); BreakGlass takes one rollout through
	// the fleet's holds (on its page).
	Fleet, Halt, BreakGlass key.Binding
}

// DefaultKeyMap returns the console's keys.
func DefaultKeyMap() KeyMap {
	k := KeyMap{
		Up:        key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "up")),
		Down:      key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "down")),
		Open:      key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "open region")),
		Back:      key.NewBinding(key.WithKeys("esc", "backspace"), key.WithHelp("esc", "back")),
		Switch:    key.NewBinding(key.WithKeys("tab"), key.WithHelp("tab", "regions/deployments/rollouts")),
		Resync:    key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "force resync")),
		Pause:     key.NewBinding(key.WithKeys("p"), key.WithHelp("p", "pause/resume")),
		Stop:      key.NewBinding(key.WithKeys("s"), key.WithHelp("s", "stop deployment")),
		Start:     key.NewBinding(key.WithKeys("S"), key.WithHelp("S", "start deployment")),
		ScaleUp:   key.NewBinding(key.WithKeys("+", "="), key.WithHelp("+/-", "scale")),
		ScaleDown: key.NewBinding(key.WithKeys("-"), key.WithHelp("-", "scale down")),
		Filter:    key.NewBinding(key.WithKeys("/"), key.WithHelp("/", "filter")),
		Yes:       key.NewBinding(key.WithKeys("y"), key.WithHelp("y", "confirm")),
		No:        key.NewBinding(key.WithKeys("n", "esc"), key.WithHelp("n/esc", "cancel")),
		Help:      key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
		Quit:      key.NewBinding(key.WithKeys("q"), key.WithHelp("q", "quit")),
		Interrupt: key.NewBinding(key.WithKeys("ctrl+c")),
		History:   key.NewBinding(key.WithKeys("h"), key.WithHelp("h", "history")),
		Rollback:  key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "roll back to selected")),
		Rollout:   key.NewBinding(key.WithKeys("R"), key.WithHelp("R", "rollout")),
		Promote:   key.NewBinding(key.WithKeys("P"), key.WithHelp("P", "promote now (skip bake)")),
		Abort:     key.NewBinding(key.WithKeys("a"), key.WithHelp("a", "abort (roll back)")),
		Sort:      key.NewBinding(key.WithKeys("o"), key.WithHelp("o", "sort by next column")),
		Reverse:   key.NewBinding(key.WithKeys("O"), key.WithHelp("O", "reverse sort")),
		YAML:      key.NewBinding(key.WithKeys("y"), key.WithHelp("y", "desired YAML")),
		Command:   key.NewBinding(key.WithKeys(":"), key.WithHelp(":", "command")),
		Diff:      key.NewBinding(key.WithKeys("d"), key.WithHelp("d", "diff")),
		Pods:      key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "pods")),
		Events:    key.NewBinding(key.WithKeys("e"), key.WithHelp("e", "events")),
		Logs:      key.NewBinding(key.WithKeys("l", "enter"), key.WithHelp("l/enter", "logs")),
		Previous:  key.NewBinding(key.WithKeys("p"), key.WithHelp("p", "previous run (crashed)")),
		Follow:    key.NewBinding(key.WithKeys("f"), key.WithHelp("f", "follow")),
		Newest:    key.NewBinding(key.WithKeys("G", "end"), key.WithHelp("G/end", "newest line")),
		PageUp:    key.NewBinding(key.WithKeys("pgup"), key.WithHelp("pgup", "page up")),
		PageDown:  key.NewBinding(key.WithKeys("pgdown"), key.WithHelp("pgdn", "page down")),
	}
	k.Fleet = key.NewBinding(key.WithKeys("F"), key.WithHelp("F", "fleet"))
	k.Halt = key.NewBinding(key.WithKeys("H"), key.WithHelp("H", "halt rollouts"))
	k.BreakGlass = key.NewBinding(key.WithKeys("B"), key.WithHelp("B", "break glass"))
	return k
}

// withoutChanges is k with every key that changes something disabled: a
// disabled binding matches no key and help leaves it out.
func (k KeyMap) withoutChanges() KeyMap {
	for _, b := range []*key.Binding{&k.Resync, &k.Pause, &k.Stop, &k.Start, &k.ScaleUp, &k.ScaleDown, &k.Rollback, &k.Promote, &k.Abort, &k.Halt, &k.BreakGlass} {
		b.SetEnabled(false)
	}
	return k
}

// pageHelp is the help shown for one page: only the keys that do
// something there (see Model.shownHelp).
type pageHelp struct {
	short []key.Binding
	full  [][]key.Binding
}

// ShortHelp implements help.KeyMap.
func (h pageHelp) ShortHelp() []key.Binding { return h.short }

// FullHelp implements help.KeyMap.
func (h pageHelp) FullHelp() [][]key.Binding { return h.full }
