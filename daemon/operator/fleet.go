package operator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/fleet"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/rollout"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// HaltRollouts implements ctrlv1.OperatorServiceServer.
func (s *Service) HaltRollouts(ctx context.Context, req *ctrlv1.HaltRolloutsRequest) (*ctrlv1.HaltRolloutsResponse, error) {
	var out *ctrlv1.FleetHalt
	err := s.act(ctx, "fleet.halt", scopeOf(req.GetScope()).String(), req, func(ctx context.Context) error {
		h, paused, err := s.desired.Halt(ctx, scopeOf(req.GetScope()), req.GetReason())
		if err != nil {
			return under(err, "", "scope.")
		}
		out = haltMessage(fleet.HaltOf(h), paused, paused)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.HaltRolloutsResponse{Halt: out}, nil
}

// ResumeRollouts implements ctrlv1.OperatorServiceServer.
func (s *Service) ResumeRollouts(ctx context.Context, req *ctrlv1.ResumeRolloutsRequest) (*ctrlv1.ResumeRolloutsResponse, error) {
	var resumed, held int
	err := s.act(ctx, "fleet.resume", fmt.Sprintf("halt %d", req.GetHaltId()), req, func(ctx context.Context) (err error) {
		resumed, held, err = s.desired.Resume(ctx, int(req.GetHaltId()))
		return err
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.ResumeRolloutsResponse{Resumed: int32(resumed), StillHeld: int32(held)}, nil
}

// SetFreezeWindow implements ctrlv1.OperatorServiceServer.
func (s *Service) SetFreezeWindow(ctx context.Context, req *ctrlv1.SetFreezeWindowRequest) (*ctrlv1.SetFreezeWindowResponse, error) {
	m := req.GetWindow()
	var out *ctrlv1.FreezeWindow
	err := s.act(ctx, "fleet.freeze-window.set", m.GetName(), req, func(ctx context.Context) error {
		if m == nil {
			return fmt.Errorf("window: %w: required", desired.ErrInvalid)
		}
		if m.GetScope().GetRegion() != "" {
			return fmt.Errorf("window.scope.region: %w: a freeze window is an environment's or every environment's", desired.ErrInvalid)
		}
		w := fleet.Window{Name: m.GetName(), WorkspaceID: m.GetScope().GetWorkspaceId(), EnvironmentID: m.GetScope().GetEnvironmentId(),
			Schedule: m.GetSchedule(), Duration: m.GetDuration().AsDuration()}
		if m.StartsAt != nil {
			w.StartsAt = m.GetStartsAt().AsTime()
		}
		if m.EndsAt != nil {
			w.EndsAt = m.GetEndsAt().AsTime()
		}
		row, err := s.desired.SetFreezeWindow(ctx, w, m.GetTimeZone(), m.GetReason())
		if err != nil {
			return under(err, "window.", "window.scope.")
		}
		now, err := s.clock(ctx)
		if err != nil {
			now = time.Now()
		}
		out = windowMessage(row, now.Add(s.desired.WindowOffset()))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.SetFreezeWindowResponse{Window: out}, nil
}

// DeleteFreezeWindow implements ctrlv1.OperatorServiceServer.
func (s *Service) DeleteFreezeWindow(ctx context.Context, req *ctrlv1.DeleteFreezeWindowRequest) (*ctrlv1.DeleteFreezeWindowResponse, error) {
	err := s.act(ctx, "fleet.freeze-window.delete", req.GetName(), req, func(ctx context.Context) error {
		return s.desired.DeleteFreezeWindow(ctx, req.GetName())
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.DeleteFreezeWindowResponse{}, nil
}

// SetPacingBound implements ctrlv1.OperatorServiceServer.
func (s *Service) SetPacingBound(ctx context.Context, req *ctrlv1.SetPacingBoundRequest) (*ctrlv1.SetPacingBoundResponse, error) {
	scope := scopeOf(req.GetScope())
	err := s.act(ctx, "fleet.pacing.set", scope.String(), req, func(ctx context.Context) error {
		return under(s.desired.SetPacingBound(ctx, scope, int(req.GetMax()), req.GetRemove()), "", "scope.")
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.SetPacingBoundResponse{}, nil
}

// GetFleet implements ctrlv1.OperatorServiceServer.
func (s *Service) GetFleet(ctx context.Context, _ *ctrlv1.GetFleetRequest) (*ctrlv1.GetFleetResponse, error) {
	rows, err := fleet.InFlight(s.client).All(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	plan, now, err := s.planOf(ctx, rows)
	if err != nil {
		return nil, s.viewError(err)
	}
	state := plan.State()
	out := &ctrlv1.GetFleetResponse{Now: timestamppb.New(now)}
	for _, h := range state.Halts {
		holding := 0
		for _, r := range rows {
			if r.HaltID != nil && *r.HaltID == h.ID || plan.Of(r.ID).HaltID == h.ID && r.State == rollout.StateQueued {
				holding++
			}
		}
		out.Halts = append(out.Halts, haltMessage(h, 0, holding))
	}
	windows, err := s.client.FreezeWindow.Query().All(ctx)
	if err != nil {
		return nil, s.viewError(err)
	}
	for _, w := range windows {
		out.Windows = append(out.Windows, windowMessage(w, plan.Now()))
	}
	for _, b := range state.Bounds {
		inUse, queued := plan.Usage(b)
		out.Bounds = append(out.Bounds, &ctrlv1.PacingBound{Scope: scopeMessage(b.Scope), Max: int32(b.Max),
			InUse: int32(inUse), Queued: int32(queued)})
	}
	for _, r := range rows {
		out.Rollouts = append(out.Rollouts, rolloutMessage(r, now, nil, plan))
	}
	return out, nil
}

// plan reads the fleet's controls and judges them at the database's
// clock, for the views.
func (s *Service) plan(ctx context.Context) (*fleet.Plan, time.Time, error) {
	return s.planOf(ctx, nil)
}

// planOf is plan judged with inFlight, every rollout in flight read with
// its deployment (fleet.InFlight), when the caller has them: the views
// read them once, not again for the plan. nil reads them.
func (s *Service) planOf(ctx context.Context, inFlight []*ent.Rollout) (*fleet.Plan, time.Time, error) {
	now, err := s.clock(ctx)
	if err != nil {
		return nil, now, err
	}
	var state *fleet.State
	if inFlight == nil {
		state, err = fleet.Read(ctx, s.client)
	} else {
		state, err = fleet.ReadControls(ctx, s.client)
	}
	if err != nil {
		return nil, now, err
	}
	ordered := slices.SortedFunc(slices.Values(inFlight), func(a, b *ent.Rollout) int { return cmp.Compare(a.ID, b.ID) })
	for _, r := range ordered {
		state.Rollouts = append(state.Rollouts, fleet.RolloutOf(r))
	}
	return state.Plan(now.Add(s.desired.WindowOffset())), now, nil
}

// withFleet puts a call's break-glass and retry reasons on ctx, for
// desired to act on (and refuse when they break its rules).
func withFleet(ctx context.Context, breakGlass, retryFailed string) (context.Context, error) {
	if breakGlass != "" {
		ctx = desired.WithBreakGlass(ctx, breakGlass)
	}
	if retryFailed != "" {
		ctx = desired.WithRetryFailed(ctx, retryFailed)
	}
	return ctx, desired.CheckFleetContext(ctx)
}

// holdOf fills the rollout's hold from the plan: what holds its first
// wave (queued) or its next one, or the halt that paused it.
func holdOf(m *ctrlv1.Rollout, r *ent.Rollout, plan *fleet.Plan) {
	m.BreakGlassBy, m.BreakGlassReason = r.BreakGlassBy, r.BreakGlassReason
	if r.HaltID != nil {
		m.HaltId = int64(*r.HaltID)
	}
	if plan == nil || r.InFlight == nil {
		return
	}
	if fr, ok := plan.Rollout(r.ID); ok {
		m.WorkspaceId, m.EnvironmentId = fr.WorkspaceID, fr.EnvironmentID
	}
	if r.State == rollout.StatePaused && r.HaltID != nil {
		m.Held, m.HeldKind = r.Reason, string(fleet.KindHalt)
		return
	}
	h := plan.Of(r.ID)
	if !h.Held() {
		return
	}
	m.Held, m.HeldKind, m.QueuePlace = h.Why, string(h.Kind), int32(h.Place)
	if r.State != rollout.StateQueued {
		m.Held = fmt.Sprintf("wave %d: %s", r.Wave+2, h.Why)
	}
	if !h.Until.IsZero() {
		m.HeldUntil = timestamppb.New(h.Until)
	}
}

func scopeOf(m *ctrlv1.FleetScope) fleet.Scope {
	return fleet.Scope{WorkspaceID: m.GetWorkspaceId(), EnvironmentID: m.GetEnvironmentId(), Region: m.GetRegion()}
}

func scopeMessage(s fleet.Scope) *ctrlv1.FleetScope {
	return &ctrlv1.FleetScope{WorkspaceId: s.WorkspaceID, EnvironmentId: s.EnvironmentID, Region: s.Region}
}

func haltMessage(h fleet.Halt, paused, holding int) *ctrlv1.FleetHalt {
	return &ctrlv1.FleetHalt{Id: int64(h.ID), Scope: scopeMessage(h.Scope), Reason: h.Reason, Actor: h.Actor,
		CreatedAt: timestamppb.New(h.Since), Paused: int32(paused), Holding: int32(holding)}
}

// windowMessage is a window row as the API gives it, judged at now.
func windowMessage(w *ent.FreezeWindow, now time.Time) *ctrlv1.FreezeWindow {
	m := &ctrlv1.FreezeWindow{Name: w.Name, Scope: &ctrlv1.FleetScope{WorkspaceId: w.WorkspaceID, EnvironmentId: w.EnvironmentID},
		Schedule: w.Schedule, TimeZone: w.TimeZone, Reason: w.Reason, Actor: w.Actor}
	if w.DurationSeconds > 0 {
		m.Duration = durationpb.New(time.Duration(w.DurationSeconds) * time.Second)
	}
	if w.StartsAt != nil {
		m.StartsAt = timestamppb.New(*w.StartsAt)
	}
	if w.EndsAt != nil {
		m.EndsAt = timestamppb.New(*w.EndsAt)
	}
	parsed, err := fleet.WindowOf(w)
	if err != nil {
		m.Closed = true // as the plan reads one it cannot parse
		return m
	}
	if until, closed := parsed.ClosedUntil(now); closed {
		m.Closed, m.ClosedUntil = true, timestamppb.New(until)
	}
	if next := parsed.NextClose(now); !next.IsZero() {
		m.NextClose = timestamppb.New(next)
	}
	return m
}

// scopeFields are the fields of a FleetScope, as desired names them.
var scopeFields = []string{"workspace_id:", "environment_id:", "region:"}

// fieldError is desired's error naming its field as the request does:
// a scope's fields under scope (the FleetScope's path), the others under
// fields.
type fieldError struct {
	path string
	err  error
}

func (f fieldError) Error() string { return f.path + f.err.Error() }

func (f fieldError) Unwrap() error { return f.err }

// under names the field of an invalid input error as the request does;
// other errors (nil too) stay as they are.
func under(err error, fields, scope string) error {
	if !errors.Is(err, desired.ErrInvalid) && !errors.Is(err, desired.ErrUnknownRegion) {
		return err
	}
	msg := err.Error()
	for _, f := range scopeFields {
		if strings.HasPrefix(msg, f) {
			return fieldError{scope, err}
		}
	}
	if fields == "" || !strings.Contains(msg, ": ") {
		return err
	}
	return fieldError{fields, err}
}
