package operator

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/liveview"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/viewhash"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/internal/validate"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Notifier is told about committed changes so they reach agents at once.
type Notifier interface {
	// Poke asks the tailer to poll now.
	Poke()
	// RefreshControl re-reads regions' pause and resync state.
	RefreshControl(ctx context.Context) error
}

// Service implements ctrlv1.OperatorServiceServer.
type Service struct {
	ctrlv1.UnimplementedOperatorServiceServer
	client   *ent.Client
	desired  *desired.Store
	sql      *stdsql.DB
	notifier Notifier
	log      *slog.Logger
	refusals refusalLog
	// views keys the hashes GetDesiredState shows (daemon/viewhash).
	views *viewhash.Source
	// live relays live views from agents (SetLiveViews).
	live *liveview.Hub
}

// New returns the operator service; opts configure its desired-state
// rules (desired.WithReserved).
func New(client *ent.Client, db *stdsql.DB, notifier Notifier, log *slog.Logger, opts ...desired.Option) *Service {
	return &Service{client: client, desired: desired.New(client, opts...), sql: db, notifier: notifier, log: log,
		views: viewhash.NewSource(client)}
}

// Sizes of the audit log's columns (ent/schema/auditlog.go): actor, action
// and target are VARCHAR(255), Ent's default string size; detail and error
// are MaxLen(4096).
const (
	auditNameLen = 255
	auditTextLen = 4096
)

// auditTimeout bounds an audit write, which holds a connection of the main
// pool and outlives its call (the record must not depend on the caller
// staying connected): an INSERT into a table nothing locks takes
// milliseconds, so one that has not ended in 5 s is waiting on a database
// in trouble, and the record is logged instead.
var auditTimeout = 5 * time.Second // a variable for tests

// act runs an operator action and audits it with its outcome, maps its
// error to a status, and pokes the tailer after success. run holds every
// check of the request as well as the action, so a call refused by any
// check is on the record too.
// run gets ctx naming the actor for the revisions it writes.
func (s *Service) act(ctx context.Context, action, target string, req proto.Message, run func(ctx context.Context) error) error {
	actor, audited := "unknown", "unknown"
	if p, ok := auth.FromContext(ctx); ok {
		// The audit names a console session's person with their key
		// and address; revisions name the person.
		actor, audited = p.Name, p.Actor()
	}
	ctx = desired.WithActor(ctx, actor)
	// The record must not fail for what the caller sent: a 1 MiB target
	// is clipped to fit, not refused by the database.
	record := auditRecord{actor: validate.Clip(audited, auditNameLen), action: validate.Clip(action, auditNameLen),
		target: validate.Clip(target, auditNameLen), detail: auditDetail(req)}
	defer func() {
		// A panic is a bug below the handler (the server's recovery turns
		// it into Internal); the attempt is still audited, without the
		// panic's value, which may carry request data.
		if p := recover(); p != nil {
			record.error = "the action panicked; ctrld's log has the details"
			s.audit(ctx, record)
			panic(p)
		}
	}()
	err := run(ctx)
	if err != nil {
		record.error = validate.Clip(err.Error(), auditTextLen)
	} else {
		// Committed: this replica's tailer and its peers read the change
		// now, not after the audit record's round trip.
		s.notifier.Poke()
	}
	s.audit(ctx, record)
	if err != nil {
		s.log.Info("operator: action failed", "action", record.action, "target", record.target, "actor", record.actor, "err", record.error)
		return toStatus(err)
	}
	s.log.Info("operator: action done", "action", record.action, "target", record.target, "actor", record.actor)
	return nil
}

// auditRecord is one row of the audit log, each field clipped to its
// column.
type auditRecord struct{ actor, action, target, detail, error string }

// audit writes the record. When the database refuses it, the record is
// logged in full at error level instead, so it is not lost silently and can
// be written by hand.
func (s *Service) audit(ctx context.Context, r auditRecord) {
	// The record must not depend on the caller staying connected, nor
	// wait on the database for ever.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	err := s.client.AuditLog.Create().SetActor(r.actor).SetAction(r.action).SetTarget(r.target).
		SetDetail(r.detail).SetError(r.error).Exec(ctx)
	if err != nil {
		s.log.Error(auditLost(err), "actor", r.actor, "action", r.action, "target", r.target, "detail", r.detail, "error", r.error, "err", err)
	}
}

// auditLost is the log message for an audit record whose write failed.
// One that timed out may still land: the driver gives up on the statement,
// but the server may run it later.
func auditLost(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("operator: AUDIT RECORD LOST: the database did not take it within %s (it may still write it); it is logged here in full", auditTimeout)
	}
	return "operator: AUDIT RECORD LOST: the database refused it; it is logged here in full"
}

// auditDetail is the request as JSON for the audit log, clipped to its
// column, with what may be a credential replaced by its size: env values
// and command arguments (a "--token=..." flag is as common as a secret in
// the environment). Env names stay, so the record still says what changed.
func auditDetail(req proto.Message) string {
	switch d := req.(type) {
	case *ctrlv1.DeployRequest:
		d = proto.Clone(d).(*ctrlv1.DeployRequest)
		redactEnv(d.Env)
		for i, arg := range d.Command {
			d.Command[i] = redacted(arg)
		}
		req = d
	case *ctrlv1.UpdateDeploymentRequest:
		d = proto.Clone(d).(*ctrlv1.UpdateDeploymentRequest)
		redactEnv(d.Env)
		req = d
	}
	detail, err := protojson.Marshal(req)
	if err != nil {
		return "request not recorded: " + err.Error()
	}
	return validate.Clip(string(detail), auditTextLen)
}

func redactEnv(env map[string]string) {
	for name, value := range env {
		env[name] = redacted(value)
	}
}

func redacted(secret string) string {
	return fmt.Sprintf("<redacted, %d bytes>", len(secret))
}

// toStatus maps domain errors to gRPC codes with their message intact.
// Other errors come from below (the database, its driver): their text can
// name tables, columns and values, so the client gets a generic message;
// act logs the cause with the action and keeps it in the audit record.
func toStatus(err error) error {
	switch {
	case errors.Is(err, desired.ErrInvalid), errors.Is(err, desired.ErrUnknownRegion), ent.IsValidationError(err):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, desired.ErrNotFound), ent.IsNotFound(err):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, desired.ErrAlreadyExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, desired.ErrConflict), errors.Is(err, desired.ErrNothingToRollBack),
		// A rollout in flight, or none to act on: the deployment is not in
		// the state the action needs, and the message says what to do.
		errors.Is(err, desired.ErrRolloutInFlight), errors.Is(err, desired.ErrNoRollout),
		// Not the rollout the operator confirmed: nothing was done, and
		// the message says what changed; retrying cannot succeed, looking
		// again and deciding again can.
		errors.Is(err, desired.ErrRolloutMoved),
		// A fleet control holds it, or its spec failed before: the
		// message says which, and the way past it.
		errors.Is(err, desired.ErrHeld), errors.Is(err, desired.ErrFailedSpec):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, desired.ErrConcurrentChange):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case store.IsConflict(err):
		// Concurrent writes collided through every rerun store.WithTx gave
		// them; the same request can succeed a moment later.
		return status.Error(codes.Aborted, "the action collided with concurrent changes; nothing was changed; retry")
	case status.Code(err) != codes.Unknown:
		return err
	}
	return status.Error(codes.Unavailable, "the action failed; nothing was changed; retry (ctrld logged the cause)")
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// Deploy implements ctrlv1.OperatorServiceServer.
func (s *Service) Deploy(ctx context.Context, req *ctrlv1.DeployRequest) (*ctrlv1.DeployResponse, error) {
	err := s.act(ctx, "deploy", req.GetDeploymentId(), req, func(ctx context.Context) error {
		ctx, err := withRollout(ctx, req.GetRollout())
		if err != nil {
			return err
		}
		if ctx, err = withFleet(ctx, req.GetBreakGlassReason(), ""); err != nil {
			return err
		}
		return s.desired.Deploy(ctx, desired.DeploymentSpec{
			ID:            req.GetDeploymentId(),
			WorkspaceID:   req.GetWorkspaceId(),
			EnvironmentID: req.GetEnvironmentId(),
			Image:         req.GetImage(),
			CPUMillicores: int(req.GetCpuMillicores()),
			MemoryMiB:     int(req.GetMemoryMib()),
			Port:          int(req.GetPort()),
			Command:       req.GetCommand(),
			Env:           req.GetEnv(),
		}, req.GetRegions(), int(req.GetReplicas()))
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.DeployResponse{DeploymentId: req.GetDeploymentId()}, nil
}

// SetDesiredStatus implements ctrlv1.OperatorServiceServer.
func (s *Service) SetDesiredStatus(ctx context.Context, req *ctrlv1.SetDesiredStatusRequest) (*ctrlv1.SetDesiredStatusResponse, error) {
	action, want := "set-desired-status", desired.Status("")
	switch req.GetStatus() {
	case ctrlv1.DesiredStatus_DESIRED_STATUS_RUNNING:
		action, want = "start", desired.Running
	case ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED:
		action, want = "stop", desired.Stopped
	}
	err := s.act(ctx, action, target(req.GetDeploymentId(), req.GetRegion()), req, func(ctx context.Context) error {
		if want == "" {
			return fmt.Errorf("status: %w: must be RUNNING or STOPPED", desired.ErrInvalid)
		}
		return s.desired.SetDesiredStatus(ctx, req.GetDeploymentId(), req.GetRegion(), want)
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.SetDesiredStatusResponse{}, nil
}

// Scale implements ctrlv1.OperatorServiceServer.
func (s *Service) Scale(ctx context.Context, req *ctrlv1.ScaleRequest) (*ctrlv1.ScaleResponse, error) {
	err := s.act(ctx, "scale", target(req.GetDeploymentId(), req.GetRegion()), req, func(ctx context.Context) error {
		return s.desired.Scale(ctx, req.GetDeploymentId(), req.GetRegion(), int(req.GetReplicas()))
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.ScaleResponse{}, nil
}

// DeleteDeployment implements ctrlv1.OperatorServiceServer.
func (s *Service) DeleteDeployment(ctx context.Context, req *ctrlv1.DeleteDeploymentRequest) (*ctrlv1.DeleteDeploymentResponse, error) {
	err := s.act(ctx, "delete-deployment", req.GetDeploymentId(), req, func(ctx context.Context) error {
		return s.desired.DeleteDeployment(ctx, req.GetDeploymentId())
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.DeleteDeploymentResponse{}, nil
}

// PutSentinel implements ctrlv1.OperatorServiceServer.
func (s *Service) PutSentinel(ctx context.Context, req *ctrlv1.PutSentinelRequest) (*ctrlv1.PutSentinelResponse, error) {
	var id string
	err := s.act(ctx, "put-sentinel", target(req.GetEnvironmentId(), req.GetRegion()), req, func(ctx context.Context) (err error) {
		id, err = s.desired.EnsureSentinel(ctx, desired.SentinelSpec{
			ID: req.GetSentinelId(), WorkspaceID: req.GetWorkspaceId(), EnvironmentID: req.GetEnvironmentId(),
			Region: req.GetRegion(), Image: req.GetImage(), Replicas: int(req.GetReplicas()),
			CPUMillicores: int(req.GetCpuMillicores()), MemoryMiB: int(req.GetMemoryMib()), Stopped: req.GetStopped(),
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.PutSentinelResponse{SentinelId: id}, nil
}

// DeleteSentinel implements ctrlv1.OperatorServiceServer.
func (s *Service) DeleteSentinel(ctx context.Context, req *ctrlv1.DeleteSentinelRequest) (*ctrlv1.DeleteSentinelResponse, error) {
	err := s.act(ctx, "delete-sentinel", req.GetSentinelId(), req, func(ctx context.Context) error {
		return s.desired.DeleteSentinel(ctx, req.GetSentinelId())
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.DeleteSentinelResponse{}, nil
}

// PutCiliumNetworkPolicy implements ctrlv1.OperatorServiceServer.
func (s *Service) PutCiliumNetworkPolicy(ctx context.Context, req *ctrlv1.PutCiliumNetworkPolicyRequest) (*ctrlv1.PutCiliumNetworkPolicyResponse, error) {
	var id string
	err := s.act(ctx, "put-cilium-policy", target(req.GetName(), req.GetRegion()), req, func(ctx context.Context) (err error) {
		id, err = s.desired.EnsureCiliumPolicy(ctx, desired.PolicySpec{
			ID: req.GetPolicyId(), WorkspaceID: req.GetWorkspaceId(), EnvironmentID: req.GetEnvironmentId(),
			DeploymentID: req.GetDeploymentId(), Region: req.GetRegion(), Name: req.GetName(),
			Spec: validate.StructMap(req.GetSpec()),
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.PutCiliumNetworkPolicyResponse{PolicyId: id}, nil
}

// DeleteCiliumNetworkPolicy implements ctrlv1.OperatorServiceServer.
func (s *Service) DeleteCiliumNetworkPolicy(ctx context.Context, req *ctrlv1.DeleteCiliumNetworkPolicyRequest) (*ctrlv1.DeleteCiliumNetworkPolicyResponse, error) {
	err := s.act(ctx, "delete-cilium-policy", req.GetPolicyId(), req, func(ctx context.Context) error {
		return s.desired.DeleteCiliumPolicy(ctx, req.GetPolicyId())
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.DeleteCiliumNetworkPolicyResponse{}, nil
}

// ForceResync implements ctrlv1.OperatorServiceServer.
func (s *Service) ForceResync(ctx context.Context, req *ctrlv1.ForceResyncRequest) (*ctrlv1.ForceResyncResponse, error) {
	err := s.act(ctx, "force-resync", req.GetRegion(), req, func(ctx context.Context) error {
		return s.controlChanged(ctx, s.desired.ForceResync(ctx, req.GetRegion(), req.GetReason()))
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.ForceResyncResponse{}, nil
}

// SetRegionPaused implements ctrlv1.OperatorServiceServer.
func (s *Service) SetRegionPaused(ctx context.Context, req *ctrlv1.SetRegionPausedRequest) (*ctrlv1.SetRegionPausedResponse, error) {
	action := "resume"
	if req.GetPaused() {
		action = "pause"
	}
	err := s.act(ctx, action, req.GetRegion(), req, func(ctx context.Context) error {
		return s.controlChanged(ctx, s.desired.SetRegionPaused(ctx, req.GetRegion(), req.GetPaused()))
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.SetRegionPausedResponse{}, nil
}

// controlChanged makes this process's streams see a region's new control
// state at once, after err (the change) is nil; other replicas see it
// within a second.
func (s *Service) controlChanged(ctx context.Context, err error) error {
	if err != nil {
		return err
	}
	if err := s.notifier.RefreshControl(ctx); err != nil {
		s.log.Warn("operator: refreshing region control failed; streams pick it up within a second", "err", err)
	}
	return nil
}

// target names what an action is on in the audit log: an ID, with its
// region when the action is limited to one.
func target(id, region string) string {
	if region == "" {
		return id
	}
	return id + "@" + region
}
