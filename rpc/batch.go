package rpc

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// ErrBadBatch: a batch holds something no batch may (a bookmark, a resync
// request, another batch, an unknown event).
var ErrBadBatch = errors.New("bad event batch")

// Batch packs resource events of one version (a full sync's page) into
// batch events (ctrlv1.EventBatch) of about maxBytes of events at most
// each, versioned version; an event larger than maxBytes by itself is a
// batch of its own. Deployments' applies go into groups by namespace,
// whose members share, once, every field they all hold alike: a region's
// deployments mostly share their namespace, and often their port and
// resources. Batch takes events over: it clears the shared fields in the
// states it groups.
//
// events must be resource events, of distinct resources; their versions
// are dropped (the batch's stands for each).
func Batch(version uint64, events []*ctrlv1.DeploymentChangeEvent, maxBytes int) []*ctrlv1.DeploymentChangeEvent {
	var batches []*ctrlv1.DeploymentChangeEvent
	for start := 0; start < len(events); {
		end, size := start, 0
		for end < len(events) {
			// The event as it would be sent alone bounds what it adds:
			// in a group it sends less.
			n := sizeBound(events[end])
			if end > start && size+n > maxBytes {
				break
			}
			size += n
			end++
		}
		batches = append(batches, &ctrlv1.DeploymentChangeEvent{Version: version,
			Event: &ctrlv1.DeploymentChangeEvent_Batch{Batch: batch(events[start:end])}})
		start = end
	}
	return batches
}

// sizeBound is at least ev's encoded size: a deployment's reckoned from
// its fields (proto.Size walks the message by reflection, a fifth of a
// full sync's CPU on ctrld's side), any other event's measured.
func sizeBound(ev *ctrlv1.DeploymentChangeEvent) int {
	s := ev.GetDeployment().GetDeployment()
	if s == nil || len(s.ProtoReflect().GetUnknown()) > 0 {
		return proto.Size(ev)
	}
	// A field's tag and length take at most 6 bytes, an integer field
	// 11; the event and its deployment event, with their version and
	// action, 40 at most.
	const field, integer = 6, 11
	n := 40 + 4*integer + 6*field + len(s.DeploymentId) + len(s.WorkspaceId) + len(s.EnvironmentId) +
		len(s.Namespace) + len(s.Image) + len(s.SpecHash)
	for _, c := range s.Command {
		n += field + len(c)
	}
	for k, v := range s.Env {
		n += 3*field + len(k) + len(v)
	}
	return n
}

// batch is one EventBatch of events.
func batch(events []*ctrlv1.DeploymentChangeEvent) *ctrlv1.EventBatch {
	b := &ctrlv1.EventBatch{}
	groups := map[string]*ctrlv1.DeploymentGroup{}
	for _, ev := range events {
		ev.Version = 0
		d := ev.GetDeployment()
		if d.GetAction() != ctrlv1.Action_ACTION_APPLY || d.GetDeployment() == nil {
			b.Events = append(b.Events, ev)
			continue
		}
		ns := d.GetDeployment().GetNamespace()
		g := groups[ns]
		if g == nil {
			g = &ctrlv1.DeploymentGroup{}
			groups[ns] = g
			b.Deployments = append(b.Deployments, g)
		}
		g.Deployments = append(g.Deployments, d.GetDeployment())
	}
	for _, g := range b.Deployments {
		g.Shared = share(g.Deployments)
	}
	return b
}

// share moves the fields all of states hold alike (and set) into a state
// of their own, which it returns: nil when there is nothing to share.
func share(states []*ctrlv1.DeploymentState) *ctrlv1.DeploymentState {
	if len(states) < 2 {
		return nil
	}
	shared := &ctrlv1.DeploymentState{}
	// Not the ID (each has its own), and no field this build does not know.
	some := shareField(states, shared, func(s *ctrlv1.DeploymentState) *string { return &s.Namespace })
	some = shareField(states, shared, func(s *ctrlv1.DeploymentState) *string { return &s.Image }) || some
	some = shareField(states, shared, func(s *ctrlv1.DeploymentState) *int32 { return &s.Replicas }) || some
	some = shareField(states, shared, func(s *ctrlv1.DeploymentState) *int32 { return &s.CpuMillicores }) || some
	some = shareField(states, shared, func(s *ctrlv1.DeploymentState) *int32 { return &s.MemoryMib }) || some
	some = shareField(states, shared, func(s *ctrlv1.DeploymentState) *int32 { return &s.Port }) || some
	some = shareField(states, shared, func(s *ctrlv1.DeploymentState) *string { return &s.SpecHash }) || some
	if first := states[0].Command; len(first) > 0 && all(states, func(s *ctrlv1.DeploymentState) bool { return slices.Equal(s.Command, first) }) {
		shared.Command, some = first, true
		for _, s := range states {
			s.Command = nil
		}
	}
	if first := states[0].Env; len(first) > 0 && all(states, func(s *ctrlv1.DeploymentState) bool { return maps.Equal(s.Env, first) }) {
		shared.Env, some = first, true
		for _, s := range states {
			s.Env = nil
		}
	}
	if !some {
		return nil
	}
	return shared
}

// shareField moves field into shared when it is set and alike in all of
// states, clearing it in each, and says whether it did.
func shareField[T comparable](states []*ctrlv1.DeploymentState, shared *ctrlv1.DeploymentState, field func(*ctrlv1.DeploymentState) *T) bool {
	var unset T
	first := *field(states[0])
	if first == unset || !all(states, func(s *ctrlv1.DeploymentState) bool { return *field(s) == first }) {
		return false
	}
	*field(shared) = first
	for _, s := range states {
		*field(s) = unset
	}
	return true
}

func all(states []*ctrlv1.DeploymentState, ok func(*ctrlv1.DeploymentState) bool) bool {
	for _, s := range states {
		if !ok(s) {
			return false
		}
	}
	return true
}

// Unbatch returns the events ev stands for: a batch's, each versioned as
// the batch, in the order they are to be handled (the deployments' groups
// first, then the other events), or ev itself when it is no batch. A batch
// holding anything but resource events is an ErrBadBatch. The events hold
// the batch's messages: ev is not to be used after.
func Unbatch(ev *ctrlv1.DeploymentChangeEvent) ([]*ctrlv1.DeploymentChangeEvent, error) {
	b := ev.GetBatch()
	if b == nil {
		return []*ctrlv1.DeploymentChangeEvent{ev}, nil
	}
	n := len(b.GetEvents())
	for _, g := range b.GetDeployments() {
		n += len(g.GetDeployments())
	}
	events := make([]*ctrlv1.DeploymentChangeEvent, 0, n)
	for _, g := range b.GetDeployments() {
		for _, d := range g.GetDeployments() {
			if shared := g.GetShared(); shared != nil {
				// Merged, not copied field by field: a field a newer ctrld
				// shares that this build does not know stays, as unknown
				// fields do in an event of its own. The two hold no field
				// both, so shared merged into d is d merged into shared.
				proto.Merge(d, shared)
			}
			events = append(events, &ctrlv1.DeploymentChangeEvent{Version: ev.GetVersion(),
				Event: &ctrlv1.DeploymentChangeEvent_Deployment{Deployment: &ctrlv1.DeploymentEvent{
					Action: ctrlv1.Action_ACTION_APPLY, Deployment: d}}})
		}
	}
	for _, e := range b.GetEvents() {
		if _, _, ok := ResourceOf(e); !ok {
			return nil, fmt.Errorf("%w: it holds a %T", ErrBadBatch, e.GetEvent())
		}
		e.Version = ev.GetVersion()
		events = append(events, e)
	}
	return events, nil
}
