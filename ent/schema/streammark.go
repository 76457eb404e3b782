package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
)

// StreamMark holds the stream's durable positions, shared by all ctrld
// replicas: "safe_watermark" (every deployment_changes pk at or below it is
// committed or provably dead) and "cleanup_floor" (every pk at or below it
// may have been deleted by retention). Both only ever grow.
type StreamMark struct{ ent.Schema }

// Annotations of the StreamMark.
func (StreamMark) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "stream_marks"}}
}

// Fields of the StreamMark.
func (StreamMark) Fields() []ent.Field {
	return []ent.Field{
		field.String("id").Immutable().MaxLen(64),
		field.Uint64("value"),
	}
}
