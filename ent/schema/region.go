package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"

	"github.com/deploysync/deploysync/internal/validate"
)

// Region is a Kubernetes cluster agents serve. Only known regions accept
// desired state; operators pause a region's stream or force it to resync
// here, where every ctrld replica sees it.
type Region struct{ ent.Schema }

// Fields of the Region.
func (Region) Fields() []ent.Field {
	return []ent.Field{
		field.String("id").Immutable().Validate(validate.Region),
		field.Bool("paused").Default(false),
		// paused_at is when the current pause began (unset while running).
		field.Time("paused_at").Optional().Nillable().SchemaType(microseconds),
		// resync_generation goes up by one per forced resync; a stream that
		// sees it rise tells its agent to resync.
		field.Int64("resync_generation").Default(0),
	}
}

// Mixin of the Region.
func (Region) Mixin() []ent.Mixin { return []ent.Mixin{Timestamps{}} }
