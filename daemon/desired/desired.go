package desired

import (
	"time"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"entgo.io/ent/dialect/sql/sqlgraph"

	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/ent/ciliumnetworkpolicy"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/jsontype"
	"github.com/deploysync/deploysync/ent/region"
	"github.com/deploysync/deploysync/ent/sentinel"
	"github.com/deploysync/deploysync/internal/limits"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/internal/validate"
)

// Store changes desired state.
type Store struct {
	client *ent.Client
	// reserved are the namespaces no workspace's environment may have
	// (see checkPair).
	reserved naming.Reserved
	// windowOffset moves the time freeze windows are judged at (see
	// WithWindowClock).
	windowOffset time.Duration
}

// Option configures a Store.
type Option func(*Store)

// WithReserved sets the namespaces no pair may have; without it, those
// always reserved (the zero naming.Reserved).
func WithReserved(r naming.Reserved) Option {
	return func(s *Store) { s.reserved = r }
}

// WithWindowClock judges freeze windows as if the database's clock read
// offset later: a dev stack or a rehearsal sees its recurring windows
// close and open when it chooses. Bakes, deadlines and agents' liveness
// keep the database's own time. Never set in production.
func WithWindowClock(offset time.Duration) Option {
	return func(s *Store) { s.windowOffset = offset }
}

// WindowOffset is the offset freeze windows are judged at (WithWindowClock).
func (s *Store) WindowOffset() time.Duration { return s.windowOffset }

// New returns a Store writing through client (from store.Open).
func New(client *ent.Client, opts ...Option) *Store {
	s := &Store{client: client}
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// DeploymentSpec is what to run.
type DeploymentSpec struct {
	ID            string
	WorkspaceID   string
	EnvironmentID string
	Image         string
	CPUMillicores int
	MemoryMiB     int
	Port          int // 0 means the default, 8080
	Command       []string
	Env           map[string]string
}

// MaxDeployRegions bounds the regions of one Deploy. A region is a
// cluster with its own agent; the largest clouds have a few dozen regions
// each, and a deployment spread over more than a hundred clusters is not
// one operator call. The bound keeps a deploy one short transaction (a
// topology and a change row per region) and its statements far below the
// database's 65,535 placeholders.
const MaxDeployRegions = 100

// Deploy creates a deployment and its topology in every region (the source
// design's createTopologies), all in one transaction: agents see all of it
// or none. Deploys run one at a time (oneDeployAtATime).
func (s *Store) Deploy(ctx context.Context, spec DeploymentSpec, regions []string, replicas int) error {
	if len(regions) == 0 {
		return fmt.Errorf("regions: %w: at least one region is required", ErrInvalid)
	}
	if len(regions) > MaxDeployRegions {
		return fmt.Errorf("regions: %w: at most %d regions per deploy, got %d", ErrInvalid, MaxDeployRegions, len(regions))
	}
	if i := firstDuplicate(regions); i >= 0 {
		return fmt.Errorf("regions: %w: %q listed twice", ErrInvalid, regions[i])
	}
	if err := validate.Replicas(replicas); err != nil {
		return fmt.Errorf("replicas: %w: %v", ErrInvalid, err)
	}
	if !naming.DeploymentIDFree(spec.ID) {
		return fmt.Errorf("deployment_id: %w: %q starts like a sentinel's objects (%q); pick another ID", ErrInvalid, spec.ID, naming.Sentinel("<id>"))
	}
	if err := checkCommandAndEnv(spec); err != nil {
		return err
	}
	if err := s.checkPair(spec.WorkspaceID, spec.EnvironmentID); err != nil {
		return err
	}
	return invalidField(store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		if err := oneDeployAtATime(ctx, tx); err != nil {
			return err
		}
		if err := knownRegions(ctx, tx, regions...); err != nil {
			return err
		}
		// Rows of an earlier deployment with this ID may be there.
		before, err := lastChange(ctx, tx, spec.ID)
		if err != nil {
			return err
		}
		create := tx.Deployment.Create().
			SetID(spec.ID).
			SetWorkspaceID(spec.WorkspaceID).
			SetEnvironmentID(spec.EnvironmentID).
			SetImage(spec.Image).
			SetCPUMillicores(spec.CPUMillicores).
			SetMemoryMib(spec.MemoryMiB).
			SetCommand(spec.Command).
			SetEnv(spec.Env)
		if spec.Port != 0 {
			create.SetPort(spec.Port)
		}
		if err := create.Exec(ctx); err != nil {
			if ent.IsConstraintError(err) {
				return fmt.Errorf("deployment %q: %w", spec.ID, ErrAlreadyExists)
			}
			return err
		}
		// The first wave's regions (all, for an immediate strategy) get
		// the spec with their topology; the others run nothing until
		// the rollout reaches them.
		dep, err := tx.Deployment.Get(ctx, spec.ID)
		if err != nil {
			return err
		}
		strategy, err := strategyFor(ctx, tx, dep)
		if err != nil {
			return err
		}
		waves, err := planWaves(strategy, spec.ID, regions)
		if err != nil {
			return err
		}
		first := regions
		if len(waves) > 0 {
			first = waves[0].Regions
		}
		hold, err := s.firstWaveHold(ctx, tx, dep, waveRegions(waves, regions), len(waves) == 0)
		if err != nil {
			return err
		}
		switch {
		case hold.Held() && len(waves) == 0:
			return immediateHeld(spec.ID, hold)
		case hold.Held():
			first = nil // queued: every region runs nothing until it starts
		}
		to := storedSpec(specOf(dep))
		revision, err := nextRevision(ctx, tx, spec.ID)
		if err != nil {
			return err
		}
		topologies := make([]*ent.DeploymentTopologyCreate, 0, len(regions))
		namespace := naming.Namespace(dep.WorkspaceID, dep.EnvironmentID)
		for _, r := range regions {
			create := tx.DeploymentTopology.Create().SetDeploymentID(spec.ID).SetRegion(r).SetReplicas(replicas).
				SetNamespace(namespace)
			if slices.Contains(first, r) {
				create.SetImage(to.Image).SetCPUMillicores(to.CPUMillicores).SetMemoryMib(to.MemoryMiB).SetPort(to.Port).
					SetCommand(to.Command).SetEnv(to.Env).SetSpecHash(to.Hash).SetSpecRevision(revision)
			}
			topologies = append(topologies, create)
		}
		if err := tx.DeploymentTopology.CreateBulk(topologies...).Exec(ctx); err != nil {
			return err
		}
		if len(waves) > 0 {
			strategy.Waves = waves
			if err := beginRollout(ctx, tx, spec.ID, revision, jsontype.Spec{}, 0, to, strategy, regions, before, hold.Held()); err != nil {
				return err
			}
		}
		if _, err := writeRevision(ctx, tx, spec.ID, ActionDeploy, before); err != nil {
			return err
		}
		return claimNamespace(ctx, tx, spec.WorkspaceID, spec.EnvironmentID)
	}))
}

// oneDeployAtATime makes concurrent Deploys run one after the other, by
// locking the first region's row (the same row for every deploy) until the
// transaction ends; the other regions' rows stay free for the admission of
// agents, pauses and resyncs. Run together, they deadlock: the change
// feed's locking read of a new deployment's topologies (ent/changefeed,
// Deployment) gap-locks the range of the deployment_topology index
// (deployment_id, region) where the new ID falls; new IDs often share one
// range (on an empty table, all do), and each deploy's topology insert
// then waits for the others' gap locks, whatever their regions. A deploy
// is one short transaction, and region rows change rarely (pause, resync,
// a new agent token's region), so the queue costs little.
func oneDeployAtATime(ctx context.Context, tx *ent.Tx) error {
	_, err := tx.Region.Query().Order(region.ByID()).Limit(1).ForUpdate().IDs(ctx)
	return err
}

// Limits on a deployment's command and environment.
const (
	MaxCommandArgs = 64
	MaxEnvVars     = 256
)

// checkCommandAndEnv checks what the schema cannot: each argument and
// variable can reach a process, and together with the image they fit
// limits.MaxResourceBytes as stored, so every stream event carrying the
// deployment fits a message. (The event is no bigger than the stored JSON
// plus a few bytes of framing per argument and variable.)
func checkCommandAndEnv(spec DeploymentSpec) error {
	// Counted as well as sized: every variable becomes an object of its
	// own in the Pod spec, so 1 MiB of tiny variables would make a
	// StatefulSet several times that size, more than etcd takes.
	if n := len(spec.Command); n > MaxCommandArgs {
		return fmt.Errorf("command: %w: at most %d arguments, got %d", ErrInvalid, MaxCommandArgs, n)
	}
	if n := len(spec.Env); n > MaxEnvVars {
		return fmt.Errorf("env: %w: at most %d variables, got %d", ErrInvalid, MaxEnvVars, n)
	}
	for i, arg := range spec.Command {
		if err := validate.Arg(arg); err != nil {
			return fmt.Errorf("command: %w: argument %d: %v", ErrInvalid, i, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(spec.Env)) {
		err := validate.EnvName(name)
		if err == nil {
			err = validate.EnvValue(name, spec.Env[name])
		}
		if err != nil {
			return fmt.Errorf("env: %w: %v", ErrInvalid, err)
		}
	}
	// Both encode: a []string and a map[string]string of valid UTF-8.
	command, _ := json.Marshal(spec.Command)
	env, _ := json.Marshal(spec.Env)
	if total := len(spec.Image) + len(command) + len(env); total > limits.MaxResourceBytes {
		field := "command"
		if len(env) > len(command) {
			field = "env"
		}
		return fmt.Errorf("%s: %w: image, command and env are %d bytes as stored (command %d, env %d), at most %d allowed",
			field, ErrInvalid, total, len(command), len(env), limits.MaxResourceBytes)
	}
	return nil
}

// Status is a topology's desired status.
type Status = deploymenttopology.DesiredStatus

// Desired statuses.
const (
	Running = deploymenttopology.DesiredStatusRunning
	Stopped = deploymenttopology.DesiredStatusStopped
)

// SetDesiredStatus starts or stops a deployment in one region, or in all of
// its regions when region is empty (ChangeDesiredState in the source
// design).
func (s *Store) SetDesiredStatus(ctx context.Context, deploymentID, region string, status Status) error {
	if err := deploymenttopology.DesiredStatusValidator(status); err != nil {
		return fmt.Errorf("desired_status: %w: %v", ErrInvalid, err)
	}
	if err := checkID("deployment_id", deploymentID); err != nil {
		return err
	}
	action := ActionStart
	if status == Stopped {
		action = ActionStop
	}
	return s.updateTopologies(ctx, deploymentID, region, action, func(u *ent.DeploymentTopologyUpdate) {
		u.SetDesiredStatus(status)
	})
}

// Scale sets a deployment's replicas in one region, or in all of its
// regions when region is empty.
func (s *Store) Scale(ctx context.Context, deploymentID, region string, replicas int) error {
	if err := checkID("deployment_id", deploymentID); err != nil {
		return err
	}
	if err := validate.Replicas(replicas); err != nil {
		return fmt.Errorf("replicas: %w: %v", ErrInvalid, err)
	}
	return s.updateTopologies(ctx, deploymentID, region, ActionScale, func(u *ent.DeploymentTopologyUpdate) {
		u.SetReplicas(replicas)
	})
}

// updateTopologies changes the deployment's topology in region (all when
// "") and records the revision of action.
func (s *Store) updateTopologies(ctx context.Context, deploymentID, region, action string, set func(*ent.DeploymentTopologyUpdate)) error {
	_, err := s.revise(ctx, deploymentID, action, func(tx *ent.Tx) (bool, error) {
		update := tx.DeploymentTopology.Update().Where(deploymenttopology.DeploymentID(deploymentID))
		if region != "" {
			if err := knownRegions(ctx, tx, region); err != nil {
				return false, err
			}
			update.Where(deploymenttopology.Region(region))
		}
		set(update)
		n, err := update.Save(ctx)
		if err != nil {
			return false, err
		}
		if n == 0 {
			if region == "" {
				return false, fmt.Errorf("deployment %q: %w", deploymentID, ErrNotFound)
			}
			return false, fmt.Errorf("deployment %q in region %q: %w", deploymentID, region, ErrNotFound)
		}
		return false, nil
	})
	return err
}

// DeleteDeployment removes a deployment with its topologies, policies and
// instances; agents get a delete for each region it ran in.
func (s *Store) DeleteDeployment(ctx context.Context, deploymentID string) error {
	if err := checkID("deployment_id", deploymentID); err != nil {
		return err
	}
	return store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		n, err := tx.Deployment.Delete().Where(deployment.ID(deploymentID)).Exec(ctx)
		if err == nil && n == 0 {
			err = fmt.Errorf("deployment %q: %w", deploymentID, ErrNotFound)
		}
		return err
	})
}

// SentinelSpec is an environment's sentinel in one region.
type SentinelSpec struct {
	ID            string // used only when the sentinel is new
	WorkspaceID   string
	EnvironmentID string
	Region        string
	Image         string
	Replicas      int
	CPUMillicores int
	MemoryMiB     int
	Stopped       bool
}

// EnsureSentinel creates the environment's sentinel in the region or
// updates its desired fields, leaving the reported actual state alone. It
// returns the sentinel's ID.
//
// A sentinel's stored size is its IDs and image, all bounded by their
// validators (validate.MaxIDLength, validate.MaxImageLength) to well under
// limits.MaxResourceBytes, so it needs no size check of its own.
func (s *Store) EnsureSentinel(ctx context.Context, spec SentinelSpec) (id string, err error) {
	if err := s.checkPair(spec.WorkspaceID, spec.EnvironmentID); err != nil {
		return "", err
	}
	state := sentinel.DesiredStateRunning
	if spec.Stopped {
		state = sentinel.DesiredStateStopped
	}
	err = store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		if err := knownRegions(ctx, tx, spec.Region); err != nil {
			return err
		}
		err := tx.Sentinel.Create().
			SetID(spec.ID).
			SetWorkspaceID(spec.WorkspaceID).
			SetEnvironmentID(spec.EnvironmentID).
			SetRegion(spec.Region).
			SetImage(spec.Image).
			SetReplicas(spec.Replicas).
			SetCPUMillicores(spec.CPUMillicores).
			SetMemoryMib(spec.MemoryMiB).
			SetDesiredState(state).
			OnConflictColumns(sentinel.FieldEnvironmentID, sentinel.FieldRegion).
			Update(func(u *ent.SentinelUpsert) {
				u.UpdateImage().UpdateReplicas().UpdateCPUMillicores().UpdateMemoryMib().UpdateDesiredState().UpdateUpdatedAt()
			}).
			Exec(ctx)
		if errors.Is(err, changefeed.ErrIDInUse) {
			return fmt.Errorf("sentinel_id %q: %w: %v", spec.ID, ErrAlreadyExists, err)
		}
		if err != nil {
			return err
		}
		row, err := tx.Sentinel.Query().
			Where(sentinel.EnvironmentID(spec.EnvironmentID), sentinel.Region(spec.Region)).
			Only(ctx)
		if err != nil {
			return err
		}
		if row.WorkspaceID != spec.WorkspaceID {
			return fmt.Errorf("workspace_id: %w: the sentinel of environment %s in %s belongs to workspace %s", ErrConflict, spec.EnvironmentID, spec.Region, row.WorkspaceID)
		}
		id = row.ID
		return claimNamespace(ctx, tx, spec.WorkspaceID, spec.EnvironmentID)
	})
	return id, invalidField(err)
}

// DeleteSentinel removes a sentinel; its agent deletes the workload.
func (s *Store) DeleteSentinel(ctx context.Context, id string) error {
	if err := checkID("sentinel_id", id); err != nil {
		return err
	}
	return store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		err := tx.Sentinel.DeleteOneID(id).Exec(ctx)
		if ent.IsNotFound(err) {
			return fmt.Errorf("sentinel %q: %w", id, ErrNotFound)
		}
		return err
	})
}

// PolicySpec is a Cilium network policy in one region, owned by a
// deployment (DeploymentID set) or by its environment.
type PolicySpec struct {
	ID            string // used only when the policy is new
	WorkspaceID   string
	EnvironmentID string
	DeploymentID  string
	Region        string
	Name          string
	Spec          map[string]any
}

// EnsureCiliumPolicy creates or updates the policy named Name in the
// environment and region, and returns its ID.
func (s *Store) EnsureCiliumPolicy(ctx context.Context, spec PolicySpec) (id string, err error) {
	if err := s.checkPair(spec.WorkspaceID, spec.EnvironmentID); err != nil {
		return "", err
	}
	if err := validate.CiliumPolicySpec(spec.Spec); err != nil {
		return "", fmt.Errorf("spec: %w: %v", ErrInvalid, err)
	}
	err = store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		if err := knownRegions(ctx, tx, spec.Region); err != nil {
			return err
		}
		create := tx.CiliumNetworkPolicy.Create().
			SetID(spec.ID).
			SetWorkspaceID(spec.WorkspaceID).
			SetEnvironmentID(spec.EnvironmentID).
			SetRegion(spec.Region).
			SetName(spec.Name).
			SetSpec(spec.Spec)
		if spec.DeploymentID != "" {
			create.SetDeploymentID(spec.DeploymentID)
		}
		err := create.
			OnConflictColumns(ciliumnetworkpolicy.FieldRegion, ciliumnetworkpolicy.FieldEnvironmentID, ciliumnetworkpolicy.FieldName).
			Update(func(u *ent.CiliumNetworkPolicyUpsert) { u.UpdateSpec().UpdateUpdatedAt() }).
			Exec(ctx)
		switch {
		case errors.Is(err, changefeed.ErrIDInUse):
			return fmt.Errorf("policy_id %q: %w: %v", spec.ID, ErrAlreadyExists, err)
		case sqlgraph.IsForeignKeyConstraintError(err): // the deployment_id foreign key; a duplicate key is not "not found"
			return fmt.Errorf("deployment_id: deployment %q: %w", spec.DeploymentID, ErrNotFound)
		case err != nil:
			return err
		}
		row, err := tx.CiliumNetworkPolicy.Query().
			Where(ciliumnetworkpolicy.Region(spec.Region), ciliumnetworkpolicy.EnvironmentID(spec.EnvironmentID), ciliumnetworkpolicy.Name(spec.Name)).
			Only(ctx)
		if err != nil {
			return err
		}
		// The owner is fixed at creation: the database cascades a
		// deployment's policies away with it, so a silent change of owner
		// would delete the policy with the wrong deployment.
		if owner := deref(row.DeploymentID); owner != spec.DeploymentID || row.WorkspaceID != spec.WorkspaceID {
			return fmt.Errorf("deployment_id: %w: policy %q in %s belongs to deployment %q of workspace %s; delete it to give it another owner", ErrConflict, spec.Name, spec.Region, owner, row.WorkspaceID)
		}
		if spec.DeploymentID != "" {
			if err := ownerRunsThere(ctx, tx, spec); err != nil {
				return err
			}
		}
		id = row.ID
		return claimNamespace(ctx, tx, spec.WorkspaceID, spec.EnvironmentID)
	})
	return id, invalidField(err)
}

// ownerRunsThere checks that the deployment owning a policy runs where the
// policy goes: in its workspace and environment (so, its namespace) and in
// its region. The stream hands the owner's ID to the policy's region and
// namespace; an owner from elsewhere would put a deployment's ID into a
// stream or namespace that has nothing of it. The share locks keep the
// deployment and its topology there until this transaction ends (the API
// removes a topology only with its deployment, whose delete cascades the
// policy away too).
func ownerRunsThere(ctx context.Context, tx *ent.Tx, spec PolicySpec) error {
	owner, err := tx.Deployment.Query().Where(deployment.ID(spec.DeploymentID)).ForShare(changefeed.ShareLock).Only(ctx)
	if err != nil {
		return err
	}
	if owner.WorkspaceID != spec.WorkspaceID || owner.EnvironmentID != spec.EnvironmentID {
		return fmt.Errorf("deployment_id: %w: deployment %q is workspace %s environment %s's, not the policy's workspace %s environment %s",
			ErrConflict, owner.ID, owner.WorkspaceID, owner.EnvironmentID, spec.WorkspaceID, spec.EnvironmentID)
	}
	there, err := tx.DeploymentTopology.Query().
		Where(deploymenttopology.DeploymentID(spec.DeploymentID), deploymenttopology.Region(spec.Region)).
		ForShare(changefeed.ShareLock).
		IDs(ctx)
	if err != nil {
		return err
	}
	if len(there) == 0 {
		return fmt.Errorf("deployment_id: %w: deployment %q does not run in region %s, so it cannot own a policy there (leave deployment_id empty for a policy of the environment)",
			ErrConflict, spec.DeploymentID, spec.Region)
	}
	return nil
}

// invalidField turns an Ent validation error into ErrInvalid named by its
// field, the way this package names bad input, so callers need to know one
// error for it.
func invalidField(err error) error {
	var verr *ent.ValidationError
	if !errors.As(err, &verr) {
		return err
	}
	reason := verr.Unwrap() // `ent: validator failed for field "Type.field": <reason>`
	if inner := errors.Unwrap(reason); inner != nil {
		reason = inner
	}
	return fmt.Errorf("%s: %w: %v", verr.Name, ErrInvalid, reason)
}

// checkID fails with ErrInvalid naming field unless id is a well-formed
// ID: a malformed one is the caller's mistake, not a resource that is
// missing.
func checkID(field, id string) error {
	if err := validate.ID(id); err != nil {
		return fmt.Errorf("%s: %w: %v", field, ErrInvalid, err)
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// DeleteCiliumPolicy removes a policy; its agent deletes the object.
func (s *Store) DeleteCiliumPolicy(ctx context.Context, id string) error {
	if err := checkID("policy_id", id); err != nil {
		return err
	}
	return store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		err := tx.CiliumNetworkPolicy.DeleteOneID(id).Exec(ctx)
		if ent.IsNotFound(err) {
			return fmt.Errorf("policy %q: %w", id, ErrNotFound)
		}
		return err
	})
}

// EnsureRegion registers a region so desired state may target it.
func (s *Store) EnsureRegion(ctx context.Context, name string) error {
	return RegisterRegion(ctx, s.client, name)
}

// RegisterRegion registers a region (no-op if known) through client, which
// may be a transaction's (tx.Client()).
func RegisterRegion(ctx context.Context, client *ent.Client, name string) error {
	if err := validate.Region(name); err != nil {
		return fmt.Errorf("region: %w: %v", ErrInvalid, err)
	}
	return client.Region.Create().SetID(name).OnConflict().Ignore().Exec(ctx)
}

// knownRegions fails with ErrUnknownRegion naming the first region that is
// not registered.
func knownRegions(ctx context.Context, tx *ent.Tx, regions ...string) error {
	for _, r := range regions {
		if err := validate.Region(r); err != nil {
			return fmt.Errorf("region: %w: %v", ErrInvalid, err)
		}
	}
	known, err := tx.Region.Query().Where(region.IDIn(regions...)).IDs(ctx)
	if err != nil {
		return err
	}
	for _, r := range regions {
		if !slices.Contains(known, r) {
			return fmt.Errorf("region %q: %w", r, ErrUnknownRegion)
		}
	}
	return nil
}

func firstDuplicate(s []string) int {
	seen := make(map[string]bool, len(s))
	for i, v := range s {
		if seen[v] {
			return i
		}
		seen[v] = true
	}
	return -1
}
