package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"

	"github.com/deploysync/deploysync/ent/jsontype"
)

// DeploymentRevision is a deployment's whole desired spec after one
// operator action (deploy, update, scale, start, stop, rollback), written in
// the action's own transaction: the deployment's history, and what a
// rollback restores. first_version..last_version is the range of the
// deployment_changes rows the action wrote, so a pending change can be
// told by what it changed (old -> new). Only ever inserted; removed with
// its deployment.
type DeploymentRevision struct{ ent.Schema }

// Annotations of the DeploymentRevision.
func (DeploymentRevision) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "deployment_revisions"}}
}

// Fields of the DeploymentRevision.
func (DeploymentRevision) Fields() []ent.Field {
	return []ent.Field{
		field.String("deployment_id").Immutable(),
		// revision counts the deployment's revisions from 1.
		field.Int("revision").Immutable().Positive(),
		// action is what made it: deploy, update, scale, start, stop, rollback.
		field.String("action").Immutable().NotEmpty().MaxLen(32),
		field.String("actor").Immutable().Default("").MaxLen(255),
		field.String("image").Immutable(),
		field.Int("cpu_millicores").Immutable(),
		field.Int("memory_mib").Immutable(),
		field.Int("port").Immutable(),
		field.JSON("command", []string{}).Immutable().Optional(),
		field.JSON("env", map[string]string{}).Immutable().Optional(),
		field.JSON("regions", map[string]jsontype.RegionSpec{}).Immutable(),
		field.Uint64("first_version").Immutable().Default(0),
		field.Uint64("last_version").Immutable().Default(0),
		field.Time("created_at").Default(now).Immutable().SchemaType(microseconds),
	}
}

// Edges of the DeploymentRevision.
func (DeploymentRevision) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("deployment", Deployment.Type).Ref("revisions").Field("deployment_id").Unique().Required().Immutable(),
	}
}

// Indexes of the DeploymentRevision.
func (DeploymentRevision) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("deployment_id", "revision").Unique(),
		index.Fields("deployment_id", "last_version"),
	}
}
