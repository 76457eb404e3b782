package feedcheck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/ent/ciliumnetworkpolicy"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/jsontype"
	"github.com/deploysync/deploysync/ent/rollout"
	"github.com/deploysync/deploysync/ent/sentinel"
	"github.com/deploysync/deploysync/internal/naming"
)

// The ID pools are small on purpose: operations collide on the same rows,
// creates race deletes of the same IDs, and an ID comes back in another
// environment (another namespace).
var (
	deploymentIDs = []string{"d0", "d1", "d2", "d3", "d4", "d5"}
	workspaceIDs  = []string{"w0", "w1"}
	environments  = []string{"e0", "e1", "e2"}
	sentinelIDs   = []string{"s0", "s1", "s2", "s3"}
	policyIDs     = []string{"p0", "p1", "p2", "p3", "p4"}
	policyNames   = []string{"allow", "deny", "dns"}
)

// draw picks one element.
func draw[T any](r *rand.Rand, from []T) T { return from[r.IntN(len(from))] }

// txOp is one statement (or a few) inside a checker transaction, through
// the Ent client with the change-feed hooks.
type txOp struct {
	name string
	run  func(ctx context.Context, tx *ent.Tx, r *rand.Rand, regions []string) error
}

// storeOp is one call of the desired-state layer, which runs its own
// transaction (c reads what it needs to know first).
type storeOp struct {
	name string
	run  func(ctx context.Context, s *desired.Store, c *ent.Client, r *rand.Rand, regions []string) error
}

func image(r *rand.Rand) string { return fmt.Sprintf("app:%d", r.IntN(4)) }

// respec gives a topology a random spec of its own; one in six is the
// empty spec, a region that runs nothing.
func respec(m *ent.DeploymentTopologyMutation, r *rand.Rand) {
	if r.IntN(6) == 0 {
		m.SetImage("")
		m.SetSpecHash("")
		return
	}
	img := image(r)
	m.SetImage(img)
	m.SetCPUMillicores(100 + r.IntN(3))
	m.SetMemoryMib(64)
	m.SetPort(8080)
	m.SetEnv(map[string]string{"REV": img})
	m.SetSpecHash(fmt.Sprintf("h-%s-%d", img, r.IntN(100)))
}

// policySpec is a policy Cilium takes (a deployment's pods in default deny
// for ingress), varied by its description.
func policySpec(r *rand.Rand) map[string]any {
	return map[string]any{"endpointSelector": map[string]any{"matchLabels": map[string]any{"app": draw(r, deploymentIDs)}},
		"ingress": []any{map[string]any{}}, "description": fmt.Sprint(r.IntN(5))}
}

var txOps = []txOp{
	{"deployment.create", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, _ []string) error {
		return tx.Deployment.Create().SetID(draw(r, deploymentIDs)).SetWorkspaceID(draw(r, workspaceIDs)).
			SetEnvironmentID(draw(r, environments)).SetImage(image(r)).SetCPUMillicores(100).SetMemoryMib(64).Exec(ctx)
	}},
	{"deployment.upsert", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, _ []string) error {
		return tx.Deployment.Create().SetID(draw(r, deploymentIDs)).SetWorkspaceID(draw(r, workspaceIDs)).
			SetEnvironmentID(draw(r, environments)).SetImage(image(r)).SetCPUMillicores(100 + r.IntN(3)).SetMemoryMib(64).
			OnConflictColumns(deployment.FieldID).
			Update(func(u *ent.DeploymentUpsert) { u.UpdateImage().UpdateCPUMillicores() }).
			Exec(ctx)
	}},
	{"deployment.update-one", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, _ []string) error {
		return tx.Deployment.UpdateOneID(draw(r, deploymentIDs)).SetImage(image(r)).Exec(ctx)
	}},
	{"deployment.update-bulk", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, _ []string) error {
		return tx.Deployment.Update().Where(deployment.EnvironmentID(draw(r, environments))).
			SetMemoryMib(64 + r.IntN(3)).Exec(ctx)
	}},
	{"deployment.workflow", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, _ []string) error {
		// Actual state: no change row, and no change to what agents run.
		return tx.Deployment.Update().Where(deployment.ID(draw(r, deploymentIDs))).
			SetWorkflowStatus(deployment.WorkflowStatusDeploying).Exec(changefeed.ActualState(ctx))
	}},
	{"deployment.delete-one", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, _ []string) error {
		return tx.Deployment.DeleteOneID(draw(r, deploymentIDs)).Exec(ctx)
	}},
	{"deployment.delete-bulk", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, _ []string) error {
		_, err := tx.Deployment.Delete().Where(deployment.EnvironmentID(draw(r, environments))).Exec(ctx)
		return err
	}},
	{"topology.create", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, regions []string) error {
		id := draw(r, deploymentIDs)
		create := tx.DeploymentTopology.Create().SetDeploymentID(id).SetRegion(draw(r, regions)).
			SetReplicas(1 + r.IntN(4))
		// With its deployment's namespace, as ctrld writes it, or without,
		// as a ctrld older than the column did: readers take the
		// deployment's then.
		if r.IntN(2) == 0 {
			switch d, err := tx.Deployment.Get(ctx, id); {
			case err == nil:
				create.SetNamespace(naming.Namespace(d.WorkspaceID, d.EnvironmentID))
			case !ent.IsNotFound(err): // not found: the insert fails on its own
				return err
			}
		}
		if r.IntN(4) > 0 { // else a region a rollout has not reached: it runs nothing
			respec(create.Mutation(), r)
		}
		return create.Exec(ctx)
	}},
	// Each region runs its own copy of the spec (a rollout moves them a
	// wave at a time), so regions of one deployment differ.
	{"topology.respec-one", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, regions []string) error {
		id, err := tx.DeploymentTopology.Query().
			Where(deploymenttopology.DeploymentID(draw(r, deploymentIDs)), deploymenttopology.Region(draw(r, regions))).OnlyID(ctx)
		if err != nil {
			return err
		}
		u := tx.DeploymentTopology.UpdateOneID(id)
		respec(u.Mutation(), r)
		return u.Exec(ctx)
	}},
	{"topology.respec-bulk", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, regions []string) error {
		u := tx.DeploymentTopology.Update().Where(deploymenttopology.DeploymentID(draw(r, deploymentIDs)),
			deploymenttopology.RegionIn(regions[:1+r.IntN(len(regions))]...))
		respec(u.Mutation(), r)
		return u.Exec(ctx)
	}},
	{"topology.update-one", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, regions []string) error {
		id, err := tx.DeploymentTopology.Query().
			Where(deploymenttopology.DeploymentID(draw(r, deploymentIDs)), deploymenttopology.Region(draw(r, regions))).OnlyID(ctx)
		if err != nil {
			return err
		}
		return tx.DeploymentTopology.UpdateOneID(id).SetReplicas(1 + r.IntN(4)).Exec(ctx)
	}},
	{"topology.stop-start-bulk", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, _ []string) error {
		status := draw(r, []deploymenttopology.DesiredStatus{deploymenttopology.DesiredStatusRunning, deploymenttopology.DesiredStatusStopped})
		return tx.DeploymentTopology.Update().Where(deploymenttopology.DeploymentID(draw(r, deploymentIDs))).
			SetDesiredStatus(status).Exec(ctx)
	}},
	{"topology.delete", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, regions []string) error {
		_, err := tx.DeploymentTopology.Delete().
			Where(deploymenttopology.DeploymentID(draw(r, deploymentIDs)), deploymenttopology.Region(draw(r, regions))).Exec(ctx)
		return err
	}},
	{"sentinel.upsert", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, regions []string) error {
		return tx.Sentinel.Create().SetID(draw(r, sentinelIDs)).SetWorkspaceID("w0").SetEnvironmentID(draw(r, environments)).
			SetRegion(draw(r, regions)).SetImage(image(r)).SetReplicas(1+r.IntN(3)).SetCPUMillicores(50).SetMemoryMib(32).
			OnConflictColumns(sentinel.FieldEnvironmentID, sentinel.FieldRegion).
			Update(func(u *ent.SentinelUpsert) { u.UpdateImage().UpdateReplicas() }).
			Exec(ctx)
	}},
	{"sentinel.update-bulk", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, regions []string) error {
		state := draw(r, []sentinel.DesiredState{sentinel.DesiredStateRunning, sentinel.DesiredStateStopped})
		return tx.Sentinel.Update().Where(sentinel.Region(draw(r, regions))).SetDesiredState(state).Exec(ctx)
	}},
	{"sentinel.health", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, _ []string) error {
		return tx.Sentinel.Update().Where(sentinel.ID(draw(r, sentinelIDs))).
			SetAvailableReplicas(r.IntN(3)).Exec(changefeed.ActualState(ctx))
	}},
	{"sentinel.delete", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, _ []string) error {
		_, err := tx.Sentinel.Delete().Where(sentinel.EnvironmentID(draw(r, environments))).Exec(ctx)
		return err
	}},
	{"policy.upsert", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, regions []string) error {
		create := tx.CiliumNetworkPolicy.Create().SetID(draw(r, policyIDs)).SetWorkspaceID("w0").
			SetEnvironmentID(draw(r, environments)).SetRegion(draw(r, regions)).SetName(draw(r, policyNames)).SetSpec(policySpec(r))
		if r.IntN(3) > 0 {
			create.SetDeploymentID(draw(r, deploymentIDs))
		}
		return create.OnConflictColumns(ciliumnetworkpolicy.FieldRegion, ciliumnetworkpolicy.FieldEnvironmentID, ciliumnetworkpolicy.FieldName).
			Update(func(u *ent.CiliumNetworkPolicyUpsert) { u.UpdateSpec() }).
			Exec(ctx)
	}},
	{"policy.update-one", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, _ []string) error {
		return tx.CiliumNetworkPolicy.UpdateOneID(draw(r, policyIDs)).SetSpec(policySpec(r)).Exec(ctx)
	}},
	{"policy.update-bulk", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, _ []string) error {
		return tx.CiliumNetworkPolicy.Update().Where(ciliumnetworkpolicy.DeploymentID(draw(r, deploymentIDs))).
			SetSpec(policySpec(r)).Exec(ctx)
	}},
	{"policy.delete-one", func(ctx context.Context, tx *ent.Tx, r *rand.Rand, _ []string) error {
		return tx.CiliumNetworkPolicy.DeleteOneID(draw(r, policyIDs)).Exec(ctx)
	}},
}

var storeOps = []storeOp{
	{"desired.deploy", func(ctx context.Context, s *desired.Store, _ *ent.Client, r *rand.Rand, regions []string) error {
		in := regions[:1+r.IntN(len(regions))]
		if r.IntN(2) == 0 {
			in = regions[len(regions)-1:]
		}
		return s.Deploy(ctx, desired.DeploymentSpec{ID: draw(r, deploymentIDs), WorkspaceID: draw(r, workspaceIDs),
			EnvironmentID: draw(r, environments), Image: image(r), CPUMillicores: 100, MemoryMiB: 64,
			Env: map[string]string{"REV": image(r)}}, in, 1+r.IntN(3))
	}},
	{"desired.scale", func(ctx context.Context, s *desired.Store, _ *ent.Client, r *rand.Rand, regions []string) error {
		return s.Scale(ctx, draw(r, deploymentIDs), draw(r, append([]string{""}, regions...)), 1+r.IntN(5))
	}},
	{"desired.stop-start", func(ctx context.Context, s *desired.Store, _ *ent.Client, r *rand.Rand, regions []string) error {
		return s.SetDesiredStatus(ctx, draw(r, deploymentIDs), draw(r, regions), draw(r, []desired.Status{desired.Running, desired.Stopped}))
	}},
	{"desired.update", func(ctx context.Context, s *desired.Store, _ *ent.Client, r *rand.Rand, _ []string) error {
		img := image(r)
		_, err := s.UpdateDeployment(ctx, draw(r, deploymentIDs), desired.SpecUpdate{Image: &img, Env: map[string]string{"REV": image(r)}})
		return err
	}},
	{"desired.rollback", func(ctx context.Context, s *desired.Store, _ *ent.Client, r *rand.Rand, _ []string) error {
		_, _, err := s.Rollback(ctx, draw(r, deploymentIDs), r.IntN(3))
		return err
	}},
	// Rollouts: an update in waves, and the steps operators and the
	// driver take, each moving some regions to another spec.
	{"desired.update-in-waves", func(ctx context.Context, s *desired.Store, c *ent.Client, r *rand.Rand, regions []string) error {
		return updateInWaves(ctx, s, c, r, regions, draw(r, deploymentIDs))
	}},
	{"desired.set-strategy", func(ctx context.Context, s *desired.Store, _ *ent.Client, r *rand.Rand, regions []string) error {
		strategy := jsontype.Strategy{}
		if r.IntN(2) == 0 {
			strategy.Waves = []jsontype.Wave{{Regions: regions[len(regions)-1:]}, {Regions: []string{desired.EveryOtherRegion}}}
		}
		_, err := s.SetRolloutStrategy(ctx, draw(r, workspaceIDs), draw(r, environments), strategy)
		return err
	}},
	{"desired.rollout-step", func(ctx context.Context, s *desired.Store, _ *ent.Client, r *rand.Rand, _ []string) error {
		_, err := s.ControlRollout(ctx, draw(r, deploymentIDs),
			draw(r, []string{desired.RolloutPromote, desired.RolloutAbort, desired.RolloutPause, desired.RolloutResume}))
		return err
	}},
	{"desired.rollout-step-fenced", fencedStep},
	{"desired.delete-deployment", func(ctx context.Context, s *desired.Store, _ *ent.Client, r *rand.Rand, _ []string) error {
		return s.DeleteDeployment(ctx, draw(r, deploymentIDs))
	}},
	{"desired.ensure-sentinel", func(ctx context.Context, s *desired.Store, _ *ent.Client, r *rand.Rand, regions []string) error {
		_, err := s.EnsureSentinel(ctx, desired.SentinelSpec{ID: draw(r, sentinelIDs), WorkspaceID: "w0",
			EnvironmentID: draw(r, environments), Region: draw(r, regions), Image: image(r), Replicas: 1 + r.IntN(3),
			CPUMillicores: 50, MemoryMiB: 32, Stopped: r.IntN(4) == 0})
		return err
	}},
	{"desired.delete-sentinel", func(ctx context.Context, s *desired.Store, _ *ent.Client, r *rand.Rand, _ []string) error {
		return s.DeleteSentinel(ctx, draw(r, sentinelIDs))
	}},
	{"desired.ensure-policy", func(ctx context.Context, s *desired.Store, _ *ent.Client, r *rand.Rand, regions []string) error {
		spec := desired.PolicySpec{ID: draw(r, policyIDs), WorkspaceID: "w0", EnvironmentID: draw(r, environments),
			Region: draw(r, regions), Name: draw(r, policyNames), Spec: policySpec(r)}
		if r.IntN(3) > 0 {
			spec.DeploymentID = draw(r, deploymentIDs)
		}
		_, err := s.EnsureCiliumPolicy(ctx, spec)
		return err
	}},
	{"desired.delete-policy", func(ctx context.Context, s *desired.Store, _ *ent.Client, r *rand.Rand, _ []string) error {
		return s.DeleteCiliumPolicy(ctx, draw(r, policyIDs))
	}},
}

// updateInWaves updates deployment id in two waves, its canary one of
// the deployment's regions (a wave naming none of them refuses the
// update), then every other region.
func updateInWaves(ctx context.Context, s *desired.Store, c *ent.Client, r *rand.Rand, regions []string, id string) error {
	img := image(r)
	canary := regions[:1]
	if in, err := c.DeploymentTopology.Query().Where(deploymenttopology.DeploymentID(id)).
		Select(deploymenttopology.FieldRegion).Strings(ctx); err == nil && len(in) > 0 {
		canary = []string{draw(r, in)}
	}
	waves := jsontype.Strategy{Waves: []jsontype.Wave{{Regions: canary}, {Regions: []string{desired.EveryOtherRegion}}}}
	_, err := s.UpdateDeployment(desired.WithStrategy(ctx, waves), id, desired.SpecUpdate{Image: &img, Env: map[string]string{"REV": image(r)}})
	return err
}

// fencedStep is an operator's action confirmed on the deployment's newest
// rollout as read (after an update in waves, most of the time, when none
// is in flight): fenced with it as it was (it acts, unless the rollout
// moved meanwhile), or, one time in two, with the version, wave or
// revision before, or on a rollout that had ended: a fence no rollout can
// match again, which must be refused (desired.ErrRolloutMoved) and change
// nothing. A stale fence that acted, or a refusal that changed the
// rollout without moving its version, is a violation.
func fencedStep(ctx context.Context, s *desired.Store, c *ent.Client, r *rand.Rand, regions []string) error {
	id := draw(r, deploymentIDs)
	newest := func() (*ent.Rollout, error) {
		return c.Rollout.Query().Where(rollout.DeploymentID(id)).Order(ent.Desc(rollout.FieldID)).First(ctx)
	}
	before, err := newest()
	if (err != nil || before.InFlight == nil) && r.IntN(2) == 0 {
		// None in flight: most of the time, one to act on.
		if uerr := updateInWaves(ctx, s, c, r, regions, id); uerr == nil {
			before, err = newest()
		}
	}
	if err != nil {
		return err // none (not found): refused
	}
	fence := desired.RolloutFence{RolloutID: before.ID, Revision: before.Revision, Wave: before.Wave + 1, Version: before.Version}
	stale := before.InFlight == nil // a rollout that ended is never in flight again
	if !stale && r.IntN(2) == 0 {
		// The version or wave before (both only grow), or the revision
		// before (a rollout's is fixed).
		switch {
		case before.Version >= 2 && r.IntN(2) == 0:
			fence.Version, stale = before.Version-1, true
		case before.Wave >= 1:
			fence.Wave, stale = before.Wave, true
		case before.Revision >= 2:
			fence.Revision, stale = before.Revision-1, true
		}
	}
	action := draw(r, []string{desired.RolloutPromote, desired.RolloutAbort, desired.RolloutPause, desired.RolloutResume})
	what := fmt.Sprintf("%s of %s's rollout %d (revision %d, %s at wave %d, version %d) fenced with revision %d, wave %d, version %d",
		action, id, before.ID, before.Revision, before.State, before.Wave+1, before.Version, fence.Revision, fence.Wave, fence.Version)
	_, err = s.ControlRollout(ctx, id, action, fence)
	switch {
	case !stale:
		return err
	case err == nil:
		return &violation{fmt.Sprintf("a stale fence acted: %s", what)}
	case errors.Is(err, desired.ErrNotFound) || store.IsConflict(err):
		return err // the deployment deleted meanwhile; a deadlock
	case !errors.Is(err, desired.ErrRolloutMoved):
		return &violation{fmt.Sprintf("a stale fence was refused for another reason than the rollout's: %s: %v", what, err)}
	}
	after, rerr := c.Rollout.Get(ctx, before.ID)
	if rerr == nil && after.Version == before.Version && (after.State != before.State || after.Wave != before.Wave ||
		after.Reason != before.Reason || !reflect.DeepEqual(after.Regions, before.Regions) || (after.InFlight == nil) != (before.InFlight == nil)) {
		return &violation{fmt.Sprintf("a refused stale fence changed its rollout: %s: refused (%v), yet it reads back %s at wave %d, %q, at the same version",
			what, err, after.State, after.Wave+1, after.Reason)}
	}
	return &staleRefused{err}
}

// staleRefused is a stale fence's refusal, as it must be: the worker
// counts it (Report.StaleFences).
type staleRefused struct{ err error }

func (s *staleRefused) Error() string { return s.err.Error() }
func (s *staleRefused) Unwrap() error { return s.err }

// violation is a store call that broke a rule the workload knows (a stale
// fence that acted): the worker reports it with the feed's violations.
type violation struct{ what string }

func (v *violation) Error() string { return v.what }
