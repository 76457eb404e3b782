package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"

	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/internal/validate"
)

// CiliumNetworkPolicy is a cilium.io/v2 CiliumNetworkPolicy to apply in one
// region, owned by a deployment or (deployment unset) by an environment.
type CiliumNetworkPolicy struct{ ent.Schema }

// Annotations of the CiliumNetworkPolicy.
func (CiliumNetworkPolicy) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "cilium_network_policies"}}
}

// Fields of the CiliumNetworkPolicy.
func (CiliumNetworkPolicy) Fields() []ent.Field {
	return []ent.Field{
		field.String("id").Immutable().Validate(validate.ID),
		field.String("workspace_id").Immutable().Validate(validate.ID),
		field.String("environment_id").Immutable().Validate(validate.ID),
		field.String("deployment_id").Optional().Nillable().Immutable().Validate(validate.ID),
		field.String("region").Immutable().Validate(validate.Region),
		// name is the Kubernetes object's name.
		field.String("name").Immutable().Validate(validate.ID),
		// spec is the policy's .spec, as Cilium takes it.
		field.JSON("spec", map[string]any{}),
	}
}

// Edges of the CiliumNetworkPolicy.
func (CiliumNetworkPolicy) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("deployment", Deployment.Type).Ref("policies").Field("deployment_id").Unique().Immutable(),
	}
}

// Indexes of the CiliumNetworkPolicy.
func (CiliumNetworkPolicy) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("region", "environment_id", "name").Unique(),
		// A full sync's pages read it as a range (daemon/kinds).
		index.Fields("region"),
	}
}

// Mixin of the CiliumNetworkPolicy.
func (CiliumNetworkPolicy) Mixin() []ent.Mixin { return []ent.Mixin{Timestamps{}} }

// Hooks of the CiliumNetworkPolicy: its deployment_changes rows (see ent/changefeed).
func (CiliumNetworkPolicy) Hooks() []ent.Hook { return []ent.Hook{changefeed.CiliumNetworkPolicy()} }
