package kube

import (
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// Holds reports whether live, a typed object (say, from the informer
// cache), is what applying desired, an apply configuration of its kind,
// as FieldManager leaves it: FieldManager's Apply entry in live's managed
// fields lists exactly the fields desired sets, and live has desired's
// value in each. That is what comparing desired with the configuration
// client-go's Extract… functions take out of live for FieldManager says,
// and how the controllers tell an apply that would change nothing.
//
// Extract converts the whole live object (status, defaults, every other
// manager's fields) by reflection, validates it, prunes it to the
// manager's fields and decodes the result; most of an agent's CPU on its
// first resync after it starts went there. Holds walks only desired's
// fields: it looks each up in live, and reads the manager's field set
// from its serialized form.
//
// Neither the field set alone nor the hash annotation would do: a value
// changed by an update of another manager leaves the manager's set (the
// API server moves the field to the writer), but anyone who may update
// the object may also rewrite its managed fields, in a second update that
// hands the field back, and copy or edit an annotation. The values are
// compared, so no such edit makes an object that differs from desired
// look up to date.
func Holds(live runtime.Object, desired any) bool {
	ok, err := holds(live, desired)
	return err == nil && ok
}

func holds(live runtime.Object, desired any) (bool, error) {
	want, err := value.NewValueReflect(desired)
	if err != nil {
		return false, fmt.Errorf("desired %T: %w", desired, err)
	}
	if !want.IsMap() {
		return false, fmt.Errorf("desired %T is not an object", desired)
	}
	apiVersion, kind := stringField(want, "apiVersion"), stringField(want, "kind")
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return false, fmt.Errorf("desired object's apiVersion: %w", err)
	}
	t, err := typeOf(gv.WithKind(kind))
	if err != nil {
		return false, err
	}
	meta, ok := live.(metav1.Object)
	if !ok {
		return false, fmt.Errorf("live %T has no object metadata", live)
	}
	entry, ok := appliedEntry(meta, apiVersion)
	if !ok {
		return false, nil
	}
	owned, err := ownedFields(entry.FieldsV1)
	if err != nil {
		return false, err
	}
	have, err := value.NewValueReflect(live)
	if err != nil {
		return false, fmt.Errorf("live object: %w", err)
	}
	w := walker{schema: t.schema}
	if !w.object(t.ref, want, have, owned.set, notRecorded) {
		return false, nil
	}
	// Every field desired sets is one the manager owns, and there are as
	// many: the manager owns no other.
	return w.leaves == owned.leaves, nil
}

func stringField(v value.Value, name string) string {
	if f, ok := v.AsMap().Get(name); ok && f.IsString() {
		return f.AsString()
	}
	return ""
}

// notRecorded are the fields an apply may set but the API server never
// records as anyone's (its fieldmanager's stripMeta), so a configuration's
// own field set says more than its manager's entry.
var notRecorded = fieldpath.NewSet(
	fieldpath.MakePathOrDie("apiVersion"),
	fieldpath.MakePathOrDie("kind"),
	fieldpath.MakePathOrDie("metadata"),
	fieldpath.MakePathOrDie("metadata", "name"),
	fieldpath.MakePathOrDie("metadata", "namespace"),
	fieldpath.MakePathOrDie("metadata", "creationTimestamp"),
	fieldpath.MakePathOrDie("metadata", "selfLink"),
	fieldpath.MakePathOrDie("metadata", "uid"),
	fieldpath.MakePathOrDie("metadata", "clusterName"),
	fieldpath.MakePathOrDie("metadata", "generation"),
	fieldpath.MakePathOrDie("metadata", "managedFields"),
	fieldpath.MakePathOrDie("metadata", "resourceVersion"),
)

// appliedEntry is FieldManager's Apply entry of the main resource (not a
// subresource's) in the given API version, as Extract… reads it.
func appliedEntry(o metav1.Object, apiVersion string) (metav1.ManagedFieldsEntry, bool) {
	for _, mf := range o.GetManagedFields() {
		if mf.Manager == FieldManager && mf.Operation == metav1.ManagedFieldsOperationApply && mf.Subresource == "" {
			return mf, mf.APIVersion == apiVersion && mf.FieldsV1 != nil
		}
	}
	return metav1.ManagedFieldsEntry{}, false
}

// typedKind is a kind's structural schema (client-go's, the one its apply
// configurations and Extract… use).
type typedKind struct {
	schema *smdschema.Schema
	ref    smdschema.TypeRef
}

var (
	// converter reads client-go's schema on first use, not when the
	// package loads: the schema is large, and programs that never compare
	// objects need not parse it.
	converter = sync.OnceValue(func() managedfields.TypeConverter {
		return applyconfigurations.NewTypeConverter(scheme.Scheme)
	})
	kinds sync.Map // schema.GroupVersionKind -> typedKind
)

func typeOf(gvk schema.GroupVersionKind) (typedKind, error) {
	if t, ok := kinds.Load(gvk); ok {
		return t.(typedKind), nil
	}
	obj, err := scheme.Scheme.New(gvk)
	if err != nil {
		return typedKind{}, fmt.Errorf("schema of %v: %w", gvk, err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	tv, err := converter().ObjectToTyped(obj)
	if err != nil {
		return typedKind{}, fmt.Errorf("schema of %v: %w", gvk, err)
	}
	t := typedKind{schema: tv.Schema(), ref: tv.TypeRef()}
	kinds.Store(gvk, t)
	return t, nil
}

// owned is a manager's field set as read from managed fields, and the
// number of its leaves (see fieldpath.Set.Leaves): the fields it sets.
type owned struct {
	set    *fieldpath.Set
	leaves int
}

// ownedSets holds field sets already read, by their serialized form.
// Objects of one shape (a deployment's StatefulSets whose env names and
// ports agree, say) share one, whatever their values, so a resync reads
// each shape once rather than each object. Bounded in entries (once full
// it starts over, which costs reading them again and nothing else) and in
// their size: the agent's own sets take a few KiB, and one that anyone
// who may edit an object can make as large as the object is not kept.
var ownedSets = struct {
	sync.Mutex
	m map[string]owned
}{m: map[string]owned{}}

const (
	maxOwnedSets    = 256
	maxOwnedSetSize = 16 << 10
)

func ownedFields(f *metav1.FieldsV1) (owned, error) {
	raw := f.GetRawString()
	if len(raw) > maxOwnedSetSize {
		return readOwned(f)
	}
	ownedSets.Lock()
	o, ok := ownedSets.m[raw]
	ownedSets.Unlock()
	if ok {
		return o, nil
	}
	o, err := readOwned(f)
	if err != nil {
		return owned{}, err
	}
	ownedSets.Lock()
	if len(ownedSets.m) >= maxOwnedSets {
		clear(ownedSets.m)
	}
	ownedSets.m[raw] = o
	ownedSets.Unlock()
	return o, nil
}

func readOwned(f *metav1.FieldsV1) (owned, error) {
	set := &fieldpath.Set{}
	if err := set.FromJSON(f.GetRawReader()); err != nil {
		return owned{}, fmt.Errorf("%s's managed fields: %w", FieldManager, err)
	}
	return owned{set: set, leaves: set.Leaves().Size()}, nil
}

// walker walks a desired object along its fields, as the schema
// structures them, beside the live object and the manager's field set.
type walker struct {
	schema *smdschema.Schema
	// leaves counts the desired object's leaves (the fields a field set
	// names: scalars, and atomic or empty maps and lists), each of which
	// the manager owns and the live object holds.
	leaves int
}

// object walks the fields of want, a map (the object, a struct, a map
// field, an item of a keyed list), under fields, the manager's field set
// at want's path. skip, if set, names fields that are not recorded
// there: they are left out.
func (w *walker) object(ref smdschema.TypeRef, want, have value.Value, fields, skip *fieldpath.Set) bool {
	atom, ok := w.schema.Resolve(ref)
	if !ok || atom.Map == nil || !have.IsMap() {
		return false
	}
	hm := have.AsMap()
	return want.AsMap().Iterate(func(key string, wv value.Value) bool {
		pe := fieldpath.PathElement{FieldName: &key}
		var skipBelow *fieldpath.Set
		if skip != nil {
			// What the API server strips is a path, not what is under it:
			// metadata is, its labels are not.
			below, hasBelow := skip.Children.Get(pe)
			if skip.Members.Has(pe) && !hasBelow {
				return true
			}
			skipBelow = below
		}
		hv, ok := hm.Get(key)
		if _, isField := atom.Map.FindField(key); !ok && isField && wv.IsString() && wv.AsString() == "" {
			// A Go string field holds "" however it was written, and
			// one marked omitempty (an env var's value, say) reads as
			// absent then: the empty string is what the live object
			// has. Only a struct's field: a map's entry (a label, an
			// annotation) that is absent is not there at all. (A
			// *string field, nil, reads as absent too; the agent
			// applies "" to none.)
			hv, ok = value.NewValueInterface(""), true
		}
		return ok && w.field(fieldType(atom.Map, key), pe, wv, hv, fields, skipBelow)
	})
}

func fieldType(m *smdschema.Map, key string) smdschema.TypeRef {
	if f, ok := m.FindField(key); ok {
		return f.Type
	}
	return m.ElementType
}

// field checks the field pe of a parent whose fields the manager's set
// parent names. A map or a list of separate items is a node of the set,
// unless it is empty, and is walked; anything else (a scalar, an atomic
// map or list, an empty one) is a leaf, which must be one of the
// manager's and hold want's value whole.
func (w *walker) field(ref smdschema.TypeRef, pe fieldpath.PathElement, want, have value.Value, parent, skip *fieldpath.Set) bool {
	if have == nil {
		return false
	}
	atom, ok := w.schema.Resolve(ref)
	if !ok {
		return false
	}
	below, node := parent.Children.Get(pe)
	switch {
	case atom.Map != nil && atom.Map.ElementRelationship != smdschema.Atomic && want.IsMap():
		if node {
			return w.object(ref, want, have, below, skip)
		}
		if !want.AsMap().Empty() {
			return false
		}
	case atom.List != nil && atom.List.ElementRelationship == smdschema.Associative && want.IsList():
		if node {
			return w.list(atom.List, want, have, below)
		}
		if want.AsList().Length() > 0 {
			return false
		}
	}
	if node || !parent.Members.Has(pe) || !value.Equals(want, have) {
		return false
	}
	w.leaves++
	return true
}

// list walks the items of want, a list of separate items: each must be
// in have (the item with the same keys, for a list of maps; the same
// value, for a set of scalars) and be the manager's there.
func (w *walker) list(l *smdschema.List, want, have value.Value, fields *fieldpath.Set) bool {
	if !have.IsList() {
		return false
	}
	wl, hl := want.AsList(), have.AsList()
	for i := range wl.Length() {
		wi := wl.At(i)
		if len(l.Keys) == 0 {
			v := value.NewValueInterface(wi.Unstructured())
			if !w.field(l.ElementType, fieldpath.PathElement{Value: &v}, wi, inList(hl, func(hi value.Value) bool { return value.Equals(wi, hi) }), fields, nil) {
				return false
			}
			continue
		}
		keys, ok := w.keys(l, wi)
		if !ok {
			return false
		}
		hi := inList(hl, func(hi value.Value) bool {
			hk, ok := w.keys(l, hi)
			return ok && hk.Equals(keys)
		})
		if hi == nil || !w.field(l.ElementType, fieldpath.PathElement{Key: &keys}, wi, hi, fields, nil) {
			return false
		}
	}
	return true
}

// inList is the first item of l that is, nil if none is.
func inList(l value.List, is func(value.Value) bool) value.Value {
	for i := range l.Length() {
		if item := l.At(i); is(item) {
			return item
		}
	}
	return nil
}

// keys names an item of a list of maps by its key fields, a key field
// absent from it standing for its schema default, as the API server names
// items in field sets.
func (w *walker) keys(l *smdschema.List, item value.Value) (value.FieldList, bool) {
	elem, ok := w.schema.Resolve(l.ElementType)
	if !ok || elem.Map == nil || !item.IsMap() {
		return nil, false
	}
	m := item.AsMap()
	keys := make(value.FieldList, 0, len(l.Keys))
	for _, key := range l.Keys {
		if v, ok := m.Get(key); ok {
			keys = append(keys, value.Field{Name: key, Value: value.NewValueInterface(v.Unstructured())})
		} else if f, ok := elem.Map.FindField(key); ok && f.Default != nil {
			keys = append(keys, value.Field{Name: key, Value: value.NewValueInterface(f.Default)})
		}
	}
	keys.Sort()
	return keys, len(keys) > 0
}
