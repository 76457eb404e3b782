package cluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"
	"unicode"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/stream"
	"github.com/deploysync/deploysync/daemon/tailer"
	"github.com/deploysync/deploysync/ent"
	entagent "github.com/deploysync/deploysync/ent/agent"
	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/instance"
	"github.com/deploysync/deploysync/ent/sentinel"
	"github.com/deploysync/deploysync/internal/limits"
	"github.com/deploysync/deploysync/internal/validate"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Limits on one report, so a confused agent cannot make ctrld build a huge
// transaction.
const (
	maxDeploymentsPerReport = 5000
	maxInstancesPerReport   = 1000
	maxSentinelsPerReport   = 5000
)

// Times an agent reports (last_full_sync) must lie in [earliestTime,
// ctrld's now + maxClockSkew]: nothing synced before 2000, and an agent's
// clock may run a little ahead of ctrld's, but a time further ahead is a
// broken clock or a made-up value, and would show as a sync that has not
// happened yet.
var earliestTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

const maxClockSkew = 5 * time.Minute

// Watcher serves one watch stream (stream.Streamer; benchmarks swap in the
// seed algorithm to compare).
type Watcher interface {
	Serve(ctx context.Context, req stream.Request, send stream.Send) error
}

// Service implements ctrlv1.ClusterServiceServer.
type Service struct {
	ctrlv1.UnimplementedClusterServiceServer
	client   *ent.Client
	db       *sql.DB // for the reads Ent cannot express (changelog.NewestVersion)
	streamer Watcher
	cfg      Config
	log      *slog.Logger
	// admissions are the new agent identities waiting to be decided.
	admissions admissions
	// checked is what SyncChecks assigns from.
	checked checkedRollouts
}

// New returns the cluster service tuned by cfg (zero fields take Defaults).
func New(client *ent.Client, db *sql.DB, streamer Watcher, cfg Config, log *slog.Logger) *Service {
	cfg.defaults()
	return &Service{client: client, db: db, streamer: streamer, cfg: cfg, log: log}
}

// WatchDeploymentChanges implements ctrlv1.ClusterServiceServer.
func (s *Service) WatchDeploymentChanges(req *ctrlv1.WatchDeploymentChangesRequest, srv ctrlv1.ClusterService_WatchDeploymentChangesServer) error {
	ctx := srv.Context()
	if err := checkRegion(ctx, req.GetRegion()); err != nil {
		return err
	}
	identity := req.GetAgentIdentity()
	if err := checkIdentity(identity); err != nil {
		return err
	}
	err := s.streamer.Serve(ctx, stream.Request{Region: req.GetRegion(), Identity: identity, Cursor: req.GetVersionLastSeen(),
		Batches: req.GetBatches(),
		// After the stream's own limits, before it records the agent's
		// connection: a refused stream leaves no record.
		AdmitAgent: func(ctx context.Context, connectedTo string, since time.Time) error {
			return s.admitAgent(ctx, req.GetRegion(), identity, &connection{to: connectedTo, since: since})
		},
		// Say so now (the response headers), for a paused region sends
		// nothing for as long as the pause lasts, and the agent must not
		// take that silence for a connection that failed.
		Accepted: func() error { return srv.SendHeader(metadata.Pairs(rpc.AcceptedHeader, "1")) },
	}, srv.Send)
	switch {
	case err == nil, ctx.Err() != nil:
		return nil
	case errors.Is(err, stream.ErrUnknownRegion):
		return status.Error(codes.InvalidArgument, "region: "+err.Error())
	case errors.Is(err, tailer.ErrSlowSubscriber), errors.Is(err, tailer.ErrStopped), errors.Is(err, tailer.ErrRestarted),
		errors.Is(err, tailer.ErrDatabaseUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case status.Code(err) != codes.Unknown:
		return err // the client went away mid-send, etc.
	}
	s.log.Error("cluster: watch stream failed", "region", req.GetRegion(), "agent", identity, "err", err)
	return status.Error(codes.Unavailable, "stream failed; reconnect from the last bookmark")
}

// ReportDeploymentStatus implements ctrlv1.ClusterServiceServer: per listed
// deployment, the reported instances replace the stored ones, and the
// topology's actual status follows.
func (s *Service) ReportDeploymentStatus(ctx context.Context, req *ctrlv1.ReportDeploymentStatusRequest) (*ctrlv1.ReportDeploymentStatusResponse, error) {
	region := req.GetRegion()
	if err := checkRegion(ctx, region); err != nil {
		return nil, err
	}
	if len(req.GetDeployments()) > maxDeploymentsPerReport {
		return nil, status.Errorf(codes.InvalidArgument, "deployments: at most %d per report", maxDeploymentsPerReport)
	}
	ids := make([]string, 0, len(req.GetDeployments()))
	listed := make(map[string]int, len(req.GetDeployments()))
	for i, d := range req.GetDeployments() {
		err := checkDeploymentStatus(d)
		if first, twice := listed[d.GetDeploymentId()]; err == nil && twice {
			// Each copy would replace the instances again, under the
			// deployment's lock: one report, many times the work.
			err = fmt.Errorf("deployment_id: %s is listed twice (also deployments[%d])", validate.Quote(d.GetDeploymentId()), first)
		}
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "deployments[%d].%v", i, err)
		}
		listed[d.GetDeploymentId()] = i
		ids = append(ids, d.GetDeploymentId())
	}
	err := store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		actual := changefeed.ActualState(ctx)
		// An agent speaks for its own cluster: only deployments with a
		// topology in its region take its report. The others (deleted
		// meanwhile, or never desired here) are ignored rather than
		// refused, so an agent whose desired state just changed does not
		// lose the rest of its report. This read locks nothing: it waits
		// for no writer, and the lock order below stays as it was.
		topologies, err := tx.DeploymentTopology.Query().
			Where(deploymenttopology.Region(region), deploymenttopology.DeploymentIDIn(ids...)).All(ctx)
		if err != nil {
			return err
		}
		here := map[string]*ent.DeploymentTopology{}
		for _, t := range topologies {
			here[t.DeploymentID] = t
		}
		// Then shared locks on those deployments, before any lock on their
		// children (instances, the topology): every writer of a
		// deployment's children locks the deployment first
		// (ent/changefeed), so the same order here cannot deadlock with
		// them, and a deployment deleted from now on waits for this report
		// rather than failing its instance inserts' foreign keys. Only the
		// region's deployments are locked: a report neither waits for nor
		// holds up writers of deployments it does not touch (another
		// region's). One deleted since the read above is not returned,
		// and is skipped.
		locked, err := shareLockDeployments(ctx, tx, slices.Sorted(maps.Keys(here)))
		if err != nil {
			return err
		}
		takes := make(map[string]*ent.DeploymentTopology, len(locked))
		for _, id := range locked {
			takes[id] = here[id]
		}
		for _, d := range req.GetDeployments() {
			if topo := takes[d.GetDeploymentId()]; topo != nil {
				if err := s.replaceInstances(actual, tx, topo, d); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, internal(s.log, "report deployment status", err)
	}
	if s.cfg.Reported != nil {
		s.cfg.Reported()
	}
	return &ctrlv1.ReportDeploymentStatusResponse{}, nil
}

// lockBatch bounds the lookups of one shareLockDeployments statement: the
// database parses a union of thousands far more slowly than many of a
// hundred.
const lockBatch = 100

// shareLockDeployments takes shared locks on the deployments ids, in the
// order given (callers sort them: key order, in which locking scans take
// theirs), and returns those that exist. It locks those rows and no other:
// each id is a point lookup of its own on the primary key, which the
// database always plans as such and which locks only the row it finds. A
// locking IN (...) read would not do: it is planned by cost, on a small
// table as a scan of the workflow status index (which holds every id), and
// a locking scan locks every entry it passes, as a range read locks the
// entry after its range; other regions' deployment deletes, status changes
// and inserts would wait for the report. Ent cannot say this, hence the
// SQL.
func shareLockDeployments(ctx context.Context, tx *ent.Tx, ids []string) ([]string, error) {
	const lookup = "(SELECT id FROM deployments WHERE id = ? LOCK IN SHARE MODE)"
	var locked []string
	for batch := range slices.Chunk(ids, lockBatch) {
		args := make([]any, len(batch))
		for i, id := range batch {
			args[i] = id
		}
		rows, err := tx.QueryContext(ctx, strings.Join(slices.Repeat([]string{lookup}, len(batch)), " UNION ALL "), args...)
		if err != nil {
			return nil, fmt.Errorf("lock deployments: %w", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("lock deployments: %w", err)
			}
			locked = append(locked, id)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return nil, fmt.Errorf("lock deployments: %w", err)
		}
	}
	return locked, nil
}

// checkDeploymentStatus validates one deployment's report; the error
// starts with the field's path below it.
func checkDeploymentStatus(d *ctrlv1.DeploymentStatus) error {
	if err := validate.ID(d.GetDeploymentId()); err != nil {
		return fmt.Errorf("deployment_id: %w", err)
	}
	if len(d.GetInstances()) > maxInstancesPerReport {
		return fmt.Errorf("instances: at most %d", maxInstancesPerReport)
	}
	pods := make(map[string]int, len(d.GetInstances()))
	for j, in := range d.GetInstances() {
		if err := validate.PodName(in.GetPodName()); err != nil {
			return fmt.Errorf("instances[%d].pod_name: %w", j, err)
		}
		if first, twice := pods[in.GetPodName()]; twice {
			return fmt.Errorf("instances[%d].pod_name: %s is listed twice (also instances[%d])", j, validate.Quote(in.GetPodName()), first)
		}
		pods[in.GetPodName()] = j
		if err := checkAddress(in.GetAddress()); err != nil {
			return fmt.Errorf("instances[%d].address: %w", j, err)
		}
		switch {
		case in.GetCpuMillicores() < 0:
			return fmt.Errorf("instances[%d].cpu_millicores: %d must not be negative", j, in.GetCpuMillicores())
		case in.GetMemoryMib() < 0:
			return fmt.Errorf("instances[%d].memory_mib: %d must not be negative", j, in.GetMemoryMib())
		case in.GetRestarts() < 0:
			return fmt.Errorf("instances[%d].restarts: %d must not be negative", j, in.GetRestarts())
		}
		if err := validate.SpecHash(in.GetSpecHash()); err != nil {
			return fmt.Errorf("instances[%d].spec_hash: %w", j, err)
		}
		if err := validate.InstanceReason(in.GetReason()); err != nil {
			return fmt.Errorf("instances[%d].reason: %w", j, err)
		}
	}
	return nil
}

// checkAddress checks an instance's address: a Pod's IP, or empty for a
// Pod that has none yet. A zone (fe80::1%eth0) is no Pod IP's either.
func checkAddress(address string) error {
	if address == "" {
		return nil
	}
	ip, err := netip.ParseAddr(address)
	switch {
	case err != nil:
		return fmt.Errorf("%s is not an IP address (a Pod's IP, or empty for a Pod that has none yet)", validate.Quote(address))
	case ip.Zone() != "":
		return fmt.Errorf("%s has a zone, which no Pod IP has", validate.Quote(address))
	}
	return nil
}

// replaceInstances stores d's instances in topo's region and moves topo's
// actual status to match.
func (s *Service) replaceInstances(ctx context.Context, tx *ent.Tx, topo *ent.DeploymentTopology, d *ctrlv1.DeploymentStatus) error {
	depID, region := topo.DeploymentID, topo.Region
	names := make([]string, 0, len(d.GetInstances()))
	upserts := make([]*ent.InstanceCreate, 0, len(d.GetInstances()))
	ready, failed := 0, false
	for _, in := range d.GetInstances() {
		names = append(names, in.GetPodName())
		if in.GetReady() && in.GetStatus() == ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING {
			ready++
		}
		failed = failed || in.GetStatus() == ctrlv1.InstanceStatus_INSTANCE_STATUS_FAILED
		upserts = append(upserts, tx.Instance.Create().
			SetDeploymentID(depID).SetRegion(region).SetPodName(in.GetPodName()).
			SetAddress(in.GetAddress()).SetStatus(instanceStatus(in.GetStatus())).SetReady(in.GetReady()).
			SetCPUMillicores(int(in.GetCpuMillicores())).SetMemoryMib(int(in.GetMemoryMib())).
			SetSpecHash(in.GetSpecHash()).SetReason(in.GetReason()).SetRestarts(in.GetRestarts()).
			// Free text from the container itself: kept (valid UTF-8,
			// clipped), never refused; views clean it for terminals.
			SetEvidence(validate.Text(in.GetEvidence(), limits.MaxEvidenceBytes)))
	}
	// One statement for the whole set, not one per Pod: agents report often.
	if len(upserts) > 0 {
		err := tx.Instance.CreateBulk(upserts...).
			OnConflictColumns(instance.FieldDeploymentID, instance.FieldRegion, instance.FieldPodName).
			UpdateNewValues().
			Exec(ctx)
		if err != nil {
			return fmt.Errorf("upsert instances of %s: %w", depID, err)
		}
	}
	if _, err := tx.Instance.Delete().
		Where(instance.DeploymentID(depID), instance.Region(region), instance.PodNameNotIn(names...)).
		Exec(ctx); err != nil {
		return fmt.Errorf("remove unreported instances: %w", err)
	}
	actual := deploymenttopology.ActualStatusProgressing
	switch {
	case topo.DesiredStatus == deploymenttopology.DesiredStatusStopped && len(names) == 0:
		actual = deploymenttopology.ActualStatusStopped
	case topo.DesiredStatus == deploymenttopology.DesiredStatusRunning && ready >= topo.Replicas:
		actual = deploymenttopology.ActualStatusRunning
	}
	if failed {
		actual = deploymenttopology.ActualStatusFailed
	}
	if actual == topo.ActualStatus {
		return nil
	}
	return tx.DeploymentTopology.UpdateOne(topo).SetActualStatus(actual).Exec(ctx)
}

func instanceStatus(s ctrlv1.InstanceStatus) instance.Status {
	switch s {
	case ctrlv1.InstanceStatus_INSTANCE_STATUS_PENDING:
		return instance.StatusPending
	case ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING:
		return instance.StatusRunning
	case ctrlv1.InstanceStatus_INSTANCE_STATUS_FAILED:
		return instance.StatusFailed
	}
	return instance.StatusUnknown
}

// ReportSentinelStatus implements ctrlv1.ClusterServiceServer.
func (s *Service) ReportSentinelStatus(ctx context.Context, req *ctrlv1.ReportSentinelStatusRequest) (*ctrlv1.ReportSentinelStatusResponse, error) {
	region := req.GetRegion()
	if err := checkRegion(ctx, region); err != nil {
		return nil, err
	}
	if len(req.GetSentinels()) > maxSentinelsPerReport {
		return nil, status.Errorf(codes.InvalidArgument, "sentinels: at most %d per report", maxSentinelsPerReport)
	}
	listed := make(map[string]int, len(req.GetSentinels()))
	for i, r := range req.GetSentinels() {
		if err := validate.ID(r.GetSentinelId()); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "sentinels[%d].sentinel_id: %v", i, err)
		}
		// A report says one status per sentinel, as it does one per
		// deployment and per resource: two would leave which one holds
		// to the order of the list.
		if first, twice := listed[r.GetSentinelId()]; twice {
			return nil, status.Errorf(codes.InvalidArgument, "sentinels[%d].sentinel_id: %s is listed twice (also sentinels[%d])",
				i, validate.Quote(r.GetSentinelId()), first)
		}
		listed[r.GetSentinelId()] = i
		if r.GetAvailableReplicas() < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "sentinels[%d].available_replicas: must not be negative", i)
		}
	}
	// One UPDATE per distinct status rather than per sentinel: a region's
	// sentinels mostly report the same few, and a report of thousands
	// would otherwise hold a connection for most of a second.
	type sentinelStatus struct {
		available int
		health    sentinel.Health
	}
	byStatus := map[sentinelStatus][]string{}
	for _, r := range req.GetSentinels() {
		health := sentinel.HealthUnknown
		switch r.GetHealth() {
		case ctrlv1.SentinelHealth_SENTINEL_HEALTH_HEALTHY:
			health = sentinel.HealthHealthy
		case ctrlv1.SentinelHealth_SENTINEL_HEALTH_UNHEALTHY:
			health = sentinel.HealthUnhealthy
		}
		st := sentinelStatus{int(r.GetAvailableReplicas()), health}
		byStatus[st] = append(byStatus[st], r.GetSentinelId())
	}
	err := store.WithTx(ctx, s.client, func(tx *ent.Tx) error {
		actual := changefeed.ActualState(ctx)
		for st, ids := range byStatus {
			err := tx.Sentinel.Update().
				Where(sentinel.IDIn(ids...), sentinel.Region(region)).
				SetAvailableReplicas(st.available).SetHealth(st.health).
				Exec(actual)
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, internal(s.log, "report sentinel status", err)
	}
	return &ctrlv1.ReportSentinelStatusResponse{}, nil
}

// ReportAgentStatus implements ctrlv1.ClusterServiceServer.
func (s *Service) ReportAgentStatus(ctx context.Context, req *ctrlv1.ReportAgentStatusRequest) (*ctrlv1.ReportAgentStatusResponse, error) {
	region := req.GetRegion()
	if err := checkRegion(ctx, region); err != nil {
		return nil, err
	}
	identity := req.GetAgentIdentity()
	if err := checkIdentity(identity); err != nil {
		return nil, err
	}
	if len(req.GetAgentVersion()) > 128 {
		return nil, status.Error(codes.InvalidArgument, "agent_version: at most 128 characters")
	}
	if i := strings.IndexFunc(req.GetAgentVersion(), func(r rune) bool { return !unicode.IsPrint(r) }); i >= 0 {
		return nil, status.Errorf(codes.InvalidArgument, "agent_version: %s has a control or format character at byte %d",
			validate.Quote(req.GetAgentVersion()), i)
	}
	now := time.Now().UTC()
	if err := checkTime(req.GetLastFullSync(), now); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "last_full_sync: %v", err)
	}
	if err := s.checkAcked(ctx, req.GetAckedVersion()); err != nil {
		return nil, err
	}
	update := s.client.Agent.Update().Where(entagent.Region(region), entagent.Identity(identity)).
		SetAckedCursor(req.GetAckedVersion()).
		SetVersion(req.GetAgentVersion()).SetLastError(validate.Clip(req.GetLastError(), limits.MaxErrorBytes)).
		SetLastFullSyncError(validate.Clip(req.GetLastFullSyncError(), limits.MaxErrorBytes)).
		// The database's clock, as every replica ages it
		// (regionhealth.AgentSilence): a replica whose clock is ahead
		// must not read live agents as silent, nor one behind read a
		// frozen agent as alive.
		Modify(func(u *entsql.UpdateBuilder) { u.Set(entagent.FieldLastHeartbeat, entsql.Expr("NOW(6)")) })
	if ts := req.GetLastFullSync(); ts != nil {
		update.SetLastFullSync(ts.AsTime().UTC())
	}
	// A known agent's heartbeat is this one statement (the heartbeat time
	// always changes, so a record that exists is always counted). Only a
	// new identity goes through admission, which writes its record. The
	// statement's locks on the agents' index can deadlock with another
	// replica's admission inserting records of the region: the database
	// rolls it back, and it runs again.
	var n int
	save := func() (err error) {
		n, err = update.Save(ctx)
		return err
	}
	err := store.RetryConflict(ctx, save)
	if err == nil && n == 0 {
		switch err := s.admitAgent(ctx, region, identity, nil); {
		case errors.Is(err, stream.ErrUnknownRegion):
			// Nothing to record: a region is registered before its
			// tokens are made, so only one removed since gets here.
			return &ctrlv1.ReportAgentStatusResponse{}, nil
		case err != nil:
			return nil, err
		}
		err = store.RetryConflict(ctx, save)
	}
	if err != nil {
		return nil, internal(s.log, "report agent status", err)
	}
	// A heartbeat may end a bake: it says the agent's Pods are reported
	// up to now (daemon/rollout).
	if s.cfg.Reported != nil {
		s.cfg.Reported()
	}
	return &ctrlv1.ReportAgentStatusResponse{}, nil
}

// checkAcked refuses an acked version that no ctrld can have sent: above
// the newest version this database issued, or at or above 2^63, which Ent
// reads back through a signed integer (every agent record listing would
// fail on it).
func (s *Service) checkAcked(ctx context.Context, acked uint64) error {
	if acked > math.MaxInt64 {
		return status.Errorf(codes.InvalidArgument, "acked_version: %d is not below 2^63", acked)
	}
	newest, err := changelog.NewestVersion(ctx, s.db)
	if err != nil {
		return internal(s.log, "report agent status", err)
	}
	if acked > newest {
		return status.Errorf(codes.InvalidArgument, "acked_version: %d is ahead of the newest version issued, %d", acked, newest)
	}
	return nil
}

// checkTime validates a time an agent reports (nil is "not reported").
func checkTime(ts *timestamppb.Timestamp, now time.Time) error {
	if ts == nil {
		return nil
	}
	if err := ts.CheckValid(); err != nil {
		return err
	}
	switch t := ts.AsTime(); {
	case t.Before(earliestTime):
		return fmt.Errorf("%s is before %s", t.Format(time.RFC3339), earliestTime.Format(time.RFC3339))
	case t.After(now.Add(maxClockSkew)):
		return fmt.Errorf("%s is more than %s ahead of ctrld's clock (%s)", t.Format(time.RFC3339), maxClockSkew, now.Format(time.RFC3339))
	}
	return nil
}

// checkIdentity validates an agent's identity (its Pod or host name, or
// what its --identity says): 1 to 253 printable characters without
// spaces. Not a DNS subdomain: a host name may have upper case, and an
// agent that is refused cannot stream. But no name has control or format
// characters (a terminal's escape sequences, bidi overrides), which the
// console would have to strip from every agent listing.
func checkIdentity(identity string) error {
	if identity == "" || len(identity) > 253 {
		return status.Error(codes.InvalidArgument, "agent_identity: must be 1 to 253 characters")
	}
	if i := strings.IndexFunc(identity, func(r rune) bool { return !unicode.IsPrint(r) || r == ' ' }); i >= 0 {
		return status.Errorf(codes.InvalidArgument, "agent_identity: %s has a space, control or format character at byte %d; want a Pod or host name",
			validate.Quote(identity), i)
	}
	return nil
}

// checkRegion validates the region and that the caller's token is bound to
// it.
func checkRegion(ctx context.Context, region string) error {
	if err := validate.Region(region); err != nil {
		return status.Errorf(codes.InvalidArgument, "region: %v", err)
	}
	return auth.RequireRegion(ctx, region)
}

// internal logs an unexpected error and hides its details from the caller.
func internal(log *slog.Logger, what string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	log.Error("cluster: "+what+" failed", "err", err)
	return status.Errorf(codes.Unavailable, "%s failed; retry", what)
}
