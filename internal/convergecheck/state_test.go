package convergecheck

import (
	"slices"
	"testing"
)

// The diff names every object by whole identity and says what is missing,
// extra or wrong: a namesake in another namespace is two differences, not
// a match.
func TestDiff(t *testing.T) {
	sts := func(ns, id, replicas string) (object, fields) {
		f := labelFields(map[string]string{"unkey.managed.by": "krane", "unkey.deployment.id": id})
		f["replicas"], f["image"] = replicas, "img:v1"
		return object{"StatefulSet", ns, id}, f
	}
	view := func(pairs ...any) view {
		v := map[object]fields{}
		for i := 0; i < len(pairs); i += 2 {
			v[pairs[i].(object)] = pairs[i+1].(fields)
		}
		return v
	}
	o1, f1 := sts("acme-prod", "api", "2")
	o2, f2 := sts("acme-dev", "api", "2")
	o3, f3 := sts("acme-prod", "web", "1")
	_, f3scaled := sts("acme-prod", "web", "3")

	if got := diff(view(o1, f1, o3, f3), view(o1, f1, o3, f3)); len(got) != 0 {
		t.Errorf("equal views differ: %q", got)
	}
	got := diff(view(o1, f1, o3, f3scaled), view(o2, f2, o3, f3))
	want := []string{
		`extra   StatefulSet acme-dev/api (found image=img:v1 unkey.deployment.id=api unkey.managed.by=krane replicas=2)`,
		`missing StatefulSet acme-prod/api (want image=img:v1 unkey.deployment.id=api unkey.managed.by=krane replicas=2)`,
		`wrong   StatefulSet acme-prod/web: replicas "1", want "3"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("diff:\n%q\nwant\n%q", got, want)
	}
}
