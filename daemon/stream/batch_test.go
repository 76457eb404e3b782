package stream_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/stream"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// fullSyncReceived is what a client got from a full sync, up to its
// full_sync_done bookmark.
type fullSyncReceived struct {
	events    map[rpc.Resource]*ctrlv1.DeploymentChangeEvent // each resource's event, unpacked
	messages  int                                            // messages with resources in them
	batches   int
	bookmarks []*ctrlv1.Bookmark // the last is the full_sync_done one
}

// fullSync runs one full sync of region as identity, asking for batches or
// not, and returns what it received; stop, if set, ends it after that many
// messages with resources (the bookmark then is nil).
func fullSync(t *testing.T, env *servertest.Env, region, identity string, batches bool, stop int) fullSyncReceived {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := env.Agent(region).WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{
		Region: region, AgentIdentity: identity, Batches: batches})
	if err != nil {
		t.Fatal(err)
	}
	got := fullSyncReceived{events: map[rpc.Resource]*ctrlv1.DeploymentChangeEvent{}}
	for stop == 0 || got.messages < stop {
		msg, err := s.Recv()
		if err != nil {
			t.Fatalf("after %d messages: %v", got.messages, err)
		}
		if b := msg.GetBookmark(); b != nil {
			got.bookmarks = append(got.bookmarks, b)
			if b.GetFullSyncDone() {
				return got
			}
			continue
		}
		got.messages++
		if msg.GetBatch() != nil {
			got.batches++
		}
		events, err := rpc.Unbatch(msg)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range events {
			r, _, ok := rpc.ResourceOf(ev)
			if !ok {
				t.Fatalf("not a resource event in a full sync: %v", ev)
			}
			if got.events[r] != nil {
				t.Fatalf("%s twice in one full sync", r)
			}
			got.events[r] = ev
		}
	}
	return got
}

// seedVaried fills region with deployments of several environments and
// specs (some sharing everything but their ID, some little), stopped and
// scaled-to-0 ones, rows an older ctrld wrote (no namespace on the
// topology), a sentinel and a policy.
func seedVaried(t *testing.T, env *servertest.Env, region string) {
	t.Helper()
	ds := desired.New(env.DB.Ent)
	ctx := context.Background()
	for i := range 40 {
		spec := desired.DeploymentSpec{ID: fmt.Sprintf("d%02d", i), WorkspaceID: []string{"ws", "acme"}[i%2],
			EnvironmentID: []string{"prod", "dev", "prod"}[i%3], Image: fmt.Sprintf("app:%d", i%4), CPUMillicores: 100 * (1 + i%2),
			MemoryMiB: 64, Port: []int{0, 9090}[i%2]}
		if i%5 == 0 {
			spec.Command = []string{"serve", fmt.Sprint(i%10 == 0)}
			spec.Env = map[string]string{"MODE": "fast"}
		}
		must(t, ds.Deploy(ctx, spec, []string{region}, 1+i%3))
	}
	must(t, ds.SetDesiredStatus(ctx, "d07", region, desired.Stopped))
	must(t, ds.Scale(ctx, "d08", region, 0))
	// Rows from before deployment_topology.namespace.
	// rawsql: older rows: deployment_topology.namespace is immutable in Ent.
	if _, err := env.DB.SQL.Exec("UPDATE deployment_topology SET namespace = '' WHERE deployment_id IN ('d01', 'd02', 'd03', 'd30')"); err != nil {
		t.Fatal(err)
	}
	_, err := ds.EnsureSentinel(ctx, desired.SentinelSpec{ID: "sen", WorkspaceID: "ws", EnvironmentID: "prod", Region: region,
		Image: "s:1", Replicas: 1, CPUMillicores: 1, MemoryMiB: 1})
	must(t, err)
	_, err = ds.EnsureCiliumPolicy(ctx, desired.PolicySpec{ID: "pol", WorkspaceID: "ws", EnvironmentID: "prod", Region: region,
		Name: "allow", Spec: map[string]any{"endpointSelector": map[string]any{}, "ingress": []any{map[string]any{}}}})
	must(t, err)
	awaitTailer(t, env) // else a full sync gets some of them live
}

// Invariant I3 for batches: a full sync in batches delivers every resource
// exactly as a full sync of single events does (each event whole, versioned
// as the sync), ends with the same one bookmark, and no client that did not
// ask for batches (an agent older than them) gets one.
func TestABatchedFullSyncDeliversWhatSingleEventsDo(t *testing.T) {
	// Pages of 7: batches of several pages, groups cut by them.
	env := servertest.Start(t, server.Config{Stream: stream.Config{PageSize: 7}})
	env.AgentToken("eu")
	seedVaried(t, env, "eu")

	single := fullSync(t, env, "eu", "old-agent", false, 0)
	batched := fullSync(t, env, "eu", "new-agent", true, 0)
	if single.batches != 0 {
		t.Errorf("a client that did not ask for batches got %d", single.batches)
	}
	if len(single.events) != 41 { // 40 deployments but the stopped one, a sentinel, a policy
		t.Errorf("the full sync of single events listed %d resources, want 41", len(single.events))
	}
	if batched.batches == 0 || batched.messages != batched.batches || batched.messages >= len(batched.events)/3 {
		t.Errorf("batched: %d messages, %d of them batches, for %d resources", batched.messages, batched.batches, len(batched.events))
	}
	if len(batched.events) != len(single.events) {
		t.Errorf("batched: %d resources, single: %d", len(batched.events), len(single.events))
	}
	for r, want := range single.events {
		if got := batched.events[r]; !proto.Equal(got, want) {
			t.Errorf("%s: batched\n%v\nsingle\n%v", r, got, want)
		}
	}
	for _, got := range []fullSyncReceived{single, batched} {
		if len(got.bookmarks) != 1 || !got.bookmarks[0].GetFullSyncDone() {
			t.Errorf("bookmarks in a full sync: %v, want only its full_sync_done one", got.bookmarks)
		}
	}
	if s, b := single.bookmarks[0].GetResumeVersion(), batched.bookmarks[0].GetResumeVersion(); s != b {
		t.Errorf("full_sync_done at %d (single), %d (batched)", s, b)
	}
	// An older ctrld's rows take their deployment's namespace.
	if ns := single.events[rpc.Resource{Kind: rpc.KindDeployment, ID: "d01"}].GetDeployment().GetDeployment().GetNamespace(); ns != "acme-dev" {
		t.Errorf("d01's namespace %q, want acme-dev", ns)
	}
}

// A batched full sync cut short sends no bookmark before it is cut (the
// agent resumes with a full sync again), and the next one is whole.
func TestABatchedFullSyncCutShortIsWholeNextTime(t *testing.T) {
	env := servertest.Start(t, server.Config{Stream: stream.Config{PageSize: 7}})
	env.AgentToken("eu")
	seedVaried(t, env, "eu")
	cut := fullSync(t, env, "eu", "agent", true, 2)
	if len(cut.bookmarks) != 0 {
		t.Errorf("bookmarks before the full sync was done: %v", cut.bookmarks)
	}
	if len(cut.events) == 0 || len(cut.events) >= 41 {
		t.Fatalf("the cut full sync delivered %d resources: cut in the middle, it proves nothing", len(cut.events))
	}
	again := fullSync(t, env, "eu", "agent", true, 0)
	if len(again.events) != 41 {
		t.Errorf("the full sync after the cut one listed %d resources, want 41", len(again.events))
	}
	for r, ev := range cut.events {
		if !proto.Equal(again.events[r], ev) {
			t.Errorf("%s: %v after the cut, %v before", r, again.events[r], ev)
		}
	}
}
