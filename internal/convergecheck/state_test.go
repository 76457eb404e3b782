package convergecheck

import (
	"slices"
	"strings"
	"testing"

	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/internal/wantstate"
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

// The database's view becomes the objects agentd makes of it: a
// StatefulSet and Service per running deployment, a Deployment and Service
// per running sentinel, a policy by its name, each with its own ID label.
func TestDesiredViews(t *testing.T) {
	want, err := desiredViews(map[string]*wantstate.Region{"eu": {
		Deployments: []wantstate.Deployment{{ID: "api", Namespace: "acme-prod", Image: "img:v1", Replicas: 2}},
		Sentinels:   []wantstate.Sentinel{{ID: "gw1", Namespace: "acme-prod", Image: "gw:v1", Replicas: 1}},
		Policies:    []wantstate.Policy{{ID: "pol1", Namespace: "acme-prod", Name: "deny-all", DeploymentID: "api", Spec: map[string]any{"a": 1}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(want["us"]) != 0 {
		t.Errorf("us desires %v, want nothing", want["us"])
	}
	var got []string
	for o, f := range want["eu"] {
		got = append(got, o.String()+" "+describe(f))
	}
	slices.Sort(got)
	sentinel := naming.Sentinel("gw1")
	expect := []string{
		`CiliumNetworkPolicy acme-prod/deny-all unkey.ciliumnetworkpolicy.id=pol1 unkey.deployment.id=api unkey.managed.by=krane spec={"a":1}`,
		`Deployment acme-prod/` + sentinel + ` image=gw:v1 unkey.managed.by=krane unkey.sentinel.id=gw1 replicas=1`,
		`Service acme-prod/api unkey.deployment.id=api unkey.managed.by=krane`,
		`Service acme-prod/` + sentinel + ` unkey.managed.by=krane unkey.sentinel.id=gw1`,
		`StatefulSet acme-prod/api image=img:v1 unkey.deployment.id=api unkey.managed.by=krane replicas=2`,
	}
	if !slices.Equal(got, expect) {
		t.Errorf("desired objects:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(expect, "\n"))
	}
}
