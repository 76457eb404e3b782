package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/mixin"
)

// microseconds stores times with sub-second precision: lag in seconds and
// the order of events within a second are read from these columns.
var microseconds = map[string]string{dialect.MySQL: "datetime(6)"}

// Timestamps adds created_at and updated_at to a table.
type Timestamps struct{ mixin.Schema }

// Fields of the Timestamps mixin.
func (Timestamps) Fields() []ent.Field {
	return []ent.Field{
		field.Time("created_at").Default(now).Immutable().SchemaType(microseconds),
		field.Time("updated_at").Default(now).UpdateDefault(now).SchemaType(microseconds),
	}
}

func now() time.Time { return time.Now().UTC() }
