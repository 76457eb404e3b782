package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"

	"github.com/deploysync/deploysync/ent/jsontype"
)

// Rollout is a deployment's move from one spec to the next, region wave by
// region wave (daemon/rollout drives it). The regions move by updates of
// their deployment_topology rows, which write the change rows; this row is
// the rollout's own bookkeeping, which agents never see: no change rows.
//
// Every write of a rollout is conditional on version and increments it,
// in the same transaction as the topology updates of the step: two ctrld
// replicas that decide the same step race on that row, and one of them
// changes nothing (on one server the second UPDATE matches no row; on
// Galera the second node's commit fails certification on the row).
type Rollout struct{ ent.Schema }

// Fields of the Rollout.
func (Rollout) Fields() []ent.Field {
	return []ent.Field{
		field.String("deployment_id").Immutable(),
		// in_flight is the deployment's ID while the rollout runs and NULL
		// once it ends: its unique index lets a deployment have one
		// rollout in flight, on every node of a cluster.
		field.String("in_flight").Optional().Nillable().Unique(),
		// revision is the deployment revision the rollout moves to;
		// from_revision the one it moves from.
		field.Int("revision").Immutable(),
		field.Int("from_revision").Immutable(),
		field.JSON("from_spec", jsontype.Spec{}).Immutable(),
		field.JSON("to_spec", jsontype.Spec{}).Immutable(),
		field.JSON("strategy", jsontype.Strategy{}).Immutable(),
		// state: queued (in flight, no wave started: a fleet control
		// holds it, see daemon/fleet), progressing, paused (by an
		// operator, or by the fleet halt halt_id names), halted (a wave
		// failed under on_failure pause), succeeded, rolled_back.
		field.Enum("state").Values("queued", "progressing", "paused", "halted", "succeeded", "rolled_back").Default("progressing"),
		// halt_id is the fleet halt that paused it (NULL when an
		// operator did, or nothing did): lifting that halt resumes it.
		field.Int("halt_id").Optional().Nillable(),
		// break_glass_by is the operator who took it through the fleet's
		// holds (halts, freeze windows, pacing) on purpose, with a reason
		// ("" for none): audited, and shown on the rollout.
		field.String("break_glass_by").Default("").MaxLen(255),
		field.String("break_glass_reason").Default("").MaxLen(1024),
		// wave is the index of the wave in progress.
		field.Int("wave").Default(0),
		field.JSON("regions", map[string]jsontype.RegionRollout{}),
		// reason is why it halted or rolled back, with the evidence.
		field.String("reason").Default("").MaxLen(1024),
		field.String("actor").Immutable().Default("").MaxLen(255),
		field.Int64("version").Default(1),
		field.Time("created_at").Default(now).Immutable().SchemaType(microseconds),
		field.Time("updated_at").Default(now).SchemaType(microseconds),
		field.Time("finished_at").Optional().Nillable().SchemaType(microseconds),
	}
}

// Edges of the Rollout.
func (Rollout) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("deployment", Deployment.Type).Ref("rollouts").Field("deployment_id").Unique().Required().Immutable(),
	}
}

// Indexes of the Rollout.
func (Rollout) Indexes() []ent.Index {
	return []ent.Index{
		// The driver reads the rollouts in flight; history reads a
		// deployment's, newest first.
		index.Fields("state"),
		index.Fields("deployment_id", "created_at"),
	}
}

// RolloutStrategy is an environment's rollout strategy, the default for
// its deployments' deploys, updates and rollbacks. Control-plane
// bookkeeping: no change rows.
type RolloutStrategy struct{ ent.Schema }

// Annotations of the RolloutStrategy.
func (RolloutStrategy) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "rollout_strategies"}}
}

// Fields of the RolloutStrategy.
func (RolloutStrategy) Fields() []ent.Field {
	return []ent.Field{
		field.String("workspace_id").Immutable(),
		field.String("environment_id").Immutable(),
		field.JSON("strategy", jsontype.Strategy{}),
		field.String("actor").Default("").MaxLen(255),
		field.Time("updated_at").Default(now).UpdateDefault(now).SchemaType(microseconds),
	}
}

// Indexes of the RolloutStrategy.
func (RolloutStrategy) Indexes() []ent.Index {
	return []ent.Index{index.Fields("workspace_id", "environment_id").Unique()}
}
