package server_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/internal/eventually"
	"github.com/deploysync/deploysync/internal/testmetrics"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// trap makes the next Ent query it intercepts panic, once armed, if the
// query is made while serving method: a stand-in for any bug below a
// handler, with no hook in ctrld itself.
type trap struct {
	method string
	armed  atomic.Bool
}

func (tr *trap) interceptor() ent.Interceptor {
	return ent.InterceptFunc(func(next ent.Querier) ent.Querier {
		return ent.QuerierFunc(func(ctx context.Context, q ent.Query) (ent.Value, error) {
			if m, _ := grpc.Method(ctx); m == tr.method && tr.armed.CompareAndSwap(true, false) {
				panic("injected secret-laden panic")
			}
			return next.Query(ctx, q)
		})
	})
}

// panics reads deploysync_panics_total{where}.
func panics(t *testing.T, reg *prometheus.Registry, where string) float64 {
	t.Helper()
	return testmetrics.Sum(t, reg, "deploysync_panics_total", "where", where)
}

func wantInternal(t *testing.T, err error) {
	t.Helper()
	if status.Code(err) != codes.Internal {
		t.Fatalf("got %v, want Internal", err)
	}
	if msg := status.Convert(err).Message(); strings.Contains(msg, "secret") || strings.Contains(msg, "goroutine") {
		t.Errorf("the client was told about the panic itself: %q", msg)
	}
}

// A unary handler that panics ends that call with Internal, the panic is
// counted, and ctrld serves the next call.
func TestAPanickingCallEndsWithInternalAndCtrldServesOn(t *testing.T) {
	db := storetest.New(t)
	tr := &trap{method: ctrlv1.OperatorService_ListRegions_FullMethodName}
	db.Ent.Region.Intercept(tr.interceptor()) // before ctrld runs: Intercept is not safe alongside queries
	reg := prometheus.NewRegistry()
	env := servertest.StartOn(t, db, server.Config{Registry: reg})
	ctx := context.Background()
	env.AgentToken("eu")
	op := env.Operator("alice")

	tr.armed.Store(true)
	_, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
	wantInternal(t, err)
	if n := panics(t, reg, tr.method); n != 1 {
		t.Errorf("counted %v panics, want 1", n)
	}
	regions, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
	if err != nil || len(regions.GetRegions()) != 1 {
		t.Fatalf("the next call: %v, %v", regions, err)
	}
}

// A stream whose event loading panics ends with Internal; the agent
// resumes from its last bookmark on the same ctrld and gets the change.
func TestAPanickingStreamEndsWithInternalAndTheAgentResumes(t *testing.T) {
	db := storetest.New(t)
	tr := &trap{method: ctrlv1.ClusterService_WatchDeploymentChanges_FullMethodName}
	db.StreamEnt.DeploymentTopology.Intercept(tr.interceptor()) // the streams' own pool
	reg := prometheus.NewRegistry()
	env := servertest.StartOn(t, db, server.Config{Registry: reg})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	agent := env.Agent("eu")
	op := env.Operator("alice")

	watch := func(cursor uint64) ctrlv1.ClusterService_WatchDeploymentChangesClient {
		s, err := agent.WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{Region: "eu", AgentIdentity: "a", VersionLastSeen: cursor})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := watch(0)
	var resume uint64
	for {
		ev, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if b := ev.GetBookmark(); b.GetFullSyncDone() {
			resume = b.GetResumeVersion()
			break
		}
	}

	// The deploy reaches the stream, whose loading of its state panics.
	tr.armed.Store(true)
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "ws", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := s.Recv()
		if err != nil {
			wantInternal(t, err)
			break
		}
		if ev.GetDeployment() != nil {
			t.Fatalf("got %v, want the stream to end on the panic", ev)
		}
	}
	if n := panics(t, reg, tr.method); n != 1 {
		t.Errorf("counted %v panics, want 1", n)
	}
	// The panicking stream released its tailer subscription: the tailer
	// does not go on feeding a buffer nobody reads.
	eventually.True(t, 5*time.Second, "the tailer subscription stayed after the only stream ended", func() bool {
		return testmetrics.Sum(t, reg, "deploysync_tailer_subscriptions") == 0
	})

	s = watch(resume)
	for {
		ev, err := s.Recv()
		if err != nil {
			t.Fatalf("the resumed stream: %v", err)
		}
		if ev.GetDeployment().GetDeployment().GetDeploymentId() == "api" {
			break
		}
	}
}
