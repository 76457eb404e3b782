package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// AuditLog records every operator action: who, what, on what, and how it
// ended. Rows are only ever inserted.
type AuditLog struct{ ent.Schema }

// Annotations of the AuditLog.
func (AuditLog) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "operator_audit_log"}}
}

// Fields of the AuditLog.
func (AuditLog) Fields() []ent.Field {
	return []ent.Field{
		field.String("actor").Immutable().NotEmpty(),
		field.String("action").Immutable().NotEmpty(),
		field.String("target").Immutable().Default(""),
		field.String("detail").Immutable().Default("").MaxLen(4096),
		field.String("error").Immutable().Default("").MaxLen(4096),
		field.Time("created_at").Default(now).Immutable().SchemaType(microseconds),
	}
}

// Indexes of the AuditLog.
func (AuditLog) Indexes() []ent.Index {
	return []ent.Index{index.Fields("created_at")}
}
