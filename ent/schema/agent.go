package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"

	"github.com/deploysync/deploysync/internal/validate"
)

// Agent is what ctrld knows of one agentd process: the cursor it has
// applied up to, when it last spoke, and how it is doing. The console's lag
// view is read from here.
type Agent struct{ ent.Schema }

// Fields of the Agent.
func (Agent) Fields() []ent.Field {
	return []ent.Field{
		field.String("region").Immutable().Validate(validate.Region),
		// identity tells replicas apart, e.g. the Pod or host name.
		field.String("identity").Immutable().NotEmpty().MaxLen(253),
		field.Uint64("acked_cursor").Default(0),
		field.Time("last_heartbeat").Optional().Nillable().SchemaType(microseconds),
		field.Time("last_full_sync").Optional().Nillable().SchemaType(microseconds),
		field.String("version").Default(""),
		field.String("last_error").Default("").MaxLen(2048),
		// last_full_sync_error says why the agent's last full sync did not
		// complete; empty once one completes.
		field.String("last_full_sync_error").Default("").MaxLen(2048),
		// connected_to is the ctrld instance holding its stream, if any.
		field.String("connected_to").Default(""),
		field.Time("connected_since").Optional().Nillable().SchemaType(microseconds),
		// synced_generation is the region's resync_generation when this
		// agent's last full sync began; a lower value than the region's
		// means an operator forced a resync it has not done yet.
		field.Int64("synced_generation").Default(0),
	}
}

// Indexes of the Agent.
func (Agent) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("region", "identity").Unique(),
	}
}

// Mixin of the Agent.
func (Agent) Mixin() []ent.Mixin { return []ent.Mixin{Timestamps{}} }
