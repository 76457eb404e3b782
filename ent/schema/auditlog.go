package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// AuditLog records every operator action: who, what, on what, and how it
// ended. Rows are only ever inserted, and deleted by retention once older
// than its audit TTL (ctrld's --audit-ttl). One row may stand for several
// identical refused attempts (daemon/operator's refusal log): count says
// how many, created_at when the first was made, last_seen_at the last.
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
		// count is how many identical attempts the row stands for: 1 for
		// every action that reached the operator service.
		field.Int("count").Default(1).Positive().Immutable(),
		// last_seen_at is when the last of count attempts was made; NULL
		// for a row of one.
		field.Time("last_seen_at").Optional().Nillable().Immutable().SchemaType(microseconds),
	}
}

// Indexes of the AuditLog.
func (AuditLog) Indexes() []ent.Index {
	return []ent.Index{index.Fields("created_at")}
}
