package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
)

// InstallationSecret is a secret of the installation (the database), made
// once at random and shared by every ctrld replica on it: "view_hash" keys
// the hashes operators are shown (daemon/viewhash). No API shows one, and
// none changes: replicas read it once and keep it. Not desired or actual
// state: no change rows.
type InstallationSecret struct{ ent.Schema }

// Annotations of the InstallationSecret.
func (InstallationSecret) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "installation_secrets"}}
}

// Fields of the InstallationSecret.
func (InstallationSecret) Fields() []ent.Field {
	return []ent.Field{
		// id names what the secret is for.
		field.String("id").Immutable().NotEmpty().MaxLen(64),
		// value is the secret: random bytes.
		field.Bytes("value").Immutable().NotEmpty().MaxLen(64).Sensitive(),
		field.Time("created_at").Default(now).Immutable().SchemaType(microseconds),
	}
}
