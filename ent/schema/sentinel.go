package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"

	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/internal/validate"
)

// Sentinel is an environment's gateway in one region: desired fields set by
// the control plane, actual fields (available_replicas, health) reported by
// the agent without emitting a change.
type Sentinel struct{ ent.Schema }

// Fields of the Sentinel.
func (Sentinel) Fields() []ent.Field {
	return []ent.Field{
		field.String("id").Immutable().Validate(validate.ID),
		field.String("workspace_id").Immutable().Validate(validate.ID),
		field.String("environment_id").Immutable().Validate(validate.ID),
		field.String("region").Immutable().Validate(validate.Region),
		field.String("image").Validate(validate.Image),
		field.Int("replicas").Validate(validate.Replicas),
		field.Int("cpu_millicores").Validate(validate.CPUMillicores),
		field.Int("memory_mib").Validate(validate.MemoryMiB),
		field.Enum("desired_state").Values("running", "stopped").Default("running"),
		// Actual state.
		field.Int("available_replicas").Default(0).NonNegative(),
		field.Enum("health").Values("unknown", "healthy", "unhealthy").Default("unknown"),
	}
}

// Indexes of the Sentinel.
func (Sentinel) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("environment_id", "region").Unique(),
		index.Fields("region"),
	}
}

// Mixin of the Sentinel.
func (Sentinel) Mixin() []ent.Mixin { return []ent.Mixin{Timestamps{}} }

// Hooks of the Sentinel: its deployment_changes rows (see ent/changefeed).
func (Sentinel) Hooks() []ent.Hook { return []ent.Hook{changefeed.Sentinel()} }
