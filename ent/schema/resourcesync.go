package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"

	"github.com/deploysync/deploysync/internal/validate"
)

// ResourceSync is how far a region's agent got applying one resource, as
// it last reported: the stream version it last applied, whether that is
// the newest it received, and the error of a failing apply with since
// when. Actual state only (no change rows); one row per resource desired
// in the region, removed when the agent reports the resource deleted.
type ResourceSync struct{ ent.Schema }

// Annotations of the ResourceSync.
func (ResourceSync) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "resource_syncs"}}
}

// Fields of the ResourceSync.
func (ResourceSync) Fields() []ent.Field {
	return []ent.Field{
		field.String("region").Immutable().Validate(validate.Region),
		field.Enum("kind").Values("deployment", "sentinel", "cilium_network_policy").Immutable(),
		field.String("resource_id").Immutable().Validate(validate.ID),
		// applied_version is the stream version of the last event the
		// agent applied for the resource (0: none since it started).
		field.Uint64("applied_version").Default(0),
		// received_version is the stream version of the newest event the
		// agent received for the resource, the one in_sync and error are
		// about: a change of the resource above it is news to this report.
		field.Uint64("received_version").Default(0),
		// in_sync: the newest event the agent received for the resource
		// is applied.
		field.Bool("in_sync").Default(false),
		// error is the failing apply's error; empty once an apply succeeds.
		field.String("error").Default("").MaxLen(2048),
		field.Time("failing_since").Optional().Nillable().SchemaType(microseconds),
		// reported_at is when the agent's report was taken.
		field.Time("reported_at").Default(now).SchemaType(microseconds),
	}
}

// Indexes of the ResourceSync.
func (ResourceSync) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("region", "kind", "resource_id").Unique(),
		index.Fields("region", "in_sync"),
	}
}
