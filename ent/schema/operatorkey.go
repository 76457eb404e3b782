package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// OperatorKey is an operator's SSH public key: who may open the console
// over ctrld's SSH listener, under which name and with which role (see
// daemon/operatorkeys). A key is removed by deleting its row; every
// replica ends the sessions of a removed key at its next re-check.
type OperatorKey struct{ ent.Schema }

// Annotations of the OperatorKey.
func (OperatorKey) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "operator_keys"}}
}

// Fields of the OperatorKey.
func (OperatorKey) Fields() []ent.Field {
	return []ent.Field{
		// name is the operator's: the audit log names them by it.
		field.String("name").Immutable().NotEmpty().MaxLen(128),
		// role is what the key may do: read-only sees everything and
		// changes nothing; operator may act.
		field.Enum("role").Values("read-only", "operator").Immutable(),
		// logs grants reading pods' logs (live views): logs may carry
		// secrets, so it is a permission of its own, given on purpose
		// (ctrld operator add-key --logs), whatever the role.
		field.Bool("logs").Default(false).Immutable(),
		// fingerprint is the key's SHA256 fingerprint as OpenSSH prints
		// it ("SHA256:" and unpadded base64); sessions are looked up by it.
		field.String("fingerprint").Immutable().NotEmpty().MaxLen(64),
		// authorized_key is the key as one authorized_keys line (type and
		// base64, no comment), kept so that an operator can see which key
		// it is and a later version can re-derive anything from it.
		field.String("authorized_key").Immutable().NotEmpty().MaxLen(MaxAuthorizedKeyLen),
		field.Time("created_at").Default(now).Immutable().SchemaType(microseconds),
	}
}

// Indexes of the OperatorKey. A key belongs to one operator: two rows of
// one fingerprint could give one key two names or roles.
func (OperatorKey) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("fingerprint").Unique(),
		index.Fields("name"),
	}
}

// MaxAuthorizedKeyLen bounds operator_keys.authorized_key: an RSA key of
// 16384 bits takes about 2,800 bytes.
const MaxAuthorizedKeyLen = 8192
