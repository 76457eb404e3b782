package operator

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/desired"
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
	sql      *sql.DB
	notifier Notifier
	log      *slog.Logger
}

// New returns the operator service.
func New(client *ent.Client, db *sql.DB, notifier Notifier, log *slog.Logger) *Service {
	return &Service{client: client, desired: desired.New(client), sql: db, notifier: notifier, log: log}
}

// act runs an operator action: audit-logs it with its outcome, maps its
// error to a status, and pokes the tailer after success.
func (s *Service) act(ctx context.Context, action, target string, req proto.Message, run func() error) error {
	err := run()
	actor := "unknown"
	if p, ok := auth.FromContext(ctx); ok {
		actor = p.Name
	}
	detail, _ := protojson.Marshal(req)
	errText := ""
	if err != nil {
		errText = validate.Clip(err.Error(), 4096)
	}
	// The audit record must not depend on the caller staying connected.
	auditCtx := context.WithoutCancel(ctx)
	if aerr := s.client.AuditLog.Create().SetActor(actor).SetAction(action).SetTarget(target).
		SetDetail(validate.Clip(string(detail), 4096)).SetError(errText).Exec(auditCtx); aerr != nil {
		s.log.Error("operator: writing the audit log failed", "action", action, "actor", actor, "err", aerr)
	}
	if err != nil {
		s.log.Info("operator: action failed", "action", action, "target", target, "actor", actor, "err", err)
		return toStatus(err)
	}
	s.log.Info("operator: action done", "action", action, "target", target, "actor", actor)
	s.notifier.Poke()
	return nil
}

// toStatus maps domain errors to gRPC codes with their message intact.
func toStatus(err error) error {
	switch {
	case errors.Is(err, desired.ErrInvalid), errors.Is(err, desired.ErrUnknownRegion), ent.IsValidationError(err):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, desired.ErrNotFound), ent.IsNotFound(err):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, desired.ErrAlreadyExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, desired.ErrConflict):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case status.Code(err) != codes.Unknown:
		return err
	}
	return status.Error(codes.Unavailable, "the action failed (database unavailable?); nothing was changed: "+err.Error())
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// Deploy implements ctrlv1.OperatorServiceServer.
func (s *Service) Deploy(ctx context.Context, req *ctrlv1.DeployRequest) (*ctrlv1.DeployResponse, error) {
	if len(req.GetCommand()) > 64 || len(req.GetEnv()) > 256 {
		return nil, invalid("command/env: at most 64 arguments and 256 variables")
	}
	spec := desired.DeploymentSpec{
		ID:            req.GetDeploymentId(),
		WorkspaceID:   req.GetWorkspaceId(),
		EnvironmentID: req.GetEnvironmentId(),
		Image:         req.GetImage(),
		CPUMillicores: int(req.GetCpuMillicores()),
		MemoryMiB:     int(req.GetMemoryMib()),
		Port:          int(req.GetPort()),
		Command:       req.GetCommand(),
		Env:           req.GetEnv(),
	}
	err := s.act(ctx, "deploy", req.GetDeploymentId(), req, func() error {
		return s.desired.Deploy(ctx, spec, req.GetRegions(), int(req.GetReplicas()))
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.DeployResponse{DeploymentId: req.GetDeploymentId()}, nil
}

// SetDesiredStatus implements ctrlv1.OperatorServiceServer.
func (s *Service) SetDesiredStatus(ctx context.Context, req *ctrlv1.SetDesiredStatusRequest) (*ctrlv1.SetDesiredStatusResponse, error) {
	var want desired.Status
	switch req.GetStatus() {
	case ctrlv1.DesiredStatus_DESIRED_STATUS_RUNNING:
		want = desired.Running
	case ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED:
		want = desired.Stopped
	default:
		return nil, invalid("status: must be RUNNING or STOPPED")
	}
	action := "start"
	if want == desired.Stopped {
		action = "stop"
	}
	err := s.act(ctx, action, target(req.GetDeploymentId(), req.GetRegion()), req, func() error {
		if err := validate.ID(req.GetDeploymentId()); err != nil {
			return fmt.Errorf("deployment_id: %w: %v", desired.ErrInvalid, err)
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
	err := s.act(ctx, "scale", target(req.GetDeploymentId(), req.GetRegion()), req, func() error {
		if err := validate.ID(req.GetDeploymentId()); err != nil {
			return fmt.Errorf("deployment_id: %w: %v", desired.ErrInvalid, err)
		}
		return s.desired.Scale(ctx, req.GetDeploymentId(), req.GetRegion(), int(req.GetReplicas()))
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.ScaleResponse{}, nil
}

// DeleteDeployment implements ctrlv1.OperatorServiceServer.
func (s *Service) DeleteDeployment(ctx context.Context, req *ctrlv1.DeleteDeploymentRequest) (*ctrlv1.DeleteDeploymentResponse, error) {
	err := s.act(ctx, "delete-deployment", req.GetDeploymentId(), req, func() error {
		if err := validate.ID(req.GetDeploymentId()); err != nil {
			return fmt.Errorf("deployment_id: %w: %v", desired.ErrInvalid, err)
		}
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
	err := s.act(ctx, "put-sentinel", target(req.GetEnvironmentId(), req.GetRegion()), req, func() (err error) {
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
	err := s.act(ctx, "delete-sentinel", req.GetSentinelId(), req, func() error {
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
	err := s.act(ctx, "put-cilium-policy", target(req.GetName(), req.GetRegion()), req, func() (err error) {
		id, err = s.desired.EnsureCiliumPolicy(ctx, desired.PolicySpec{
			ID: req.GetPolicyId(), WorkspaceID: req.GetWorkspaceId(), EnvironmentID: req.GetEnvironmentId(),
			DeploymentID: req.GetDeploymentId(), Region: req.GetRegion(), Name: req.GetName(),
			Spec: req.GetSpec().AsMap(),
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
	err := s.act(ctx, "delete-cilium-policy", req.GetPolicyId(), req, func() error {
		return s.desired.DeleteCiliumPolicy(ctx, req.GetPolicyId())
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.DeleteCiliumNetworkPolicyResponse{}, nil
}

// ForceResync implements ctrlv1.OperatorServiceServer.
func (s *Service) ForceResync(ctx context.Context, req *ctrlv1.ForceResyncRequest) (*ctrlv1.ForceResyncResponse, error) {
	if len(req.GetReason()) > 1024 {
		return nil, invalid("reason: at most 1024 characters")
	}
	err := s.act(ctx, "force-resync", req.GetRegion(), req, func() error {
		return s.updateRegion(ctx, req.GetRegion(), func(u *ent.RegionUpdateOne) { u.AddResyncGeneration(1) })
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
	err := s.act(ctx, action, req.GetRegion(), req, func() error {
		return s.updateRegion(ctx, req.GetRegion(), func(u *ent.RegionUpdateOne) { u.SetPaused(req.GetPaused()) })
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.SetRegionPausedResponse{}, nil
}

// updateRegion changes a region's control state and makes this process's
// streams see it at once (other replicas see it within a second).
func (s *Service) updateRegion(ctx context.Context, region string, set func(*ent.RegionUpdateOne)) error {
	if err := validate.Region(region); err != nil {
		return fmt.Errorf("region: %w: %v", desired.ErrInvalid, err)
	}
	u := s.client.Region.UpdateOneID(region)
	set(u)
	if err := u.Exec(ctx); err != nil {
		if ent.IsNotFound(err) {
			return fmt.Errorf("region %q: %w", region, desired.ErrUnknownRegion)
		}
		return err
	}
	if err := s.notifier.RefreshControl(ctx); err != nil {
		s.log.Warn("operator: refreshing region control failed; streams pick it up within a second", "err", err)
	}
	return nil
}

func target(id, region string) string {
	if region == "" {
		return id
	}
	return id + "@" + region
}
