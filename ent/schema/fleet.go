package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// The fleet's controls (daemon/fleet says what they mean): halts, freeze
// windows and pacing bounds hold rollouts across deployments, and failed
// specs keep a spec a gate failed from shipping again. All of it is
// control-plane bookkeeping that agents never see: no change rows.
//
// A scope is a workspace and environment, a region, or, with all three
// empty, every environment.

// FleetControl is one row (id 1) whose generation every fleet control's
// change and every start of a wave increments, in its transaction: they
// run one at a time, so a start cannot miss a halt or a window committed
// while it ran, nor two starts exceed a pacing bound together. On one
// server the row lock orders them; on Galera, where row locks hold on one
// node only, the row is in both write sets and certification fails the
// later, whose rerun reads what the other wrote.
type FleetControl struct{ ent.Schema }

// Annotations of the FleetControl.
func (FleetControl) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "fleet_control"}}
}

// Fields of the FleetControl.
func (FleetControl) Fields() []ent.Field {
	return []ent.Field{field.Int("id").Immutable(), field.Int64("generation").Default(0)}
}

// FleetHalt is an operator's halt of every rollout in flight in its scope:
// it paused those progressing (their rollout's halt_id names it), and no
// rollout in its scope starts a wave until it is lifted. Lifting it
// resumes what it paused, and nothing else.
type FleetHalt struct{ ent.Schema }

// Annotations of the FleetHalt.
func (FleetHalt) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "fleet_halts"}}
}

// Fields of the FleetHalt.
func (FleetHalt) Fields() []ent.Field {
	return []ent.Field{
		field.String("workspace_id").Immutable().Default("").MaxLen(255),
		field.String("environment_id").Immutable().Default("").MaxLen(255),
		// region halts the rollouts whose current or next wave has it.
		field.String("region").Immutable().Default("").MaxLen(255),
		field.String("reason").Immutable().NotEmpty().MaxLen(1024),
		field.String("actor").Immutable().Default("").MaxLen(255),
		// paused is how many rollouts it paused when it was made.
		field.Int("paused").Default(0),
		field.Time("created_at").Default(now).Immutable().SchemaType(microseconds),
		// lifted_at is when it was lifted (resumed); NULL while it stands.
		field.Time("lifted_at").Optional().Nillable().SchemaType(microseconds),
		field.String("lifted_by").Default("").MaxLen(255),
	}
}

// Indexes of the FleetHalt.
func (FleetHalt) Indexes() []ent.Index {
	return []ent.Index{index.Fields("lifted_at")}
}

// FreezeWindow is a time during which no rollout in its scope starts a
// wave: recurring (a cron schedule in a time zone, each firing closing
// the window for duration_seconds, as Argo CD's sync windows and
// Kubernetes' CronJobs read them) or once (starts_at until ends_at).
type FreezeWindow struct{ ent.Schema }

// Annotations of the FreezeWindow.
func (FreezeWindow) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "freeze_windows"}}
}

// Fields of the FreezeWindow.
func (FreezeWindow) Fields() []ent.Field {
	return []ent.Field{
		field.String("name").Unique().NotEmpty().MaxLen(63),
		field.String("workspace_id").Default("").MaxLen(255),
		field.String("environment_id").Default("").MaxLen(255),
		// schedule is five cron fields ("0 17 * * 1-5"); "" for a
		// one-off window.
		field.String("schedule").Default("").MaxLen(255),
		field.String("time_zone").Default("UTC").MaxLen(64),
		field.Int64("duration_seconds").Default(0),
		field.Time("starts_at").Optional().Nillable().SchemaType(microseconds),
		field.Time("ends_at").Optional().Nillable().SchemaType(microseconds),
		field.String("reason").Default("").MaxLen(1024),
		field.String("actor").Default("").MaxLen(255),
		field.Time("updated_at").Default(now).UpdateDefault(now).SchemaType(microseconds),
	}
}

// PacingBound bounds the rollouts that run at once: in an environment,
// those in flight that have started (max); in a region, those whose
// first wave (the canary) has it and is in progress (max canaries).
// Rollouts beyond it wait, queued, in the order they were made.
type PacingBound struct{ ent.Schema }

// Annotations of the PacingBound.
func (PacingBound) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "pacing_bounds"}}
}

// Fields of the PacingBound.
func (PacingBound) Fields() []ent.Field {
	return []ent.Field{
		field.String("workspace_id").Immutable().Default("").MaxLen(255),
		field.String("environment_id").Immutable().Default("").MaxLen(255),
		field.String("region").Immutable().Default("").MaxLen(255),
		field.Int("max").Positive(),
		field.String("actor").Default("").MaxLen(255),
		field.Time("updated_at").Default(now).UpdateDefault(now).SchemaType(microseconds),
	}
}

// Indexes of the PacingBound.
func (PacingBound) Indexes() []ent.Index {
	return []ent.Index{index.Fields("workspace_id", "environment_id", "region").Unique()}
}

// FailedSpec is a spec of a deployment that a rollout rolled back for a
// failed gate: deploying, updating or rolling back to it again is refused
// unless the operator retries it on purpose (--retry-failed), and a
// rollout of it that succeeds removes the mark.
type FailedSpec struct{ ent.Schema }

// Annotations of the FailedSpec.
func (FailedSpec) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "failed_specs"}}
}

// Fields of the FailedSpec.
func (FailedSpec) Fields() []ent.Field {
	return []ent.Field{
		field.String("deployment_id").Immutable(),
		field.String("spec_hash").MaxLen(64),
		// revision and rollout_id are the revision that failed and the
		// rollout that rolled it back; reason is its evidence.
		field.Int("revision"),
		field.Int("rollout_id"),
		field.String("reason").Default("").MaxLen(1024),
		field.Time("created_at").Default(now).SchemaType(microseconds),
	}
}

// Edges of the FailedSpec.
func (FailedSpec) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("deployment", Deployment.Type).Ref("failed_specs").Field("deployment_id").Unique().Required().Immutable(),
	}
}

// Indexes of the FailedSpec.
func (FailedSpec) Indexes() []ent.Index {
	return []ent.Index{index.Fields("deployment_id", "spec_hash").Unique()}
}
