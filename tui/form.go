package tui

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"charm.land/bubbles/v2/textinput"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
)

// form is what a confirmation asks beyond a yes: a choice among scopes
// (up and down pick it) and text the operator types (a reason, the
// deployment's name), each checked before the action runs. y and n are
// letters there, so enter confirms and esc cancels.
type form struct {
	// choices are what the action may act on ("everywhere", "environment
	// acme/prod"); chosen the one picked. None: nothing to choose.
	choices []string
	chosen  int
	fields  []formField
	focus   int
	// err says why enter did not run it (a field left empty).
	err string
	// submit is the action, with the choice and the fields' values.
	submit func(chosen int, values []string) tea.Cmd
}

// formField is one line to type on: its label, the text typed, and what
// it must be (nil error: fine).
type formField struct {
	label string
	input textinput.Model
	check func(value string) error
}

// MaxReason is the most characters a reason field takes (ctrld takes
// 1024 bytes).
const MaxReason = 256

// newFormField is a field to type on, labelled.
func newFormField(label string, check func(string) error, noColor bool) formField {
	in := textinput.New()
	in.Prompt = ""
	in.CharLimit = MaxReason
	styles := textinput.DefaultDarkStyles()
	styles.Cursor.Blink = false
	if noColor {
		plain := lipgloss.NewStyle()
		styles.Focused = textinput.StyleState{Text: plain, Placeholder: plain, Suggestion: plain, Prompt: plain}
		styles.Blurred = styles.Focused
		styles.Cursor.Color = nil
	}
	in.SetStyles(styles)
	in.SetWidth(60)
	return formField{label: label, input: in, check: check}
}

// needed is a field's check: it must not be blank.
func needed(what string) func(string) error {
	return func(v string) error {
		if strings.TrimSpace(v) == "" {
			return fmt.Errorf("type %s first (it is audited, and shown to the others)", what)
		}
		return nil
	}
}

// typed is a field's check: it must be exactly want (shown cleaned).
func typed(want string) func(string) error {
	return func(v string) error {
		if v != want {
			return fmt.Errorf("type %s exactly, to say you mean it", Clean(want))
		}
		return nil
	}
}

// focused is the form with field i taking the keys.
func (f *form) focused(i int) {
	for j := range f.fields {
		if j == i {
			f.fields[j].input.Focus()
		} else {
			f.fields[j].input.Blur()
		}
	}
	f.focus = i
}

// key handles a key in the form: up and down pick a choice, tab and
// shift+tab move between fields, enter checks and runs it; the rest is
// typed. done is true when it runs (cmd is the action).
func (f *form) key(msg tea.KeyPressMsg) (cmd tea.Cmd, done bool) {
	f.err = ""
	switch msg.Code {
	case tea.KeyUp:
		if len(f.choices) > 0 {
			f.chosen = (f.chosen + len(f.choices) - 1) % len(f.choices)
		}
		return nil, false
	case tea.KeyDown:
		if len(f.choices) > 0 {
			f.chosen = (f.chosen + 1) % len(f.choices)
		}
		return nil, false
	case tea.KeyTab:
		if len(f.fields) > 0 {
			step := 1
			if msg.Mod&tea.ModShift != 0 {
				step = len(f.fields) - 1
			}
			f.focused((f.focus + step) % len(f.fields))
		}
		return nil, false
	case tea.KeyEnter:
		values := make([]string, len(f.fields))
		for i, field := range f.fields {
			values[i] = field.input.Value()
			if err := field.check(values[i]); err != nil {
				f.err = field.label + ": " + err.Error()
				f.focused(i)
				return nil, false
			}
		}
		return f.submit(f.chosen, values), true
	}
	if len(f.fields) == 0 {
		return nil, false
	}
	in := &f.fields[f.focus].input
	if utf8.RuneCountInString(in.Value())+utf8.RuneCountInString(msg.Text) > MaxReason {
		return nil, false
	}
	*in, cmd = in.Update(msg)
	return cmd, false
}

// view is the form's lines in the dialog, under its question.
func (f form) view(s Styles) string {
	var b strings.Builder
	if len(f.choices) > 0 {
		b.WriteString("\n")
		for i, c := range f.choices {
			mark := "( )"
			if i == f.chosen {
				mark = "(•)"
			}
			b.WriteString(mark + " " + c + "\n")
		}
		if len(f.choices) > 1 {
			b.WriteString(s.Dim.Render("↑/↓ to choose") + "\n")
		}
	}
	for i, field := range f.fields {
		marker := "  "
		if i == f.focus {
			marker = "> "
		}
		b.WriteString("\n" + marker + field.label + ": " + field.input.View())
	}
	if f.err != "" {
		b.WriteString("\n\n" + s.Bad.Render(f.err))
	}
	hint := "[enter] confirm   [esc] cancel"
	if len(f.fields) > 1 {
		hint += "   [tab] next field"
	}
	return b.String() + "\n\n" + hint
}

// dialog is the confirmation's text in its dialog: what it does, and how
// to answer.
func (c *confirmation) dialog(s Styles) string {
	if c.form == nil {
		return c.detail + "\n\n[y] yes   [n] no"
	}
	return c.detail + "\n" + c.form.view(s)
}

// formKey handles a key while a confirmation with a form is open (see
// Model.key): esc cancels, enter runs it once its fields are right.
func (m Model) formKey(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	c := *m.confirm
	if msg.Code == tea.KeyEscape {
		m.confirm = nil
		return m, m.showStatus("cancelled: " + c.what)
	}
	f := *c.form
	f.fields = append([]formField(nil), f.fields...)
	cmd, done := f.key(msg)
	if !done {
		c.form = &f
		m.confirm = &c
		return m, cmd
	}
	m.confirm = nil
	m.showRunning(c.what)
	return m, cmd
}
