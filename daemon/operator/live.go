package operator

import (
	"context"
	"fmt"
	"regexp"
	"sync"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/liveview"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/internal/validate"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Bounds of live views, as ctrld asks them of agents (which bound them
// again).
const (
	DefaultTailLines = 100
	MaxTailLines     = 10000
	// MaxLogBytes bounds one logs answer that does not follow.
	MaxLogBytes = 1 << 20
	// maxEvents bounds the events of one answer.
	maxEvents = 200
	// LogRate bounds how fast one logs answer flows once its first
	// LogBurst is out: faster than anyone reads, and slow enough that a
	// log flood through an agent's connection leaves its change stream
	// the CPU and bandwidth it needs (BenchmarkLiveLogs).
	LogRate  = 1 << 20 // bytes a second
	LogBurst = 1 << 20
)

// SetLiveViews makes the live views go through hub (daemon/liveview);
// without one they are Unimplemented.
func (s *Service) SetLiveViews(hub *liveview.Hub) { s.live = hub }

// liveTarget checks a live view's deployment and region and returns the
// request for the agent: the deployment must run in the region (its
// topology there), and its namespace is what the agent is asked about.
func (s *Service) liveTarget(ctx context.Context, kind, id, region string) (*ctrlv1.LiveRequest, error) {
	if s.live == nil {
		return nil, fmt.Errorf("live views: %w: this ctrld relays none", desired.ErrInvalid)
	}
	if err := validate.ID(id); err != nil {
		return nil, invalid("deployment_id: %v", err)
	}
	if err := validate.Region(region); err != nil {
		return nil, invalid("region: %v", err)
	}
	d, err := s.client.Deployment.Query().Where(deployment.ID(id)).
		Select(deployment.FieldWorkspaceID, deployment.FieldEnvironmentID).Only(ctx)
	if err != nil {
		return nil, s.viewError(fmt.Errorf("deployment %q: %w", id, desired.ErrNotFound))
	}
	runs, err := s.client.DeploymentTopology.Query().
		Where(deploymenttopology.DeploymentID(id), deploymenttopology.Region(region)).Exist(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	if !runs {
		return nil, s.viewError(fmt.Errorf("deployment %q has no topology in region %q: %w", id, region, desired.ErrNotFound))
	}
	return &ctrlv1.LiveRequest{Kind: kind, Namespace: naming.Namespace(d.WorkspaceID, d.EnvironmentID), DeploymentId: id}, nil
}

// ListPods implements ctrlv1.OperatorServiceServer.
func (s *Service) ListPods(ctx context.Context, req *ctrlv1.ListPodsRequest) (*ctrlv1.ListPodsResponse, error) {
	lr, err := s.liveTarget(ctx, "pods", req.GetDeploymentId(), req.GetRegion())
	if err != nil {
		return nil, toStatus(err)
	}
	key, err := s.views.Key(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	out := &ctrlv1.ListPodsResponse{}
	err = s.live.Ask(ctx, req.GetRegion(), lr, func(c *ctrlv1.LiveAnswerRequest) error {
		for _, p := range c.GetPods() {
			if len(out.Pods) < maxPods {
				p.SpecHash = key.Of(p.GetSpecHash()) // people see keyed hashes only
				out.Pods = append(out.Pods, p)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// maxPods bounds the pods of one answer: a deployment has at most 1,000
// replicas in a region.
const maxPods = 1000

// ListEvents implements ctrlv1.OperatorServiceServer.
func (s *Service) ListEvents(ctx context.Context, req *ctrlv1.ListEventsRequest) (*ctrlv1.ListEventsResponse, error) {
	lr, err := s.liveTarget(ctx, "events", req.GetDeploymentId(), req.GetRegion())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &ctrlv1.ListEventsResponse{}
	err = s.live.Ask(ctx, req.GetRegion(), lr, func(c *ctrlv1.LiveAnswerRequest) error {
		out.Events = append(out.Events, c.GetEvents()...)
		if n := len(out.Events); n > maxEvents {
			out.Events = out.Events[n-maxEvents:]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// StreamLogs implements ctrlv1.OperatorServiceServer. Logs may carry
// secrets: a read-only key may not read them (daemon/auth), and every
// read is audited with who read which pod's logs.
func (s *Service) StreamLogs(req *ctrlv1.StreamLogsRequest, srv grpc.ServerStreamingServer[ctrlv1.StreamLogsResponse]) error {
	ctx := srv.Context()
	target := req.GetDeploymentId() + "/" + req.GetRegion() + "/" + req.GetPod()
	// The read is on record once it begins (a follow may last hours),
	// or, refused or failed before, with why.
	audit := s.readAudit(ctx, "logs.read", target, req)
	err := func() error {
		lr, err := s.liveTarget(ctx, "logs", req.GetDeploymentId(), req.GetRegion())
		if err != nil {
			return err
		}
		if err := validate.PodName(req.GetPod()); err != nil {
			return invalid("pod: %v", err)
		}
		if c := req.GetContainer(); c != "" && !containerName.MatchString(c) {
			return invalid("container: %s is not a container name (1 to 63 lower-case letters, digits and '-')", validate.Quote(c))
		}
		tail := req.GetTailLines()
		switch {
		case tail < 0 || tail > MaxTailLines:
			return invalid("tail_lines: 0..%d (0: %d), got %d", MaxTailLines, DefaultTailLines, tail)
		case tail == 0:
			tail = DefaultTailLines
		}
		lr.Pod, lr.Container, lr.TailLines, lr.Previous, lr.Follow = req.GetPod(), req.GetContainer(), tail, req.GetPrevious(), req.GetFollow()
		if !lr.Follow {
			lr.LimitBytes = MaxLogBytes
		}
		paced := rate.NewLimiter(LogRate, LogBurst)
		return s.live.Ask(ctx, req.GetRegion(), lr, func(c *ctrlv1.LiveAnswerRequest) error {
			audit(nil)
			if c.GetLog() == "" && !c.GetTruncated() {
				return nil
			}
			// Waiting here holds the agent's next chunk: it reads its
			// log no faster.
			if err := paced.WaitN(ctx, min(len(c.GetLog()), LogBurst)); err != nil {
				return err
			}
			return srv.Send(&ctrlv1.StreamLogsResponse{Log: validate.Text(c.GetLog(), 64<<10), Truncated: c.GetTruncated()})
		})
	}()
	audit(err)
	return toStatus(err)
}

var containerName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// readAudit returns the function that puts a read on record (a logs
// read: who read which pod's logs, when), once: with its error when it
// failed before it began, without when it began (err nil).
func (s *Service) readAudit(ctx context.Context, action, target string, req proto.Message) func(err error) {
	audited := "unknown"
	if p, ok := auth.FromContext(ctx); ok {
		audited = p.Actor()
	}
	record := auditRecord{actor: validate.Clip(audited, auditNameLen), action: action,
		target: validate.Clip(target, auditNameLen), detail: auditDetail(req)}
	var once sync.Once
	return func(err error) {
		once.Do(func() {
			if err != nil {
				record.error = validate.Clip(err.Error(), auditTextLen)
			}
			s.audit(ctx, record)
		})
	}
}
