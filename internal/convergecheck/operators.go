package convergecheck

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/deploysync/deploysync/internal/kubetest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// The pools operators draw from: few enough that creates, deletes and
// re-creates of one ID meet, also across environments (namespaces), and
// sentinels and policies of one environment and region collide. Every
// call they make is valid whatever the state: ctrld may refuse it as not
// found, already existing or not possible now, never as invalid.
var (
	deploymentIDs = []string{"api", "web", "worker", "cron", "auth"}
	sentinelIDs   = []string{"gw1", "gw2", "gw3"}
	policyIDs     = []string{"pol1", "pol2", "pol3", "pol4"}
	images        = []string{"ghcr.io/acme/app:v1", "ghcr.io/acme/app:v2", "ghcr.io/acme/app:v3"}
	// BadImage is an image whose Pods crash-loop (a kwok stage of
	// internal/kubetest fails them). Only rollouts use it, as they do
	// CrashOnceImage and CrashLaterImage: no region past a wave that did
	// not run the new spec ready for its bake may ever carry it (the
	// rollout verdict).
	BadImage = "ghcr.io/acme/app:" + kubetest.CrashLoopTag
	// CrashOnceImage's Pods are ready, die once crashAfter later and are
	// ready again for good; CrashLaterImage's crash-loop from then on.
	// Their rollouts bake for crashBake, so the crash falls in the
	// canary's bake: a crash during the bake fails it, so neither may
	// ever reach the second wave.
	CrashOnceImage  = "ghcr.io/acme/app:" + kubetest.CrashOnceTag
	CrashLaterImage = "ghcr.io/acme/app:" + kubetest.CrashLaterTag
	// An environment belongs to one workspace: ctrld refuses a sentinel or
	// policy of an environment under another workspace.
	environments = []environment{{"acme", "prod"}, {"acme", "dev"}, {"beta", "prod2"}, {"beta", "dev2"}}
	// A policy name's owner, a deployment or "" for its environment, is
	// fixed: ctrld fixes it when the policy is created.
	policies = []struct{ name, owner string }{{"allow-dns", ""}, {"deny-all", ""}, {"api-ingress", "api"}, {"web-egress", "web"}}
	// Pairs whose namespace is reserved (kube-system, kube-public,
	// kube-node-lease): ctrld must refuse every call that names one, as
	// invalid, and write nothing (the verdict then finds nothing of them
	// desired, and nothing in those namespaces).
	reservedPairs = []environment{{"kube", "system"}, {"kube", "public"}, {"kube-node", "lease"}}
)

// reservedShare is one in how many calls tries a reserved pair, and one
// in how many a strategy naming a region no one registered (typo).
const reservedShare = 25

type environment struct{ workspace, id string }

// OpStats counts one operation type's calls by outcome.
type OpStats struct {
	// OK calls changed desired state.
	OK int
	// Rejected calls were refused for what they asked (not found, already
	// exists, not possible in the current state): the pools make many of
	// them, on purpose.
	Rejected int
	// Failed calls did not get an answer (ctrld or the database down), or
	// were refused as invalid, which no call the pools make is.
	Failed int
	// InOutage of the Failed calls found ctrld unavailable while a fault
	// had its database down: they prove nothing either way.
	InOutage int
}

// opCounter is OpStats by operation, shared by concurrent operators.
type opCounter struct {
	// inOutage, when set, tells whether ctrld's database is down on
	// purpose right now.
	inOutage func() bool

	mu  sync.Mutex
	ops map[string]*OpStats
	// violations are calls that had to be refused and were not, and
	// refused calls that changed something.
	violations []string
	// fences and strategies count what the fenced actions and the
	// strategies that must be refused did, and what was verified of them.
	fences     FenceStats
	strategies StrategyStats
}

// violate records a violation.
func (c *opCounter) violate(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

// tally updates the fence and strategy counts.
func (c *opCounter) tally(f func(*FenceStats, *StrategyStats)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(&c.fences, &c.strategies)
}

func (c *opCounter) add(op string, err error) {
	c.count(op, err, codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition)
}

// count counts a call's outcome: OK, refused with one of the rejected
// codes, or failed.
func (c *opCounter) count(op string, err error, rejected ...codes.Code) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ops == nil {
		c.ops = map[string]*OpStats{}
	}
	s := c.ops[op]
	if s == nil {
		s = &OpStats{}
		c.ops[op] = s
	}
	switch code := status.Code(err); {
	case code == codes.OK:
		s.OK++
	case slices.Contains(rejected, code):
		s.Rejected++
	case code == codes.Unavailable, code == codes.DeadlineExceeded:
		s.Failed++
		if c.inOutage != nil && c.inOutage() {
			s.InOutage++
		}
	default:
		s.Failed++
	}
}

// addRefusal counts a call that must be refused as invalid (a reserved
// pair): InvalidArgument is its Rejected; an answer that ctrld or its
// database was down is its Failed; anything else, success above all, is
// also a violation.
func (c *opCounter) addRefusal(op, what string, err error) {
	c.addMustRefuse(op, what, err, codes.InvalidArgument)
}

// addMustRefuse counts a call that must be refused with one of the
// refused codes, as addRefusal does.
func (c *opCounter) addMustRefuse(op, what string, err error, refused ...codes.Code) {
	c.count(op, err, refused...)
	if code := status.Code(err); slices.Contains(refused, code) || code == codes.Unavailable || code == codes.DeadlineExceeded {
		return
	}
	var want []string
	for _, code := range refused {
		want = append(want, code.String())
	}
	c.violate("%s: got %v, want %s", what, err, strings.Join(want, " or "))
}

// operator issues random operator-API calls, one at a time.
type operator struct {
	client ctrlv1.OperatorServiceClient
	// name is who ctrld knows it as: the actor of its actions.
	name  string
	rng   *rand.Rand
	count *opCounter
	// carries says where (a row of the deployment's revisions, its own
	// row or a region's copy) the deployment's spec has env REV=rev; ""
	// when nowhere. Nil: not checked.
	carries func(ctx context.Context, id, rev string) (string, error)
	// immediate judges an update ctrld took that may have been an
	// immediate change (System.judgeImmediate); nil: not judged.
	immediate func(ctx context.Context, c immediateChange) []string
	// release: the operator of a release round (releaseRound) mostly rolls
	// out, under the error-rate check, and seldom acts on a rollout in
	// flight or its canary, so that more canaries run their bake and meet
	// their checks (and the Prometheus outages of the round).
	release bool
}

// run calls until ctx ends, with short random pauses, as a busy console
// and deploy pipeline would.
func (o *operator) run(ctx context.Context) {
	for ctx.Err() == nil {
		callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		switch o.rng.IntN(reservedShare) {
		case 0:
			op, what, err := o.reserved(callCtx)
			cancel()
			o.count.addRefusal(op, what, err)
		case 1:
			o.typo(callCtx)
			cancel()
		default:
			op, err := o.call(callCtx)
			cancel()
			o.count.add(op, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(20+o.rng.IntN(200)) * time.Millisecond):
		}
	}
}

func pick[T any](rng *rand.Rand, from []T) T { return from[rng.IntN(len(from))] }

// region is one region, or (when all is allowed and drawn) "" for every
// region of a deployment.
func (o *operator) region(all bool) string {
	if all && o.rng.IntN(3) == 0 {
		return ""
	}
	return pick(o.rng, Regions)
}

// rolloutShare is one in how many calls changes a deployment's spec: an
// update, at once or rolled out in waves, or an operator's action on a
// rollout in flight; releaseShare the same in a release round.
const (
	rolloutShare = 5
	releaseShare = 2
)

// releaseRound tells whether round n (from 1) is a release round: every
// second one. The others' operators stop, scale to 0 or abort nearly
// every canary before its bake ends, so that few rollouts pass a wave
// there (one or two in three rounds); a release round's operators roll
// out twice as much of ErrorsImage, do not stop or delete deployments,
// and seldom act on rollouts in flight.
func releaseRound(n int) bool { return n%2 == 0 }

// Waves of the checker's rollouts: its first region as the canary, then
// the other; bakes and deadlines short enough that every rollout ends
// within a round's convergence bound. A "*" wave's deadline is
// starDeadline: a rollout's plan then shows which of its strategy's
// waves each of its own is, and every strategy of the checker names its
// first wave, which a plan never drops (droppedWave).
const (
	rolloutBake     = time.Second
	rolloutDeadline = 10 * time.Second
	starDeadline    = rolloutDeadline + time.Second
)

// The rollouts of CrashOnceImage and CrashLaterImage: their Pods crash
// crashAfter after they are ready (set through kubetest.CrashAfterEnv),
// in the middle of a bake of crashBake (the canary's agent reports a
// Pod's readiness within a second; the crash comes 2 s later, at least
// 2 s before the bake could end).
const (
	crashAfter = 2 * time.Second
	crashBake  = 4 * time.Second
)

// failingImage tells whether image is one of the checker's failing ones.
func failingImage(image string) bool {
	return image == BadImage || image == CrashOnceImage || image == CrashLaterImage
}

// call makes one random call and names its operation.
func (o *operator) call(ctx context.Context) (string, error) {
	c, rng := o.client, o.rng
	share := rolloutShare
	if o.release {
		share = releaseShare
	}
	if rng.IntN(share) == 0 {
		return o.rolloutCall(ctx)
	}
	n := rng.IntN(100)
	if o.release && n >= 30 && n < 60 {
		n = 60 + rng.IntN(40) // a sentinel or a policy, not a stop or delete of a deployment
	}
	switch {
	case n < 18:
		regions := []string{pick(rng, Regions)}
		if rng.IntN(2) == 0 {
			regions = Regions
		}
		env := pick(rng, environments)
		_, err := c.Deploy(ctx, &ctrlv1.DeployRequest{
			DeploymentId: pick(rng, deploymentIDs), WorkspaceId: env.workspace, EnvironmentId: env.id,
			Image: pick(rng, images), CpuMillicores: 50, MemoryMib: 64, Regions: regions, Replicas: int32(rng.IntN(3)),
		})
		return "deploy", err
	case n < 30:
		_, err := c.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: pick(rng, deploymentIDs), Region: o.region(true), Replicas: int32(rng.IntN(4))})
		return "scale", err
	case n < 40:
		_, err := c.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: pick(rng, deploymentIDs), Region: o.region(true),
			Status: ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED})
		return "stop", err
	case n < 50:
		_, err := c.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: pick(rng, deploymentIDs), Region: o.region(true),
			Status: ctrlv1.DesiredStatus_DESIRED_STATUS_RUNNING})
		return "start", err
	case n < 60:
		_, err := c.DeleteDeployment(ctx, &ctrlv1.DeleteDeploymentRequest{DeploymentId: pick(rng, deploymentIDs)})
		return "delete-deployment", err
	case n < 75:
		stopped := rng.IntN(4) == 0
		env := pick(rng, environments)
		_, err := c.PutSentinel(ctx, &ctrlv1.PutSentinelRequest{
			SentinelId: pick(rng, sentinelIDs), WorkspaceId: env.workspace, EnvironmentId: env.id,
			Region: pick(rng, Regions), Image: pick(rng, images), Replicas: int32(rng.IntN(3)), CpuMillicores: 50, MemoryMib: 32,
			Stopped: stopped,
		})
		if stopped {
			return "stop-sentinel", err
		}
		return "ensure-sentinel", err
	case n < 82:
		_, err := c.DeleteSentinel(ctx, &ctrlv1.DeleteSentinelRequest{SentinelId: pick(rng, sentinelIDs)})
		return "delete-sentinel", err
	case n < 93:
		env, p := pick(rng, environments), pick(rng, policies)
		_, err := c.PutCiliumNetworkPolicy(ctx, &ctrlv1.PutCiliumNetworkPolicyRequest{
			PolicyId: pick(rng, policyIDs), WorkspaceId: env.workspace, EnvironmentId: env.id,
			Region: pick(rng, Regions), Name: p.name, Spec: policySpec(rng),
			DeploymentId: p.owner, // ties it to the deployment's lifetime; not found while that does not exist
		})
		return "ensure-policy", err
	default:
		_, err := c.DeleteCiliumNetworkPolicy(ctx, &ctrlv1.DeleteCiliumNetworkPolicyRequest{PolicyId: pick(rng, policyIDs)})
		return "delete-policy", err
	}
}

// rolloutCall changes a deployment's spec, at once or in waves with a
// good image or a failing one, acts on its rollout in flight, or acts on
// a canary (canaryCall).
func (o *operator) rolloutCall(ctx context.Context) (string, error) {
	c, rng := o.client, o.rng
	id := pick(rng, deploymentIDs)
	// A fresh env value: an update that changes nothing is invalid.
	vars := map[string]string{"REV": fmt.Sprint(rng.IntN(1 << 30))}
	n := rng.IntN(14)
	if o.release && n >= 6 && rng.IntN(4) > 0 {
		n = 2 + rng.IntN(4) // a rollout instead of an action on one in flight
	}
	switch {
	case n < 1:
		// An environment's strategy: the updates above with no strategy
		// of their own roll out under it (good images only: the failing
		// ones go out only under a rollout's per-call strategy). Its
		// canary is either region: an update of a deployment that runs
		// only in the other has a wave naming none of its regions, and
		// must be refused, writing nothing.
		env := pick(rng, environments)
		strategy := &ctrlv1.RolloutStrategy{}
		if rng.IntN(3) > 0 {
			strategy = waves([]string{pick(rng, Regions)}, rolloutBake)
			strategy.Waves[1].Bake = nil
			if rng.IntN(2) == 0 {
				strategy.Checks = errorRateChecks()
			}
		}
		_, err := c.SetRolloutStrategy(ctx, &ctrlv1.SetRolloutStrategyRequest{WorkspaceId: env.workspace, EnvironmentId: env.id, Strategy: strategy})
		return "set-strategy", err
	case n < 2:
		// Under its environment's strategy: with no waves, an immediate
		// change, which a closed window or a standing halt refuses.
		image, sent := pick(rng, images), time.Now()
		resp, err := c.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: id, Image: &image, Env: vars})
		o.checkRefusedUpdate(ctx, id, vars["REV"], err)
		if err == nil && o.immediate != nil {
			for _, v := range o.immediate(ctx, immediateChange{deployment: id, rev: vars["REV"], revision: resp.GetRevision(), sent: sent, answered: time.Now()}) {
				o.count.violate("%s", v)
			}
		}
		return "update", err
	case n < 6:
		// Half the rollouts carry the error-rate check, and those of
		// ErrorsImage (Ready, but serving errors) always do.
		image, op, bake := pick(rng, images), "rollout-good", rolloutBake
		withChecks := o.release || rng.IntN(2) == 0
		more := 0 // more of ErrorsImage in a release round
		if o.release {
			more = 2
		}
		switch rng.IntN(7 + more) {
		case 0:
			image, op = BadImage, "rollout-bad"
		case 1:
			image, op, bake = CrashOnceImage, "rollout-crash-once", crashBake
		case 2:
			image, op, bake = CrashLaterImage, "rollout-crash-later", crashBake
		case 3, 7, 8:
			image, op, withChecks = ErrorsImage, "rollout-errors", true
		}
		if bake == crashBake {
			vars[kubetest.CrashAfterEnv] = crashAfter.String()
		}
		strategy := waves(Regions[:1], bake)
		if withChecks {
			strategy.Checks = errorRateChecks()
			if image != ErrorsImage {
				op += "-checked"
			}
		}
		if rng.IntN(4) == 0 {
			strategy.OnFailure = "pause"
		}
		// Most rollouts should have something to prove: the deployment in
		// every region, running. A deploy of one that exists is refused.
		env := pick(rng, environments)
		if _, err := c.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: id, WorkspaceId: env.workspace, EnvironmentId: env.id,
			Image: pick(rng, images), CpuMillicores: 50, MemoryMib: 64, Regions: Regions, Replicas: 1 + int32(rng.IntN(2))}); err == nil {
			return "deploy", nil
		}
		_, err := c.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: id, Image: &image, Env: vars, Rollout: strategy})
		o.checkRefusedUpdate(ctx, id, vars["REV"], err)
		return op, err
	case n < 7:
		return o.noRegionCall(ctx)
	case n < 8:
		// Unfenced, as a script's call is.
		action := pick(rng, rolloutActions)
		_, err := c.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: id, Action: action})
		return "rollout-" + actionName(action), err
	case n < 11:
		return o.fencedCall(ctx)
	default:
		return o.canaryCall(ctx)
	}
}

// canaryCall is the on-call engineer during a rollout: most of the time
// it stops, or scales to 0, a region of a rollout's wave in progress (the
// canary, while the first wave bakes), which takes effect at once, as
// the design tells them to do with a broken canary; otherwise it starts
// or scales up a region of a deployment again. A wave whose regions run
// nothing of the new spec then proves nothing, and must not pass.
func (o *operator) canaryCall(ctx context.Context) (string, error) {
	c, rng := o.client, o.rng
	if rng.IntN(3) > 0 {
		resp, err := c.ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{InFlightOnly: true, Limit: 100})
		if err != nil {
			return "canary-look", err
		}
		var candidates []string // deployment and region
		for _, r := range resp.GetRollouts() {
			if waves := r.Strategy.GetWaves(); r.Wave >= 1 && int(r.Wave) <= len(waves) {
				for _, region := range waves[r.Wave-1].Regions {
					candidates = append(candidates, r.DeploymentId+"/"+region)
				}
			}
		}
		if len(candidates) > 0 {
			id, region, _ := strings.Cut(pick(rng, candidates), "/")
			if rng.IntN(2) == 0 {
				_, err := c.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: id, Region: region,
					Status: ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED})
				return "canary-stop", err
			}
			_, err := c.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: id, Region: region, Replicas: 0})
			return "canary-scale-0", err
		}
	}
	id, region := pick(rng, deploymentIDs), pick(rng, Regions)
	if rng.IntN(2) == 0 {
		_, err := c.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: id, Region: region,
			Status: ctrlv1.DesiredStatus_DESIRED_STATUS_RUNNING})
		return "canary-start", err
	}
	_, err := c.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: id, Region: region, Replicas: 1 + int32(rng.IntN(2))})
	return "canary-scale-up", err
}

// reserved tries a deploy, a sentinel or a policy of a reserved pair,
// which ctrld must refuse as invalid; it names the operation and the call.
func (o *operator) reserved(ctx context.Context) (op, what string, err error) {
	c, rng := o.client, o.rng
	env, region := pick(rng, reservedPairs), pick(rng, Regions)
	switch rng.IntN(3) {
	case 0:
		_, err = c.Deploy(ctx, &ctrlv1.DeployRequest{
			DeploymentId: pick(rng, deploymentIDs), WorkspaceId: env.workspace, EnvironmentId: env.id,
			Image: pick(rng, images), CpuMillicores: 50, MemoryMib: 64, Regions: []string{region}, Replicas: 1,
		})
		what = "deploy"
	case 1:
		_, err = c.PutSentinel(ctx, &ctrlv1.PutSentinelRequest{
			SentinelId: pick(rng, sentinelIDs), WorkspaceId: env.workspace, EnvironmentId: env.id,
			Region: region, Image: pick(rng, images), Replicas: 1, CpuMillicores: 50, MemoryMib: 32,
		})
		what = "sentinel"
	default:
		_, err = c.PutCiliumNetworkPolicy(ctx, &ctrlv1.PutCiliumNetworkPolicyRequest{
			PolicyId: pick(rng, policyIDs), WorkspaceId: env.workspace, EnvironmentId: env.id,
			Region: region, Name: "allow-dns", Spec: policySpec(rng),
		})
		what = "policy"
	}
	return "reserved-pair", fmt.Sprintf("%s of workspace %s environment %s", what, env.workspace, env.id), err
}

// noRegionCall updates a deployment that runs in one region only under a
// strategy of its own whose canary is the other region, a wave naming
// none of its regions: ctrld must refuse it, writing nothing (unless the
// deployment was deleted, or deployed again in every region, meanwhile;
// then the verdict reads the plan). With no such deployment it deploys
// one.
func (o *operator) noRegionCall(ctx context.Context) (string, error) {
	c, rng := o.client, o.rng
	list, err := c.ListDeployments(ctx, &ctrlv1.ListDeploymentsRequest{})
	if err != nil {
		return "no-region-look", err
	}
	var candidates []*ctrlv1.DeploymentSummary
	for _, d := range list.GetDeployments() {
		if len(d.Regions) == 1 && slices.Contains(Regions, d.Regions[0].Region) {
			candidates = append(candidates, d)
		}
	}
	if len(candidates) == 0 {
		env := pick(rng, environments)
		_, err := c.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: pick(rng, deploymentIDs), WorkspaceId: env.workspace, EnvironmentId: env.id,
			Image: pick(rng, images), CpuMillicores: 50, MemoryMib: 64, Regions: []string{pick(rng, Regions)}, Replicas: 1})
		return "deploy", err
	}
	d := pick(rng, candidates)
	var other []string
	for _, r := range Regions {
		if r != d.Regions[0].Region {
			other = append(other, r)
		}
	}
	image, rev := pick(rng, images), fmt.Sprint(rng.IntN(1<<30))
	_, err = c.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: d.DeploymentId, Image: &image,
		Env: map[string]string{"REV": rev}, Rollout: waves(other[:1], rolloutBake)})
	o.checkRefusedUpdate(ctx, d.DeploymentId, rev, err)
	return "rollout-no-region", err
}

// typo sets a strategy whose canary is a typo of a region's name, no
// one's region: for an environment, which ctrld must refuse as invalid
// whatever the state, and never store; or for one update, which it must
// refuse as invalid or for the deployment's state, writing nothing.
func (o *operator) typo(ctx context.Context) {
	c, rng := o.client, o.rng
	strategy, typo := o.typoStrategy()
	if rng.IntN(2) == 0 {
		env := pick(rng, environments)
		_, err := c.SetRolloutStrategy(ctx, &ctrlv1.SetRolloutStrategyRequest{WorkspaceId: env.workspace, EnvironmentId: env.id, Strategy: strategy})
		what := fmt.Sprintf("strategy of workspace %s environment %s with a wave of %q, a region no one registered", env.workspace, env.id, typo)
		o.count.addRefusal("strategy-typo", what, err)
		if status.Code(err) != codes.InvalidArgument {
			return
		}
		o.count.tally(func(_ *FenceStats, s *StrategyStats) { s.Typos++ })
		got, gerr := c.GetRolloutStrategy(ctx, &ctrlv1.GetRolloutStrategyRequest{WorkspaceId: env.workspace, EnvironmentId: env.id})
		for _, w := range got.GetStrategy().GetWaves() {
			if gerr == nil && slices.ContainsFunc(w.Regions, func(r string) bool { return slices.Contains(typoRegions, r) }) {
				o.count.violate("%s: refused (%v), yet the environment's strategy names %v", what, err, w.Regions)
			}
		}
		return
	}
	id, image := pick(rng, deploymentIDs), pick(rng, images)
	rev := fmt.Sprint(rng.IntN(1 << 30))
	_, err := c.UpdateDeployment(ctx, &ctrlv1.UpdateDeploymentRequest{DeploymentId: id, Image: &image,
		Env: map[string]string{"REV": rev}, Rollout: strategy})
	what := fmt.Sprintf("update of %s under its own strategy with a wave of %q, a region no one registered", id, typo)
	o.count.addMustRefuse("rollout-typo", what, err, codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition)
	if status.Code(err) == codes.InvalidArgument {
		o.count.tally(func(_ *FenceStats, s *StrategyStats) { s.Typos++ })
	}
	o.checkRefusedUpdate(ctx, id, rev, err)
}

// policySpec is a small Cilium spec; its port varies, so ensures update.
func policySpec(rng *rand.Rand) *structpb.Struct {
	spec, err := structpb.NewStruct(map[string]any{
		"endpointSelector": map[string]any{"matchLabels": map[string]any{"app": "x"}},
		"egress": []any{map[string]any{"toPorts": []any{map[string]any{"ports": []any{
			map[string]any{"port": fmt.Sprint(53 + rng.IntN(3)), "protocol": "UDP"},
		}}}}},
	})
	if err != nil {
		panic(err) // a literal that is JSON-shaped by construction
	}
	return spec
}
