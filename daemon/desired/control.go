package desired

import (
	"context"
	"fmt"
	"time"

	"entgo.io/ent/dialect/sql"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/region"
	"github.com/deploysync/deploysync/internal/validate"
)

// MaxResyncReason bounds the reason an operator gives for a forced resync.
const MaxResyncReason = 1024

// SetRegionPaused pauses (or resumes) streaming to a region: its changes
// are kept and delivered on resume. A pause records since when; pausing a
// paused region keeps that time.
func (s *Store) SetRegionPaused(ctx context.Context, name string, paused bool) error {
	return s.updateRegion(ctx, name, func(u *ent.RegionUpdateOne) {
		u.SetPaused(paused)
		if !paused {
			u.ClearPausedAt()
			return
		}
		u.Modify(func(b *sql.UpdateBuilder) {
			b.Set(region.FieldPausedAt, sql.Expr("COALESCE("+region.FieldPausedAt+", ?)", time.Now().UTC()))
		})
	})
}

// ForceResync makes the region's agents do a full sync: streams that see
// the region's resync generation rise tell their agent to resync.
func (s *Store) ForceResync(ctx context.Context, name, reason string) error {
	if n := len(reason); n > MaxResyncReason {
		return fmt.Errorf("reason: %w: at most %d bytes, got %d", ErrInvalid, MaxResyncReason, n)
	}
	return s.updateRegion(ctx, name, func(u *ent.RegionUpdateOne) { u.AddResyncGeneration(1) })
}

// updateRegion changes a registered region's control state.
func (s *Store) updateRegion(ctx context.Context, name string, set func(*ent.RegionUpdateOne)) error {
	if err := validate.Region(name); err != nil {
		return fmt.Errorf("region: %w: %v", ErrInvalid, err)
	}
	u := s.client.Region.UpdateOneID(name)
	set(u)
	if err := u.Exec(ctx); err != nil {
		if ent.IsNotFound(err) {
			return fmt.Errorf("region %q: %w", name, ErrUnknownRegion)
		}
		return err
	}
	return nil
}
