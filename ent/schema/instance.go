package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"

	"github.com/deploysync/deploysync/internal/limits"
	"github.com/deploysync/deploysync/internal/validate"
)

// Instance is one running copy (Pod) of a deployment, as its region's agent
// last reported it. Actual state only: writing it emits no change row.
type Instance struct{ ent.Schema }

// Fields of the Instance.
func (Instance) Fields() []ent.Field {
	return []ent.Field{
		field.String("deployment_id").Immutable().Validate(validate.ID),
		field.String("region").Immutable().Validate(validate.Region),
		field.String("pod_name").Immutable().NotEmpty().MaxLen(253),
		field.String("address").Default(""),
		field.Int("cpu_millicores").Default(0).NonNegative(),
		field.Int("memory_mib").Default(0).NonNegative(),
		field.Enum("status").Values("pending", "running", "failed", "unknown").Default("unknown"),
		field.Bool("ready").Default(false),
		// spec_hash is the spec hash label the Pod carries (the revision it
		// runs; see agentd's kube.SpecHashLabel), empty without one.
		field.String("spec_hash").Default("").MaxLen(validate.MaxSpecHashLength),
		// reason says why the instance is not ready, in Kubernetes' words
		// (CrashLoopBackOff, ImagePullBackOff, OOMKilled, Unschedulable, ...);
		// empty when nothing says, as for a ready one.
		field.String("reason").Default("").MaxLen(limits.MaxInstanceReasonBytes),
		// restarts sums the restart counts of the Pod's containers.
		field.Int32("restarts").Default(0).NonNegative(),
		// evidence is what a crashed container said before it died (its
		// termination message or last lines of log), as the agent
		// reported it; empty for one that did not crash.
		field.String("evidence").Default("").MaxLen(limits.MaxEvidenceBytes),
	}
}

// Edges of the Instance.
func (Instance) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("deployment", Deployment.Type).Ref("instances").Field("deployment_id").Unique().Required().Immutable(),
	}
}

// Indexes of the Instance.
func (Instance) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("deployment_id", "region", "pod_name").Unique(),
		index.Fields("region"),
		// The deploy workflow reads what changed since its last round.
		index.Fields("updated_at"),
	}
}

// Mixin of the Instance.
func (Instance) Mixin() []ent.Mixin { return []ent.Mixin{Timestamps{}} }
