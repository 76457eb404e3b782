package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// DeploymentChange is the outbox: one row per desired-state mutation and
// affected (resource, region), written in the mutation's own transaction by
// the change-feed hooks. It points at state, never holds it; pk is the
// stream cursor.
type DeploymentChange struct{ ent.Schema }

// Annotations of the DeploymentChange.
func (DeploymentChange) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "deployment_changes"}}
}

// Fields of the DeploymentChange.
func (DeploymentChange) Fields() []ent.Field {
	return []ent.Field{
		field.Uint64("id").StorageKey("pk").Immutable(),
		// "gap" marks a filler row the stream's tailer inserted to settle a
		// pk that no committed change used (see daemon/tailer); it has no
		// resource and no region, and is never streamed.
		field.Enum("resource_type").Values("deployment_topology", "sentinel", "cilium_network_policy", "gap").Immutable(),
		field.String("resource_id").Immutable().MaxLen(64),
		field.String("region").Immutable().MaxLen(64),
		field.Time("created_at").Default(now).Immutable().SchemaType(microseconds),
	}
}

// Indexes of the DeploymentChange.
func (DeploymentChange) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("region", "resource_type", "id"),
		index.Fields("region", "id"),
		index.Fields("created_at"),
		// A resource's own changes, for its history and for telling which
		// revision wrote a change.
		index.Fields("resource_type", "resource_id", "id"),
	}
}
