package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"

	"github.com/deploysync/deploysync/internal/validate"
)

// Namespace records which workspace and environment own a Kubernetes
// namespace name. naming.Namespace is not injective ("acme-prod" + "x" and
// "acme" + "prod-x" both give "acme-prod-x"; shortened names end in a hash
// that can collide), so the first pair to put a resource in a namespace
// claims it here, in the same transaction, and daemon/desired refuses every
// other pair; the primary key makes concurrent claims safe. A claim outlives
// the resources that made it: agents may still hold objects in the
// namespace, and another pair moving in would inherit them.
//
// Control-plane bookkeeping that agents never see: no change rows.
type Namespace struct{ ent.Schema }

// Fields of the Namespace.
func (Namespace) Fields() []ent.Field {
	return []ent.Field{
		// id is the namespace's name, as naming.Namespace derives it.
		field.String("id").StorageKey("name").Immutable().NotEmpty().MaxLen(63),
		field.String("workspace_id").Immutable().Validate(validate.ID),
		field.String("environment_id").Immutable().Validate(validate.ID),
		field.Time("created_at").Default(now).Immutable().SchemaType(microseconds),
	}
}
