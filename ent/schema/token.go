package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// APIToken authenticates a caller of ctrld: an agent (bound to one region)
// or an operator (named, for the audit log). Only a SHA-256 of the token is
// stored; the token itself is shown once, at creation.
type APIToken struct{ ent.Schema }

// Annotations of the APIToken.
func (APIToken) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "api_tokens"}}
}

// Fields of the APIToken.
func (APIToken) Fields() []ent.Field {
	return []ent.Field{
		field.Enum("kind").Values("agent", "operator").Immutable(),
		// name identifies the holder: the operator's name, or a label for
		// an agent token. Operator actions are audited under it.
		field.String("name").Immutable().NotEmpty().MaxLen(128),
		// region binds an agent token; empty for operators.
		field.String("region").Immutable().Default("").MaxLen(64),
		field.String("hash").Immutable().NotEmpty().MaxLen(64).Sensitive(),
		field.Time("created_at").Default(now).Immutable().SchemaType(microseconds),
		field.Time("revoked_at").Optional().Nillable().SchemaType(microseconds),
		// live_operator_name is name while the token is a live operator
		// token, and NULL for agent tokens and revoked ones. Its unique
		// index is how the database keeps two live operator tokens from
		// sharing a name, which the audit log could not tell apart (see
		// daemon/auth.Create).
		field.String("live_operator_name").Optional().Nillable().MaxLen(128),
		// public_id names the token to people: "tok_" and 12 hex digits
		// derived from hash (daemon/auth.TokenID), shown at creation and
		// by `ctrld token list`, and what `ctrld token revoke` takes. Names
		// cannot stand in for it: agent tokens share theirs ("agent-eu"),
		// old and new alike during a rotation. NULL only in rows written
		// before the column existed, until store.Migrate fills it in.
		field.String("public_id").Optional().Immutable().MaxLen(16),
		// logs grants an operator token reading pods' logs (live views,
		// OperatorService.StreamLogs): logs may carry secrets, so it is a
		// permission of its own, given on purpose (ctrld token create
		// --operator NAME --logs), as operator_keys.logs is a key's.
		// Immutable: a token that should read logs is a new token. Rows
		// from before the column existed get false: no grant.
		field.Bool("logs").Default(false).Immutable(),
	}
}

// Indexes of the APIToken. (kind, name) serves revocation by name, whose
// locking scan then covers that name's tokens, not the whole table.
func (APIToken) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("hash").Unique(),
		index.Fields("live_operator_name").Unique(),
		index.Fields("kind", "name"),
		index.Fields("public_id").Unique(),
	}
}
