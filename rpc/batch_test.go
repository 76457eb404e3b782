package rpc_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

func apply(s *ctrlv1.DeploymentState) *ctrlv1.DeploymentChangeEvent {
	return &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_Deployment{
		Deployment: &ctrlv1.DeploymentEvent{Action: ctrlv1.Action_ACTION_APPLY, Deployment: s}}}
}

// page is a full sync's page of every shape: deployments that share all
// but their ID, some of their fields, or nothing; fields at their zero
// value beside others that are set (replicas 0: scaled to 0); a delete;
// other kinds.
func page() []*ctrlv1.DeploymentChangeEvent {
	var events []*ctrlv1.DeploymentChangeEvent
	for i := range 6 {
		events = append(events, apply(&ctrlv1.DeploymentState{DeploymentId: fmt.Sprintf("same-%d", i), Namespace: "ws-prod",
			Image: "app:1", Replicas: 2, CpuMillicores: 100, MemoryMib: 64, Port: 8080,
			Command: []string{"serve", "--fast"}, Env: map[string]string{"A": "1"}, SpecHash: "0123456789abcdef"}))
	}
	for i := range 5 {
		events = append(events, apply(&ctrlv1.DeploymentState{DeploymentId: fmt.Sprintf("mixed-%d", i), Namespace: "ws-dev",
			Image: fmt.Sprintf("app:%d", i%2), Replicas: int32(i % 3), CpuMillicores: 100, MemoryMib: int32(64 * (1 + i%2)), Port: 8080,
			Command: [][]string{nil, {"a"}, {"a", "b"}}[i%3], Env: []map[string]string{nil, {"A": "1"}, {"A": "2", "B": ""}}[i%3],
			SpecHash: fmt.Sprintf("%016x", i)}))
	}
	events = append(events,
		apply(&ctrlv1.DeploymentState{DeploymentId: "alone", Namespace: "other-prod", Image: "x:1", Replicas: 1}),
		apply(&ctrlv1.DeploymentState{DeploymentId: "no-namespace", Image: "x:1", Replicas: 1}),
		&ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_Deployment{
			Deployment: &ctrlv1.DeploymentEvent{Action: ctrlv1.Action_ACTION_DELETE, Deployment: &ctrlv1.DeploymentState{DeploymentId: "gone"}}}},
		&ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_Sentinel{
			Sentinel: &ctrlv1.SentinelEvent{Action: ctrlv1.Action_ACTION_APPLY, Sentinel: &ctrlv1.SentinelState{SentinelId: "s", Namespace: "ws-prod", Image: "s:1"}}}},
		&ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_CiliumNetworkPolicy{
			CiliumNetworkPolicy: &ctrlv1.CiliumNetworkPolicyEvent{Action: ctrlv1.Action_ACTION_APPLY, CiliumNetworkPolicy: &ctrlv1.CiliumNetworkPolicyState{
				PolicyId: "p", Namespace: "ws-prod", Name: "p", Spec: &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStringValue("b")}}}}}},
	)
	return events
}

// byResource is events by the resource they are about.
func byResource(t *testing.T, events []*ctrlv1.DeploymentChangeEvent) map[rpc.Resource]*ctrlv1.DeploymentChangeEvent {
	t.Helper()
	m := map[rpc.Resource]*ctrlv1.DeploymentChangeEvent{}
	for _, ev := range events {
		r, _, ok := rpc.ResourceOf(ev)
		if !ok {
			t.Fatalf("not a resource event: %v", ev)
		}
		if m[r] != nil {
			t.Fatalf("%s twice", r)
		}
		m[r] = ev
	}
	return m
}

// A batch, through the wire and unpacked, is the events it was made of,
// each versioned as the batch: every field as it was, whatever the group
// shared.
func TestABatchUnpacksIntoTheEventsItWasMadeOf(t *testing.T) {
	const version = 4711
	want := map[rpc.Resource]*ctrlv1.DeploymentChangeEvent{}
	for r, ev := range byResource(t, page()) {
		ev.Version = version
		want[r] = ev
	}
	for _, maxBytes := range []int{1 << 20, 200, 1} {
		t.Run(fmt.Sprint("maxBytes=", maxBytes), func(t *testing.T) {
			in := page()
			var alone int
			for _, ev := range in {
				ev.Version = 99 // the batch's stands for it
				alone += proto.Size(ev)
			}
			batches := rpc.Batch(version, in, maxBytes)
			var got []*ctrlv1.DeploymentChangeEvent
			var sent int
			for _, b := range batches {
				wire, err := proto.Marshal(b)
				if err != nil {
					t.Fatal(err)
				}
				sent += len(wire)
				var back ctrlv1.DeploymentChangeEvent
				if err := proto.Unmarshal(wire, &back); err != nil {
					t.Fatal(err)
				}
				events, err := rpc.Unbatch(&back)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, events...)
			}
			gotBy := byResource(t, got)
			if len(gotBy) != len(want) {
				t.Fatalf("%d events unpacked, want %d", len(gotBy), len(want))
			}
			for r, w := range want {
				if !proto.Equal(gotBy[r], w) {
					t.Errorf("%s: unpacked\n%v\nwant\n%v", r, gotBy[r], w)
				}
			}
			if maxBytes == 1<<20 {
				if len(batches) != 1 {
					t.Errorf("%d batches, want 1", len(batches))
				}
				if sent >= alone*3/4 {
					t.Errorf("the batch took %d bytes, the events alone %d: the groups share little", sent, alone)
				}
			}
			if maxBytes == 1 && len(batches) != len(in) {
				t.Errorf("%d batches of at most 1 byte, want one per event (%d)", len(batches), len(in))
			}
		})
	}
}

// A group shares only what all its deployments hold alike: no value is
// ever taken from another deployment.
func TestAGroupSharesOnlyWhatAllHoldAlike(t *testing.T) {
	in := []*ctrlv1.DeploymentChangeEvent{
		apply(&ctrlv1.DeploymentState{DeploymentId: "a", Namespace: "n", Image: "app:1", Replicas: 3, Port: 8080}),
		apply(&ctrlv1.DeploymentState{DeploymentId: "b", Namespace: "n", Image: "app:1", Replicas: 0, Port: 8080}),
	}
	b := rpc.Batch(1, in, 1<<20)[0].GetBatch()
	if len(b.GetDeployments()) != 1 {
		t.Fatalf("%d groups, want 1", len(b.GetDeployments()))
	}
	g := b.GetDeployments()[0]
	want := &ctrlv1.DeploymentState{Namespace: "n", Image: "app:1", Port: 8080}
	if !proto.Equal(g.GetShared(), want) {
		t.Errorf("shared %v, want %v", g.GetShared(), want)
	}
	if r := g.GetDeployments()[0].GetReplicas(); r != 3 {
		t.Errorf("a's replicas in the group: %d, want 3", r)
	}
}

// A field a newer ctrld shares, which this build does not know, reaches
// every deployment of the group as an unknown field, as it would in an
// event of its own.
func TestAnUnknownSharedFieldReachesEachDeployment(t *testing.T) {
	unknown := protowire.AppendTag(nil, 99, protowire.BytesType)
	unknown = protowire.AppendString(unknown, "from the future")
	shared := &ctrlv1.DeploymentState{Namespace: "n"}
	shared.ProtoReflect().SetUnknown(unknown)
	ev := &ctrlv1.DeploymentChangeEvent{Version: 7, Event: &ctrlv1.DeploymentChangeEvent_Batch{Batch: &ctrlv1.EventBatch{
		Deployments: []*ctrlv1.DeploymentGroup{{Shared: shared, Deployments: []*ctrlv1.DeploymentState{{DeploymentId: "a"}, {DeploymentId: "b"}}}},
	}}}
	events, err := rpc.Unbatch(ev)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		s := e.GetDeployment().GetDeployment()
		if s.GetNamespace() != "n" || string(s.ProtoReflect().GetUnknown()) != string(unknown) || e.GetVersion() != 7 {
			t.Errorf("unpacked %v (unknown %q)", e, s.ProtoReflect().GetUnknown())
		}
	}
}

// A batch holds resource events only: a bookmark, a resync request or a
// batch inside one is refused, never passed on (a bookmark inside would
// be acked as if the events after it had come).
func TestABatchHoldsResourceEventsOnly(t *testing.T) {
	for name, inner := range map[string]*ctrlv1.DeploymentChangeEvent{
		"bookmark": {Event: &ctrlv1.DeploymentChangeEvent_Bookmark{Bookmark: &ctrlv1.Bookmark{ResumeVersion: 9, FullSyncDone: true}}},
		"resync":   {Event: &ctrlv1.DeploymentChangeEvent_ResyncRequired{ResyncRequired: &ctrlv1.ResyncRequired{}}},
		"batch":    {Event: &ctrlv1.DeploymentChangeEvent_Batch{Batch: &ctrlv1.EventBatch{}}},
		"nothing":  {},
	} {
		ev := &ctrlv1.DeploymentChangeEvent{Version: 1, Event: &ctrlv1.DeploymentChangeEvent_Batch{Batch: &ctrlv1.EventBatch{
			Events: []*ctrlv1.DeploymentChangeEvent{apply(&ctrlv1.DeploymentState{DeploymentId: "a"}), inner},
		}}}
		if events, err := rpc.Unbatch(ev); !errors.Is(err, rpc.ErrBadBatch) {
			t.Errorf("%s in a batch: %d events, error %v; want %v", name, len(events), err, rpc.ErrBadBatch)
		}
	}
	// Anything else is itself.
	b := &ctrlv1.DeploymentChangeEvent{Version: 3, Event: &ctrlv1.DeploymentChangeEvent_Bookmark{Bookmark: &ctrlv1.Bookmark{ResumeVersion: 3}}}
	if events, err := rpc.Unbatch(b); err != nil || len(events) != 1 || events[0] != b {
		t.Errorf("Unbatch(bookmark) = %v, %v", events, err)
	}
}

// A batch stays within its bound, which keeps it within gRPC's message
// limit: the size Batch reckons a deployment at is never below its size.
func TestABatchStaysWithinItsBound(t *testing.T) {
	big := strings.Repeat("x", 1000)
	in := page()
	for i := range 50 {
		in = append(in, apply(&ctrlv1.DeploymentState{DeploymentId: fmt.Sprintf("big-%d", i), Namespace: big[:63], Image: big,
			Replicas: 1 << 30, CpuMillicores: -1, MemoryMib: 1 << 30, Port: 65535, Command: []string{big, big}, Env: map[string]string{big: big, "k": big},
			SpecHash: big[:63], WorkspaceId: big, EnvironmentId: big}))
	}
	const maxBytes = 4000
	var alone []int
	for _, ev := range in {
		ev.Version = 1 << 60
		alone = append(alone, proto.Size(ev))
	}
	i := 0
	for _, b := range rpc.Batch(1<<60, in, maxBytes) {
		n := len(b.GetBatch().GetEvents())
		for _, g := range b.GetBatch().GetDeployments() {
			n += len(g.GetDeployments())
		}
		if size := proto.Size(b); size > maxBytes && n > 1 {
			t.Errorf("a batch of %d events takes %d bytes, over %d", n, size, maxBytes)
		} else if n == 1 && size > maxBytes && alone[i] <= maxBytes {
			t.Errorf("an event of %d bytes alone in a batch of %d bytes", alone[i], size)
		}
		i += n
	}
	if i != len(in) {
		t.Fatalf("%d events batched, want %d", i, len(in))
	}
}
