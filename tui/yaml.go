package tui

import (
	"context"
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/viewport"
	tea "charm.land/bubbletea/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// yamlMsg is a read of a deployment's desired state in a region.
type yamlMsg struct {
	id, region string // asked for
	yaml       string
	// absent says why there is none: the deployment does not run in the
	// region (ctrld's NotFound, in its words).
	absent string
}

// yamlPage shows what a region's agent applies for a deployment: the
// objects as YAML, as ctrld builds them with the agent's own code from
// the state the region's stream carries (OperatorService.GetDesiredState),
// in a viewport that scrolls. Env values and command arguments come
// redacted, as the audit log shows them: they may be credentials, and no
// other page shows them either.
type yamlPage struct {
	id, region string
	yaml       string // as read, each line cleaned
	absent     string
	at         time.Time
	// top is the first line shown: kept across refreshes, which re-read
	// the state every tick.
	top int
	// from is the opened page esc returns to (a region's), nil for home.
	from page
}

// parent is the page esc returns to (see openedFrom).
func (p yamlPage) parent() page { return p.from }

// yamlNote says, above the YAML, what it is and what it leaves out.
const yamlNote = "as the agent applies it; env values and arguments redacted"

func (p yamlPage) title() string {
	return "desired " + Clean(p.id) + " in " + Clean(p.region) + "  (esc: back)"
}

func (p yamlPage) read(op ctrlv1.OperatorServiceClient) func(ctx context.Context) (tea.Msg, error) {
	return func(ctx context.Context) (tea.Msg, error) {
		r, err := op.GetDesiredState(ctx, &ctrlv1.GetDesiredStateRequest{DeploymentId: p.id, Region: p.region})
		if status.Code(err) == codes.NotFound {
			return yamlMsg{id: p.id, region: p.region, absent: ErrorText(err)}, nil
		}
		if err != nil {
			return nil, err
		}
		return yamlMsg{id: p.id, region: p.region, yaml: r.GetYaml()}, nil
	}
}

// receive takes the state of this page's deployment and region only (see
// detailPage.receive).
func (p yamlPage) receive(msg tea.Msg, pc pageContext) (page, bool) {
	y, ok := msg.(yamlMsg)
	if !ok || y.id != p.id || y.region != p.region {
		return p, false
	}
	p.at = pc.now
	p.absent = y.absent
	lines := strings.Split(strings.TrimRight(y.yaml, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "  " + Clean(l) // a line each: Clean keeps server text on one
	}
	p.yaml = strings.Join(lines, "\n")
	return p, true
}

func (p yamlPage) filter(f string) page {
	p.top = 0 // the lines shown are the filter's (see viewport)
	return p
}

func (p yamlPage) readAt() time.Time { return p.at }

// viewport is the YAML in a viewport of the page's size, scrolled to top.
func (p yamlPage) viewport(pc pageContext) viewport.Model {
	v := viewport.New(viewport.WithWidth(max(pc.width, 1)), viewport.WithHeight(max(pc.height-2, 1)))
	var lines []string
	for _, l := range strings.Split(p.yaml, "\n") {
		if strings.Contains(l, pc.filter) {
			lines = append(lines, l)
		}
	}
	v.SetContentLines(lines)
	v.SetYOffset(p.top)
	return v
}

func (p yamlPage) update(msg tea.KeyPressMsg, pc pageContext) (page, action) {
	v, _ := p.viewport(pc).Update(msg)
	p.top = v.YOffset()
	return p, action{}
}

func (p yamlPage) help(k KeyMap) (short, keys []key.Binding) {
	vk := viewport.DefaultKeyMap()
	return []key.Binding{k.Back}, []key.Binding{k.Up, k.Down, vk.PageDown, vk.PageUp}
}

func (p yamlPage) view(pc pageContext) string {
	s := pc.styles
	switch {
	case p.absent != "":
		return s.Warn.Render(fit("  "+p.absent, pc.width, 3)) + "\n"
	case p.at.IsZero():
		return s.Dim.Render("  loading ...") + "\n"
	}
	v := p.viewport(pc)
	where := fmt.Sprintf("lines %d-%d of %d", v.YOffset()+1, min(v.YOffset()+v.VisibleLineCount(), v.TotalLineCount()), v.TotalLineCount())
	return s.Dim.Render(clip("  "+yamlNote, pc.width)) + "\n" + v.View() + "\n" + s.Dim.Render(clip("  "+where, pc.width)) + "\n"
}
