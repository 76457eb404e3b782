package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"

	"github.com/deploysync/deploysync/internal/validate"
)

// CheckEvaluation is one evaluation of a rollout check in one region, as
// the region's agent sent it (daemon/cluster's SyncChecks), judged when it
// came in (daemon/gatecheck): the gate counts these. Control-plane
// bookkeeping: no change rows. The rows of a rollout go when it ends
// (daemon/retention).
type CheckEvaluation struct{ ent.Schema }

// Fields of the CheckEvaluation.
func (CheckEvaluation) Fields() []ent.Field {
	return []ent.Field{
		field.Int("rollout_id").Immutable(),
		field.String("region").Immutable().Validate(validate.Region),
		field.String("check_name").Immutable().MaxLen(64),
		// role: canary is a promoted region's evaluation of the new spec,
		// which has a verdict; baseline a region's still on the previous
		// revision; before a promoted region's own value from before its
		// promotion. The last two are what baseline checks compare with.
		field.Enum("role").Values("canary", "baseline", "before").Immutable(),
		// value is the query's one sample; NULL for no data or no answer.
		field.Float("value").Optional().Nillable().Immutable(),
		// error is why the query had no answer; empty when it answered.
		field.String("error").Default("").MaxLen(1024).Immutable(),
		// verdict, why, bound, baseline: the judgement of a canary row.
		field.Enum("verdict").Values("pass", "fail", "none").Default("none").Immutable(),
		field.String("why").Default("").MaxLen(1024).Immutable(),
		field.String("bound").Default("").MaxLen(64).Immutable(),
		field.Float("baseline").Optional().Nillable().Immutable(),
		field.String("baseline_from").Default("").MaxLen(255).Immutable(),
		// at is when it came in, by the database's clock (every replica
		// and the gate read one clock).
		field.Time("at").Immutable().SchemaType(microseconds),
	}
}

// Indexes of the CheckEvaluation.
func (CheckEvaluation) Indexes() []ent.Index {
	return []ent.Index{
		// The gate reads a rollout's evaluations, by region and check, in
		// the order they came.
		index.Fields("rollout_id", "region", "check_name", "at"),
	}
}
