package tui_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/exp/golden"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/internal/manifest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// GetDesiredState answers as ctrld does (daemon/operator, tested against
// MariaDB): the YAML internal/manifest builds, redacted; api runs in every
// region but us-east, where it is stopped.
func (f *fakeOperator) GetDesiredState(_ context.Context, req *ctrlv1.GetDesiredStateRequest, _ ...grpc.CallOption) (*ctrlv1.GetDesiredStateResponse, error) {
	f.record(req)
	if err := f.unavailable(); err != nil {
		return nil, err
	}
	if req.DeploymentId != "api" || req.Region == "us-east" {
		return nil, status.Errorf(codes.NotFound, "deployment %q does not run in region %q (no such deployment, stopped there, or its rollout has not reached it)", req.DeploymentId, req.Region)
	}
	state := &ctrlv1.DeploymentState{DeploymentId: "api", Namespace: "acme-prod", Image: "ghcr.io/acme/api:v7", Replicas: 3,
		CpuMillicores: 250, MemoryMib: 256, Command: []string{"/api", "--token=hunter2"},
		Env: map[string]string{"DATABASE_URL": "mysql://root:hunter2@db/api", "LOG_LEVEL": "debug"}, SpecHash: "5f1c2e9a7b3d4c60"}
	objects, err := manifest.NewDeployment(state)
	if err != nil {
		return nil, err
	}
	yaml, err := objects.YAML(func(v string) string { return fmt.Sprintf("<redacted, %d bytes>", len(v)) })
	return &ctrlv1.GetDesiredStateResponse{Deployment: state, Yaml: string(yaml)}, err
}

// y on a deployment's row in a region shows the objects the agent applies
// there as YAML, scrolling; esc goes back where it was opened: the
// deployments page, or the region's page.
func TestYAMLOfADeploymentInARegion(t *testing.T) {
	op := &fakeOperator{}
	tm := start(t, op, 80, 24)
	waitFor(t, tm, "eu-west")
	keys(tm, tea.KeyPressMsg{Code: tea.KeyTab})
	waitFor(t, tm, "WORKFLOW")
	keys(tm, press('y')) // api in eu-west
	waitFor(t, tm, "kind: Service")
	keys(tm, tea.KeyPressMsg{Code: tea.KeyEscape})
	waitFor(t, tm, "WORKFLOW")

	keys(tm, tea.KeyPressMsg{Code: tea.KeyTab}, tea.KeyPressMsg{Code: tea.KeyTab}) // regions
	waitFor(t, tm, "LAG")
	keys(tm, down, down, enter) // eu-west
	waitFor(t, tm, "PENDING CHANGES")
	keys(tm, press('y'))
	waitFor(t, tm, "kind: Service")
	keys(tm, tea.KeyPressMsg{Code: tea.KeyEscape})
	waitFor(t, tm, "PENDING CHANGES")
	content := finalContent(t, tm)
	if !strings.Contains(content, "unkey-tui · region") {
		t.Errorf("esc from the YAML opened on a region's page went elsewhere:\n%s", content)
	}
	asked := 0
	for _, c := range op.calls() {
		if r, ok := c.(*ctrlv1.GetDesiredStateRequest); ok {
			asked++
			if r.DeploymentId != "api" || r.Region != "eu-west" {
				t.Errorf("asked for the desired state of %s in %s, want api in eu-west", r.DeploymentId, r.Region)
			}
		}
	}
	if asked == 0 {
		t.Error("never asked ctrld for the desired state")
	}
}

// The YAML page says what it shows and that values are redacted, and
// shows none of them; where the deployment does not run, it says so.
func TestYAMLPageGoldens(t *testing.T) {
	for _, view := range []string{"yaml", "yaml-paged-down", "yaml-not-running"} {
		t.Run(view, func(t *testing.T) {
			tm := start(t, &fakeOperator{}, 80, 24)
			waitFor(t, tm, "eu-west")
			keys(tm, tea.KeyPressMsg{Code: tea.KeyTab})
			waitFor(t, tm, "WORKFLOW")
			if view == "yaml-not-running" {
				keys(tm, down) // api in us-east, stopped
			}
			keys(tm, press('y'))
			if view == "yaml-not-running" {
				waitFor(t, tm, "does not run")
			} else {
				waitFor(t, tm, "kind: Service")
			}
			if view == "yaml-paged-down" {
				keys(tm, press('f'))
			}
			content := finalContent(t, tm)
			if strings.Contains(content, "hunter2") {
				t.Errorf("a secret is shown:\n%s", content)
			}
			golden.RequireEqual(t, content)
		})
	}
}
