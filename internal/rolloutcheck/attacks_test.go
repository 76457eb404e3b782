package rolloutcheck_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	entagent "github.com/deploysync/deploysync/ent/agent"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/kubetest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// The ways through the gate that checks from outside found, each on the
// real parts: an API server and kwok per region, ctrld on MariaDB, real
// agents (in-process, and a real agentd process where a signal decides).
// Each runs a rollout whose canary eu must not prove anything, and holds
// the promise to what the API servers saw: no StatefulSet of us or ap
// ever carries the new image.

// canaryThenRest is eu alone, baking bake with a deadline, then the rest.
func canaryThenRest(bake, deadline time.Duration) *ctrlv1.RolloutStrategy {
	return &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{
		{Regions: []string{"eu"}, Bake: durationpb.New(bake), Deadline: durationpb.New(deadline)},
		{Regions: []string{"*"}, Deadline: durationpb.New(time.Minute)},
	}}
}

// deploy deploys id on image v1 (one replica, env given) in every region
// and waits until it runs there.
func (s *stack) deploy(t *testing.T, id string, env map[string]string) {
	t.Helper()
	req := &ctrlv1.DeployRequest{DeploymentId: id, WorkspaceId: "acme", EnvironmentId: "prod", Image: "ghcr.io/acme/" + id + ":v1",
		CpuMillicores: 50, MemoryMib: 64, Regions: regions, Replicas: 1, Env: env}
	if _, err := s.op.Deploy(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	s.waitReady(t, id, req.Image, 1, 2*time.Minute)
}

// update starts id's rollout to image under strategy.
func (s *stack) update(t *testing.T, id, image string, strategy *ctrlv1.RolloutStrategy) {
	t.Helper()
	if _, err := s.op.UpdateDeployment(context.Background(), &ctrlv1.UpdateDeploymentRequest{DeploymentId: id, Image: &image, Rollout: strategy}); err != nil {
		t.Fatal(err)
	}
}

// waitRegion waits until region of id's rollout in flight is in state.
func (s *stack) waitRegion(t *testing.T, id, region, state string, within time.Duration) {
	t.Helper()
	var resp *ctrlv1.GetRolloutResponse
	var err error
	done := false
	defer func() {
		if !done {
			t.Logf("the rollout was last %v, %v", resp.GetRollout(), err)
		}
	}()
	eventually.True(t, within, fmt.Sprintf("%s of %s's rollout never %s", region, id, state), func() bool {
		resp, err = s.op.GetRollout(context.Background(), &ctrlv1.GetRolloutRequest{DeploymentId: id})
		for _, r := range resp.GetRollout().GetRegions() {
			if err == nil && r.Region == region && r.State == state {
				return true
			}
		}
		return false
	})
	done = true
}

// neverPast checks the promise against what the API servers saw: only eu
// ever carried image.
func (s *stack) neverPast(t *testing.T, id, image string) {
	t.Helper()
	for _, region := range []string{"us", "ap"} {
		if seen := s.logs[region].Sightings(id, image); len(seen) > 0 {
			t.Errorf("%s's StatefulSet carried %s at %s, past a canary that proved nothing", region, image, seen[0].At.Format(time.StampMilli))
		}
	}
	for _, region := range regions {
		if gaps := s.logs[region].Gaps(); len(gaps) > 0 {
			t.Errorf("%s's image log has gaps, so it proves nothing for them: %s", region, strings.Join(gaps, "; "))
		}
	}
}

// A canary where nothing runs the new spec proves nothing: stopped or
// scaled to 0 during its bake (as on-call stops a broken canary), or
// stopped before the update, it holds the rollout until its deadline
// fails it, and the rollout rolls back; no later wave gets the image.
func TestACanaryWhereNothingRunsHoldsItsWave(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	for i, c := range []struct {
		name   string
		before bool // act before the update, not after the canary got it
		act    func(id string) error
	}{
		{"stopped during its bake", false, func(id string) error {
			_, err := s.op.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: id, Region: "eu", Status: ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED})
			return err
		}},
		{"scaled to 0 during its bake", false, func(id string) error {
			_, err := s.op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: id, Region: "eu", Replicas: 0})
			return err
		}},
		{"stopped before the update", true, func(id string) error {
			_, err := s.op.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: id, Region: "eu", Status: ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED})
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // one stack, a deployment each
			id := fmt.Sprintf("idle%d", i)
			s.deploy(t, id, nil)
			image := "ghcr.io/acme/" + id + ":v2"
			if c.before {
				if err := c.act(id); err != nil {
					t.Fatal(err)
				}
			}
			// A bake far shorter than the deadline: a canary read as
			// healthy would pass long before it.
			s.update(t, id, image, canaryThenRest(2*time.Second, 20*time.Second))
			if !c.before {
				s.waitRegion(t, id, "eu", "baking", time.Minute)
				if err := c.act(id); err != nil {
					t.Fatal(err)
				}
			}
			r := s.waitRollout(t, id, 2*time.Minute)
			if r.GetState() != "rolled_back" || !strings.Contains(r.GetReason(), "nothing runs the new spec") {
				t.Errorf("rollout: %s (%s), want rolled back at eu's deadline, nothing running the new spec", r.GetState(), r.GetReason())
			}
			s.neverPast(t, id, image)
		})
	}
}

// A Pod of the new spec that dies once in the middle of the bake and is
// ready again a second later fails the canary: restarts count from the
// region's promotion (kwok's :crashonce stage).
func TestACrashInTheMiddleOfTheBakeFailsIt(t *testing.T) {
	s := start(t)
	s.deploy(t, "once", map[string]string{kubetest.CrashAfterEnv: "5s"})
	image := "ghcr.io/acme/once:" + kubetest.CrashOnceTag
	s.update(t, "once", image, canaryThenRest(20*time.Second, time.Minute))
	r := s.waitRollout(t, "once", 2*time.Minute)
	if r.GetState() != "rolled_back" || !strings.Contains(r.GetReason(), "restarted since the region's promotion") {
		t.Errorf("rollout: %s (%s), want rolled back on eu's restart", r.GetState(), r.GetReason())
	}
	s.neverPast(t, "once", image)
}

// ctrld goes away during the canary's bake, and the canary's Pods start
// crash-looping while it is away (kwok's :crashlater stage). Back, ctrld
// must not pass the bake on the reports from before: the agent's stream
// connected again since the bake began, so the bake starts again, and the
// agent's first heartbeat follows the crash's report.
func TestABakeAcrossACtrldOutageSeesTheCrash(t *testing.T) {
	s := start(t)
	s.deploy(t, "later", map[string]string{kubetest.CrashAfterEnv: "6s"})
	image := "ghcr.io/acme/later:" + kubetest.CrashLaterTag
	s.update(t, "later", image, canaryThenRest(8*time.Second, time.Minute))
	s.waitRegion(t, "later", "eu", "baking", time.Minute)
	// As SIGKILL leaves it: the agents' connection records still name
	// the ctrld that died (a stop closes them).
	ctx := context.Background()
	agent := s.env.DB.Ent.Agent.Query().Where(entagent.Region("eu")).OnlyX(ctx)
	s.env.Server.Stop()
	s.env.DB.Ent.Agent.UpdateOne(agent).SetConnectedTo(agent.ConnectedTo).SetConnectedSince(*agent.ConnectedSince).ExecX(ctx)
	// Away past the bake's end and past the crash.
	time.Sleep(15 * time.Second)
	s.env.Restart()
	r := s.waitRollout(t, "later", 2*time.Minute)
	if r.GetState() != "rolled_back" || !strings.Contains(r.GetReason(), "eu: ") {
		t.Errorf("rollout: %s (%s), want rolled back on eu", r.GetState(), r.GetReason())
	}
	t.Logf("rollout: %s: %s", r.GetState(), r.GetReason())
	s.neverPast(t, "later", image)
}

// A frozen agent (SIGSTOP: its TCP connection stays open, it reports and
// heartbeats nothing) passes no bake: a bake ends only on a heartbeat
// sent after its end, and 6 s of silence make it not connected. The
// canary's Pods crash-loop meanwhile; the real agentd process is stopped.
func TestAFrozenAgentPassesNoBake(t *testing.T) {
	s := startWithout(t, "eu")
	agentd := s.agentdProcess(t, "eu")
	s.deploy(t, "frozen", map[string]string{kubetest.CrashAfterEnv: "4s"})
	image := "ghcr.io/acme/frozen:" + kubetest.CrashLaterTag
	// A bake shorter than the agent's silence bound: it must not end on
	// reports that stopped coming.
	s.update(t, "frozen", image, canaryThenRest(2*time.Second, 30*time.Second))
	s.waitRegion(t, "frozen", "eu", "baking", time.Minute)
	if err := agentd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agentd.Process.Signal(syscall.SIGCONT) })
	r := s.waitRollout(t, "frozen", 2*time.Minute)
	t.Logf("rollout: %s: %s", r.GetState(), r.GetReason())
	if r.GetState() != "rolled_back" || !strings.Contains(r.GetReason(), "not connected") {
		t.Errorf("rollout: %s (%s), want rolled back at eu's deadline, its agent not connected", r.GetState(), r.GetReason())
	}
	s.neverPast(t, "frozen", image)
}

// agentdProcess runs the real agentd binary for region against the
// stack's ctrld, as it runs in production (its defaults: heartbeats every
// 2 s, each after the Pods' status), and stops it when t ends.
func (s *stack) agentdProcess(t *testing.T, region string) *exec.Cmd {
	t.Helper()
	bin := buildAgentd(t)
	c := clusters[region].Get(t)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte(s.env.AgentToken(region)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--region", region, "--identity", "agentd-"+region, "--token-file", token,
		"--ctrld-address", s.env.Server.Addr, "--insecure", "--kubeconfig", c.Kubeconfig,
		"--leader-elect=false", "--metrics-listen", "", "--resync-interval", "0")
	log, err := os.Create(filepath.Join(t.TempDir(), "agentd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			t.Logf("agentd's log:\n%s", out)
		}
	})
	return cmd
}

// buildAgentd builds agentd as its Dockerfile does, so that the build
// cache `go tool task test` filled before the tests serves it and this
// only links.
func buildAgentd(t *testing.T) string {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command("bash", "scripts/static-build.sh", out)
	cmd.Dir = filepath.Join("..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build agentd: %v\n%s", err, b)
	}
	return filepath.Join(out, "agentd")
}
