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

// DeploymentTopology says how a deployment runs in one region: which spec,
// how many replicas, and whether it should run at all. Its change rows use
// the deployment ID as resource_id: (deployment, region) is what agents
// know.
//
// The spec is the region's own copy, not the deployment's: a rollout
// (daemon/rollout) moves regions from one spec to the next a wave at a
// time, so while it runs some regions run the new spec and others the old.
// The deployments row holds the spec the newest operator action asked for;
// this row holds what the region is to run now. Agents, full syncs,
// history's per-region view and the checkers read it from here.
type DeploymentTopology struct{ ent.Schema }

// Annotations of the DeploymentTopology.
func (DeploymentTopology) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "deployment_topology"}}
}

// Fields of the DeploymentTopology.
func (DeploymentTopology) Fields() []ent.Field {
	return []ent.Field{
		field.String("deployment_id").Immutable().Validate(validate.ID),
		field.String("region").Immutable().Validate(validate.Region),
		// namespace is the deployment's (naming.Namespace of its workspace
		// and environment, which never change), kept here so that a full
		// sync reads a region's deployments from this table alone. Empty
		// in rows an older ctrld wrote until `ctrld migrate` fills it;
		// readers fall back to the deployment's.
		field.String("namespace").Immutable().Default("").MaxLen(63),
		field.Int("replicas").Validate(validate.Replicas),
		// The spec the region runs (see above). spec_hash names it
		// (desired.SpecHash): agents label the pods with it, so their
		// reports tell which spec each instance runs. An empty hash is a
		// region a new deployment's rollout has not reached: it runs
		// nothing yet.
		field.String("image").Default(""),
		field.Int("cpu_millicores").Default(0),
		field.Int("memory_mib").Default(0),
		field.Int("port").Default(0),
		field.JSON("command", []string{}).Optional(),
		field.JSON("env", map[string]string{}).Optional(),
		field.String("spec_hash").Default("").MaxLen(64),
		// spec_revision is the deployment revision whose spec this is (0:
		// none yet, or from before revisions).
		field.Int("spec_revision").Default(0).NonNegative(),
		field.Enum("desired_status").Values("running", "stopped").Default("running"),
		// Actual state, reported by the region's agent.
		field.Enum("actual_status").Values("unknown", "progressing", "running", "stopped", "failed").Default("unknown"),
	}
}

// Edges of the DeploymentTopology.
func (DeploymentTopology) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("deployment", Deployment.Type).Ref("topologies").Field("deployment_id").Unique().Required().Immutable(),
	}
}

// Indexes of the DeploymentTopology.
func (DeploymentTopology) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("deployment_id", "region").Unique(),
		index.Fields("region"),
		// The deploy workflow reads what changed since its last round.
		index.Fields("updated_at"),
	}
}

// Mixin of the DeploymentTopology.
func (DeploymentTopology) Mixin() []ent.Mixin { return []ent.Mixin{Timestamps{}} }

// Hooks of the DeploymentTopology: its deployment_changes rows (see ent/changefeed).
func (DeploymentTopology) Hooks() []ent.Hook { return []ent.Hook{changefeed.DeploymentTopology()} }
