package status

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/deploysync/deploysync/agentd/dispatch"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// syncCtrld records the resource sync reports it takes, encoded as on the
// wire, and fails one call on demand.
type syncCtrld struct {
	ctrlv1.ClusterServiceClient
	mu      sync.Mutex
	failAt  int   // fail the failAt-th call (1-based; 0: none)
	failErr error // with this error (default: ctrld unreachable)
	calls   int
	batches [][]*ctrlv1.ResourceSync // taken
	ids     map[string]bool          // in any call, taken or not
}

func (c *syncCtrld) ReportResourceSync(_ context.Context, req *ctrlv1.ReportResourceSyncRequest, _ ...grpc.CallOption) (*ctrlv1.ReportResourceSyncResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	for _, s := range req.GetResources() {
		if c.ids == nil {
			c.ids = map[string]bool{}
		}
		c.ids[s.GetResourceId()] = true
	}
	if c.calls == c.failAt {
		if c.failErr != nil {
			return nil, c.failErr
		}
		return nil, status.Error(codes.Unavailable, "injected: ctrld unreachable")
	}
	if _, err := proto.Marshal(req); err != nil {
		return nil, fmt.Errorf("the request does not encode: %w", err)
	}
	c.batches = append(c.batches, req.GetResources())
	return &ctrlv1.ReportResourceSyncResponse{}, nil
}

// failing applies every resource but one, whose apply fails with err.
type failing struct {
	id  string
	err error
}

func (f failing) Handle(_ context.Context, key dispatch.Key, _ dispatch.Intent) error {
	if key.ID == f.id {
		return f.err
	}
	return nil
}

func apply(id string) *ctrlv1.DeploymentChangeEvent {
	return &ctrlv1.DeploymentChangeEvent{Version: 1, Event: &ctrlv1.DeploymentChangeEvent_Deployment{
		Deployment: &ctrlv1.DeploymentEvent{Action: ctrlv1.Action_ACTION_APPLY, Deployment: &ctrlv1.DeploymentState{DeploymentId: id}},
	}}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for: " + what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// 1,201 resources go to ctrld in calls of at most 500, each resource once,
// a call ctrld refused included (its resources go in the next flush); a
// 3 KiB apply error that is not valid UTF-8 arrives clipped to 1 KiB and
// valid, so the request encodes.
func TestResourceSyncsAreSentInBatchesOf500WithErrorsClipped(t *testing.T) {
	long := "\xff" + strings.Repeat("é", 1500)
	d := dispatch.New(failing{id: "bad", err: errors.New(long)}, slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx, 4) }()
	t.Cleanup(func() { cancel(); <-done })
	for i := range 1200 {
		if err := d.Event(apply(fmt.Sprintf("d%04d", i))); err != nil {
			t.Fatal(err)
		}
	}
	d.Bookmark(1)
	waitUntil(t, "every resource applied", func() bool { return d.Acked() == 1 })
	if err := d.Event(apply("bad")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the failing apply", func() bool { return d.LastError() != "" })

	client := &syncCtrld{failAt: 2}
	r := NewSyncReporter(client, "eu", d, time.Second, slog.New(slog.DiscardHandler))
	if err := r.flush(ctx); err == nil {
		t.Fatal("a refused report did not fail the flush")
	}
	if err := r.flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.flush(ctx); err != nil {
		t.Fatal(err)
	}

	var sizes []int
	seen := map[string]int{}
	var bad *ctrlv1.ResourceSync
	for _, batch := range client.batches {
		sizes = append(sizes, len(batch))
		for _, s := range batch {
			seen[s.GetKind()+"/"+s.GetResourceId()]++
			if s.GetResourceId() == "bad" {
				bad = s
			}
		}
	}
	if fmt.Sprint(sizes) != "[500 500 201]" {
		t.Fatalf("calls of %v resources, want 500, 500 and 201", sizes)
	}
	for key, n := range seen {
		if n != 1 || !strings.HasPrefix(key, rpc.KindDeployment+"/") {
			t.Fatalf("%s reported %d times", key, n)
		}
	}
	if len(seen) != 1201 {
		t.Fatalf("%d resources reported, want 1201", len(seen))
	}
	if e := bad.GetError(); len(e) > 1024 || len(e) < 1000 || !utf8.ValidString(e) || !strings.HasPrefix(e, "\uFFFDé") {
		t.Fatalf("the failing apply's error arrived as %d bytes (valid UTF-8: %v), want it clipped to 1 KiB", len(e), utf8.ValidString(e))
	}
	if bad.GetInSync() || bad.GetFailingSince() == nil || bad.GetAppliedVersion() != 0 {
		t.Fatalf("the failing resource arrived as %v", bad)
	}
}

// A report ctrld refuses as invalid is not sent again (it would be refused
// again, holding up every report after it), and an ID ctrld could never
// hold, from an object garbage collection deleted, is never sent: it would
// get the whole report refused.
func TestAReportRefusedAsInvalidIsNotSentAgain(t *testing.T) {
	d := dispatch.New(failing{}, slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx, 2) }()
	t.Cleanup(func() { cancel(); <-done })
	d.BeginFullSync()
	if err := d.Event(apply("api")); err != nil {
		t.Fatal(err)
	}
	d.Collect([]dispatch.Key{{Kind: rpc.KindDeployment, ID: "api"}, {Kind: rpc.KindDeployment, ID: "Labelled_By_Hand"}})
	d.Bookmark(1)
	waitUntil(t, "the apply and the collection", func() bool { return d.Acked() == 1 })

	client := &syncCtrld{failAt: 1, failErr: status.Error(codes.InvalidArgument, "resources[0].applied_version: ahead of the newest version")}
	r := NewSyncReporter(client, "eu", d, time.Second, slog.New(slog.DiscardHandler))
	for range 2 {
		if err := r.flush(ctx); err != nil {
			t.Fatalf("flush: %v", err)
		}
	}
	if client.calls != 1 {
		t.Fatalf("%d calls, want the refused one alone", client.calls)
	}
	if client.ids["Labelled_By_Hand"] || !client.ids["api"] {
		t.Fatalf("reported %v, want api alone", client.ids)
	}

	client.failAt = 0
	if err := d.Event(&ctrlv1.DeploymentChangeEvent{Version: 2, Event: &ctrlv1.DeploymentChangeEvent_Deployment{
		Deployment: &ctrlv1.DeploymentEvent{Action: ctrlv1.Action_ACTION_DELETE, Deployment: &ctrlv1.DeploymentState{DeploymentId: "api"}},
	}}); err != nil {
		t.Fatal(err)
	}
	d.Bookmark(2)
	waitUntil(t, "the delete", func() bool { return d.Acked() == 2 })
	if err := r.flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(client.batches) != 1 || len(client.batches[0]) != 1 || client.batches[0][0].GetResourceId() != "api" || !client.batches[0][0].GetDeleted() {
		t.Fatalf("after the refused report, ctrld took %v, want api deleted alone", client.batches)
	}
}
