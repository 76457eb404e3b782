package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
)

// CtrldReplica is one running ctrld process that other replicas on this
// database may poke after a write (daemon/peers). A process registers a
// new row at every start, heartbeats it, and deletes it when it stops; a
// row whose heartbeat is old is ignored, and later deleted by whichever
// replica notices. Not desired or actual state: no change rows.
type CtrldReplica struct{ ent.Schema }

// Annotations of the CtrldReplica.
func (CtrldReplica) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "ctrld_replicas"}}
}

// Fields of the CtrldReplica.
func (CtrldReplica) Fields() []ent.Field {
	return []ent.Field{
		// id is random per process, so a restarted replica (or two given
		// the same --instance) never takes over another's row.
		field.String("id").Immutable().NotEmpty().MaxLen(64),
		// instance is the replica's --instance, for logs.
		field.String("instance").Immutable().MaxLen(255),
		// address is where peers dial it (--advertise-addr).
		field.String("address").Immutable().NotEmpty().MaxLen(255),
		// secret is what a poke must carry to be obeyed.
		field.String("secret").Immutable().NotEmpty().MaxLen(64).Sensitive(),
		// heartbeat_at is stamped by the database's clock (NOW(6)) and
		// compared with it, so replicas' clocks may disagree.
		field.Time("heartbeat_at").SchemaType(microseconds).
			Annotations(entsql.DefaultExpr("CURRENT_TIMESTAMP(6)")),
	}
}
