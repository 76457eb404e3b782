package reconcile

import (
	"slices"
	"testing"

	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Every kind of resource the stream can carry has exactly one entry in the
// registry, and the registry has none the stream cannot carry: a kind added
// to the proto (and to rpc.ResourceOf) without a controller fails here, not
// as an agent that retries its events forever. The kinds are found from the
// proto itself: an event with each member of its oneof set, through
// rpc.ResourceOf.
func TestEveryKindTheStreamCarriesHasOneController(t *testing.T) {
	var carried []string
	event := (&ctrlv1.DeploymentChangeEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event")
	if event == nil {
		t.Fatal("DeploymentChangeEvent has no oneof named event")
	}
	for i := range event.Fields().Len() {
		field := event.Fields().Get(i)
		ev := &ctrlv1.DeploymentChangeEvent{}
		m := ev.ProtoReflect()
		m.Set(field, m.NewField(field))
		if r, _, ok := rpc.ResourceOf(ev); ok {
			carried = append(carried, r.Kind)
		}
	}
	if len(carried) == 0 {
		t.Fatal("rpc.ResourceOf names no kind for any member of the event oneof")
	}

	var registered []string
	for _, k := range kinds {
		registered = append(registered, k.kindName())
	}
	for _, kind := range carried {
		if n := count(registered, kind); n != 1 {
			t.Errorf("kind %q, which the stream carries, has %d controllers in the registry, want 1", kind, n)
		}
	}
	for _, kind := range registered {
		if !slices.Contains(carried, kind) {
			t.Errorf("kind %q has a controller but the stream carries no such kind", kind)
		}
	}
}

func count(names []string, name string) int {
	n := 0
	for _, s := range names {
		if s == name {
			n++
		}
	}
	return n
}
