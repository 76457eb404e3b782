package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"

	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/internal/validate"
)

// Deployment is one version of an application: what to run. Where and how
// many live in its DeploymentTopology rows, one per region.
type Deployment struct{ ent.Schema }

// Fields of the Deployment.
func (Deployment) Fields() []ent.Field {
	return []ent.Field{
		field.String("id").Immutable().Validate(validate.ID),
		field.String("workspace_id").Immutable().Validate(validate.ID),
		field.String("environment_id").Immutable().Validate(validate.ID),
		// The spec the newest operator action asked for. Regions run the
		// copy in their deployment_topology row, which a rollout moves to
		// this one wave by wave (and back on failure); with no rollout in
		// flight every region that runs the deployment has this spec.
		// Writing these emits no change rows: the topologies' writes do.
		field.String("image").Validate(validate.Image),
		field.Int("cpu_millicores").Validate(validate.CPUMillicores),
		field.Int("memory_mib").Validate(validate.MemoryMiB),
		field.Int("port").Default(8080).Range(1, 65535),
		field.JSON("command", []string{}).Optional(),
		field.JSON("env", map[string]string{}).Optional(),
		// The deploy workflow's progress: control-plane bookkeeping that
		// agents never see, written without change rows.
		field.Enum("workflow_status").Values("pending", "deploying", "ready", "failed").Default("pending"),
		field.String("workflow_error").Default(""),
	}
}

// Edges of the Deployment. Its topologies, policies, instances and
// revisions go with it (ON DELETE CASCADE); the change feed emits the rows
// for the cascaded desired state itself, since cascades bypass hooks.
func (Deployment) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("topologies", DeploymentTopology.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("policies", CiliumNetworkPolicy.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("instances", Instance.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("revisions", DeploymentRevision.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("rollouts", Rollout.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("failed_specs", FailedSpec.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
	}
}

// Indexes of the Deployment.
func (Deployment) Indexes() []ent.Index {
	return []ent.Index{
		// The deploy workflow's timeout sweep: unfinished, oldest first.
		index.Fields("workflow_status", "created_at"),
		index.Fields("environment_id"),
	}
}

// Mixin of the Deployment.
func (Deployment) Mixin() []ent.Mixin { return []ent.Mixin{Timestamps{}} }

// Hooks of the Deployment: its deployment_changes rows (see ent/changefeed).
func (Deployment) Hooks() []ent.Hook { return []ent.Hook{changefeed.Deployment()} }
