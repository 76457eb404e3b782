// Package tui is unkey-tui, the operator console on-call engineers open
// over SSH: a live view of every region's sync health (worst lag first),
// a region's pending changes and resources, and the actions they take —
// force a resync, pause or resume a region, stop or start a deployment,
// roll a deployment back to a revision of its history — each behind a
// confirmation that says exactly what will change, and warns when the
// region is paused or its agent down, so the change will wait. A
// rollback's confirmation follows ctrld's rule: it lists only what ctrld
// restores (never a start or stop), says that port, command and env values,
// which the console is not shown, come back too, and on the newest revision
// lets ctrld pick the revision (to 0) instead of one the console found
// among the revisions it read.
//
// A deployment's rollout (R on the deployments page, or enter on the
// rollouts page) shows what ctrld says of it: its waves (regions, bake, max
// failures, deadline, how far each got), each region's state with its time
// left (bake or deadline) and why, the rollout's state and, once it halted
// or rolled back, the evidence; and what comes next. Its keys promote now
// (skipping the bake), pause or resume, and abort (roll back), each behind
// a confirmation saying what it does in the rollout's state, through
// ControlRollout, which ctrld audits; a rollout that ended takes none. The
// action is fenced by the rollout as shown when its confirmation opened:
// if it moved on meanwhile, ctrld does nothing and says what changed.
//
// Why a region fails is on the live views (live.go, pods.go, events.go,
// logs.go): a deployment's pods in one region, their events and a pod's
// log, which ctrld asks of the region's agent on the connection the
// agent opened (ListPods, ListEvents, StreamLogs). enter opens the pods:
// on a rollout's region (the page opens on the first that failed), a
// deployment's row, or a region's deployment; or :pods DEPLOYMENT
// REGION. They show each pod's phase, ready containers, restarts, spec
// hash, node, age and why it is not ready with its containers'
// termination messages. e opens their events, newest first; l or enter a
// pod's log (:events, :logs DEPLOYMENT REGION POD [--previous]), after
// asking which container when the pod has several (containers.go: the
// crashed ones first); the log is its newest 500 lines, following by default; p switches to the run before
// the current one (the one that crashed) and back, f starts and stops
// following. The log scrolls by lines (↑/↓, pgup/pgdn, G to the newest,
// where it stays while following) and keeps at most 5,000 lines and
// 2 MiB, dropping the oldest and saying how many; a follow ends when its
// page is left (its stream's context is cancelled) or the console quits,
// and with the session's connection. An agent that is not connected,
// does not answer (ctrld says so after 10 s) or refuses, and ctrld's
// refusal of logs to a key without their grant (pods and events are
// reads, logs a grant of their own; the console offers l either way and
// shows the refusal), are said on the page in ctrld's words: they are not an
// outage of ctrld, so no banner, and every read runs in a command, so
// keys work while it waits. Pods and events are read again every 2 s
// while shown, one read at a time. All of it is the agent's text, shown
// through Clean and CleanLog only, a log cleaned a whole line at a time
// (a piece may end inside an escape sequence).
//
// The console is a root Model and its pages (page.go): the regions, the
// deployments and the rollouts page, which tab cycles through, and a
// region, a deployment's history or a deployment's rollout, opened from
// them and closed with esc. A page owns
// its rows, its cursor, its keys, its view and its help; it reads the
// root's state only through a pageContext (styles, keys, size, clock,
// stale marking, the filter, the regions' last health) and asks the root
// for a confirmation, a status line or another page by returning an
// action, never reaching into it. The root owns the program: it polls
// ctrld's operator API in commands (never blocking input) for the page
// shown, routes each read's answer to the pages it is for, takes the keys
// that work everywhere (quit, help, filter, tab, esc) and the
// confirmations, hands other keys to the page shown, draws the frame
// around its view, and shows a banner while ctrld is unreachable instead
// of failing. Help shows the page's keys that work now (no row action
// without a row) and the root's that work there, nothing else; the
// one-line help leaves the filter out when it would not fit the window.
//
// Tables are laid out with lipgloss/table (table.go): borderless, each
// column as wide as its cells, numbers right-aligned, every line cut to the
// window, and a last column of server text elided from its middle; the
// page styles whole lines (the selection, stale rows). The regions and
// deployments pages sort by a column, k9s-like (sort.go): o moves to the
// next column and back to ctrld's order after the last, O reverses, the
// header marks the column ▲ or ▼, numbers sort as numbers, and rows equal
// in it keep ctrld's order either way. (k9s's s and S stop and start a
// deployment here.)
//
// The fleet (fleet.go, fleetrows.go, form.go): F or :fleet shows the
// fleet's controls (halts, freeze windows, pacing bounds) and every
// rollout in flight per environment and region of its current wave, each
// held one with ctrld's why. H (there, on the rollouts page and on a
// region) halts a scope, p there lifts a halt, B on a held rollout breaks
// glass; their dialogs are forms (enter confirms, esc cancels; y and n are
// letters there) that refuse to send without a reason, and a break-glass
// without the deployment's name typed. A read-only session has none of
// these keys.
//
// k9s habits (command.go, diff.go): ":" opens a command line at the
// bottom (bubbles' textinput) that goes to a view by name — :regions,
// :deployments, :rollouts, :region NAME, :history DEPLOYMENT, :rollout
// DEPLOYMENT, :pods and :events DEPLOYMENT REGION, :logs DEPLOYMENT
// REGION POD [--previous] — or quits (:q). Tab completes the command, then cycles
// through its argument's values, from what the console has read (opening
// the line reads the deployments and regions; on a pods page, or a page
// opened from one, :logs offers each pod shown whole first, and its POD
// the pods shown, unchecked: ctrld checks it); a command or a value it
// does not know is said in a line above the prompt, which stays to be
// corrected, and nothing else changes. d shows a change as a diff ("-"
// what goes, "+" what comes, "~" a value the console is not shown): on
// the history, what rolling back to the selected revision changes (the
// spec now against the revision's: image, cpu, memory, env names, the
// replicas of the regions both have; port, command and env values are
// not shown to the console, and it says so); on a region, its pending
// changes, each one's summary as ctrld words it. Both are views, so
// read-only sessions have them; both read again while shown, and esc
// returns to the page they were opened from.
//
// Nothing looks live that is not: while reads fail, the page keeps its
// last rows, dimmed and marked "?", says "STALE as of" the last good read,
// and counts ages to that read; the first good read clears all of it. Text
// that does not fit is elided from the middle or wrapped (elide, fit),
// never cut without "…", so the end of an error, which says why, stays.
// Styles and key bindings are one struct each, built per program (no
// package-global mutable state).
//
// No text from the server reaches the terminal as it came: agents write
// some of it, and an escape sequence in an agent's last error must not
// retitle, clear or recolour the operator's terminal. Every string from
// the server is shown through Clean (clip cleans too), also by the script
// commands, which share Clean and ErrorText.
package tui
