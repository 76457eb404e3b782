package operator

import (
	"context"
	"database/sql"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/kinds"
	"github.com/deploysync/deploysync/internal/manifest"
	"github.com/deploysync/deploysync/internal/validate"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// GetDesiredState implements ctrlv1.OperatorServiceServer. The state is
// built by the deployment kind's Load, which builds the stream's events,
// from one snapshot as the stream reads it; the objects by
// internal/manifest, which builds what the agent applies. So what an
// operator reads here is what the region's agent is sent and applies,
// redacted as the audit log is: the API shows env names, never values
// (revisionMessage), and a read-only key may call this. Its hashes (the
// state's spec_hash, the YAML's spec-hash label and hash annotations) are
// keyed (daemon/viewhash): the plain ones, over everything shown here and
// the env values, would let a viewer check guesses of those values.
func (s *Service) GetDesiredState(ctx context.Context, req *ctrlv1.GetDesiredStateRequest) (*ctrlv1.GetDesiredStateResponse, error) {
	id, region := req.GetDeploymentId(), req.GetRegion()
	if err := validate.ID(id); err != nil {
		return nil, invalid("deployment_id: %v", err)
	}
	if err := validate.Region(region); err != nil {
		return nil, invalid("region: %v", err)
	}
	state, err := s.streamState(ctx, id, region)
	if err != nil {
		return nil, s.viewError(err)
	}
	if state == nil {
		return nil, s.viewError(fmt.Errorf("deployment %q does not run in region %q (no such deployment, stopped there, or its rollout has not reached it): %w",
			id, region, desired.ErrNotFound))
	}
	key, err := s.views.Key(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	objects, err := manifest.NewDeployment(state)
	if err != nil {
		return nil, s.viewError(err)
	}
	if objects, err = objects.Rehashed(key.Of); err != nil {
		return nil, s.viewError(err)
	}
	yaml, err := objects.YAML(redacted)
	if err != nil {
		return nil, s.viewError(err)
	}
	shown := proto.CloneOf(state)
	shown.SpecHash = key.Of(state.GetSpecHash())
	redactEnv(shown.Env)
	for i, arg := range shown.Command {
		shown.Command[i] = redacted(arg)
	}
	return &ctrlv1.GetDesiredStateResponse{Deployment: shown, Yaml: string(yaml)}, nil
}

// streamState is the state the region's stream sends for deployment id
// now: the deployment kind's event for it, read in a snapshot as the
// stream reads it (I6); nil when the event is a delete.
func (s *Service) streamState(ctx context.Context, id, region string) (*ctrlv1.DeploymentState, error) {
	kind, ok := kinds.Named(rpc.KindDeployment)
	if !ok {
		return nil, fmt.Errorf("no %s kind", rpc.KindDeployment)
	}
	tx, err := s.client.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("begin snapshot: %w", err)
	}
	defer tx.Rollback()
	events, err := kind.Load(ctx, tx.Client(), region, []string{id})
	if err != nil {
		return nil, err
	}
	ev := events[id].GetDeployment()
	if ev.GetAction() != ctrlv1.Action_ACTION_APPLY {
		return nil, nil
	}
	return ev.GetDeployment(), nil
}
