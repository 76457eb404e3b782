package status

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/deploysync/deploysync/agentd/reconcile"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// ctrld records the reports it takes, and panics on one kind on demand: a
// stand-in for any bug on the way to ctrld.
type ctrld struct {
	ctrlv1.ClusterServiceClient
	mu          sync.Mutex
	panicOn     string // "sentinels", "deployments" or ""
	sentinels   []string
	deployments []string
}

func (c *ctrld) ReportSentinelStatus(_ context.Context, req *ctrlv1.ReportSentinelStatusRequest, _ ...grpc.CallOption) (*ctrlv1.ReportSentinelStatusResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.panicOn == "sentinels" {
		panic("injected: a bug reporting sentinels")
	}
	for _, s := range req.GetSentinels() {
		c.sentinels = append(c.sentinels, s.GetSentinelId())
	}
	return &ctrlv1.ReportSentinelStatusResponse{}, nil
}

func (c *ctrld) ReportDeploymentStatus(_ context.Context, req *ctrlv1.ReportDeploymentStatusRequest, _ ...grpc.CallOption) (*ctrlv1.ReportDeploymentStatusResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.panicOn == "deployments" {
		panic("injected: a bug reporting deployments")
	}
	for _, d := range req.GetDeployments() {
		c.deployments = append(c.deployments, d.GetDeploymentId())
	}
	return &ctrlv1.ReportDeploymentStatusResponse{}, nil
}

func (c *ctrld) set(panicOn string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.panicOn = panicOn
}

func (c *ctrld) reported() (sentinels, deployments []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sentinels), slices.Clone(c.deployments)
}

// A panic while reporting (the agent starts the status loop again after
// one) loses nothing: what ctrld did not take is reported by the next
// flush, sentinels and deployments alike.
func TestAPanicWhileReportingKeepsWhatWasNotReported(t *testing.T) {
	client := &ctrld{}
	r := New(client, "eu", reconcile.NewCache(fake.NewClientset(), 0), time.Second, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	flushPanicking := func(kind string) {
		t.Helper()
		client.set(kind)
		defer client.set("")
		defer func() {
			if recover() == nil {
				t.Fatalf("reporting %s did not panic", kind)
			}
		}()
		r.flush(ctx)
	}

	r.mark(r.sentinels, "gw")
	r.mark(r.dirty, "api")
	flushPanicking("sentinels")
	if err := r.flush(ctx); err != nil {
		t.Fatal(err)
	}
	if s, d := client.reported(); !slices.Equal(s, []string{"gw"}) || !slices.Equal(d, []string{"api"}) {
		t.Fatalf("after a panic reporting sentinels: reported sentinels %v and deployments %v, want gw and api", s, d)
	}

	r.mark(r.dirty, "web")
	flushPanicking("deployments")
	if err := r.flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, d := client.reported(); !slices.Equal(d, []string{"api", "web"}) {
		t.Fatalf("after a panic reporting deployments: reported deployments %v, want api, then web", d)
	}
}

// hungCtrld takes no report: each call waits until its context ends, as
// a ctrld stuck on a lock in its database does.
type hungCtrld struct{ ctrlv1.ClusterServiceClient }

func (hungCtrld) ReportDeploymentStatus(ctx context.Context, _ *ctrlv1.ReportDeploymentStatusRequest, _ ...grpc.CallOption) (*ctrlv1.ReportDeploymentStatusResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A report that hangs holds the reporter for reportTimeout at most, and a
// heartbeat's flush waiting behind it gives up when the heartbeat's own
// time is up: the heartbeat then sends nothing rather than waiting with
// it (before, the loop's flush had no bound, and the heartbeat none
// waiting for it). What was not reported stays marked.
func TestAHungReportHoldsNoFlushPastItsTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(hungCtrld{}, "eu", reconcile.NewCache(fake.NewClientset(), 0), time.Second, slog.New(slog.DiscardHandler))
		r.mark(r.dirty, "api")
		loop := make(chan error, 1)
		go func() { loop <- r.Flush(context.Background()) }()
		synctest.Wait() // the loop's flush is in its call

		beat, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		if err := r.Flush(beat); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 5*time.Second {
			t.Errorf("the heartbeat's flush: %v after %s, want its deadline after 5s", err, time.Since(start))
		}
		if err := <-loop; !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != reportTimeout {
			t.Errorf("the loop's flush: %v after %s, want the report's timeout after %s", err, time.Since(start), reportTimeout)
		}
		if dirty := r.take(r.dirty); !slices.Equal(dirty, []string{"api"}) {
			t.Errorf("not reported, yet no longer marked: %v", dirty)
		}
	})
}
