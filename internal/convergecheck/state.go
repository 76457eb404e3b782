package convergecheck

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/internal/wantstate"
)

// object is a managed object's whole identity (invariant I7).
type object struct{ kind, namespace, name string }

func (o object) String() string { return o.kind + " " + o.namespace + "/" + o.name }

// fields are what is compared on an object: the managed-by and resource ID
// labels ("" when absent) and the spec values agentd takes from desired
// state.
type fields map[string]string

// view is the managed objects of one region, desired or found.
type view map[object]fields

// The labels compared on every object: an object must carry its own
// resource's ID label and no other resource kind's.
var idLabels = []string{kube.ManagedByLabel, kube.DeploymentLabel, kube.SentinelLabel, kube.PolicyLabel}

func labelFields(set map[string]string) fields {
	f := fields{}
	for _, l := range idLabels {
		f["label "+l] = set[l]
	}
	return f
}

// desired reads from the database, in one snapshot, what every region
// must run.
func (s *System) desired(ctx context.Context) (map[string]view, error) {
	regions, err := wantstate.Read(ctx, s.env.DB.Ent)
	if err != nil {
		return nil, err
	}
	return desiredViews(regions)
}

// desiredViews are the objects each region must hold: the StatefulSet and
// Service of each running topology, the Deployment and Service of each
// running sentinel, every policy.
func desiredViews(regions map[string]*wantstate.Region) (map[string]view, error) {
	want := map[string]view{}
	for _, name := range Regions {
		want[name] = view{}
	}
	for name, r := range regions {
		v := want[name]
		if v == nil { // a region without a cluster here: nothing compares it
			v = view{}
			want[name] = v
		}
		for _, d := range r.Deployments {
			labels := labelFields(map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.DeploymentLabel: d.ID})
			v[object{"Service", d.Namespace, d.ID}] = labels
			sts := maps.Clone(labels)
			sts["replicas"], sts["image"] = strconv.Itoa(d.Replicas), d.Image
			v[object{"StatefulSet", d.Namespace, d.ID}] = sts
		}
		for _, sn := range r.Sentinels {
			n := naming.Sentinel(sn.ID)
			labels := labelFields(map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.SentinelLabel: sn.ID})
			v[object{"Service", sn.Namespace, n}] = labels
			dep := maps.Clone(labels)
			dep["replicas"], dep["image"] = strconv.Itoa(sn.Replicas), sn.Image
			v[object{"Deployment", sn.Namespace, n}] = dep
		}
		for _, p := range r.Policies {
			set := map[string]string{kube.ManagedByLabel: kube.ManagedByValue, kube.PolicyLabel: p.ID}
			if p.DeploymentID != "" {
				set[kube.DeploymentLabel] = p.DeploymentID
			}
			f := labelFields(set)
			spec, err := json.Marshal(p.Spec)
			if err != nil {
				return nil, fmt.Errorf("policy %s: %w", p.ID, err)
			}
			f["spec"] = string(spec)
			v[object{"CiliumNetworkPolicy", p.Namespace, p.Name}] = f
		}
	}
	return want, nil
}

// actual lists every managed object of the kinds agentd applies in the
// region's cluster, in every namespace.
func (r *region) actual(ctx context.Context) (view, error) {
	got := view{}
	for _, k := range managedKinds {
		objs, err := k.list(ctx, r.clients)
		if err != nil {
			return nil, fmt.Errorf("list %s objects: %w", k.kind, err)
		}
		for _, o := range objs {
			f := labelFields(o.GetLabels())
			switch o := o.(type) {
			case *appsv1.StatefulSet:
				f["replicas"], f["image"] = replicas(o.Spec.Replicas), image(o.Spec.Template.Spec.Containers)
			case *appsv1.Deployment:
				f["replicas"], f["image"] = replicas(o.Spec.Replicas), image(o.Spec.Template.Spec.Containers)
			case *unstructured.Unstructured:
				spec, err := json.Marshal(o.Object["spec"])
				if err != nil {
					return nil, err
				}
				f["spec"] = string(spec)
			}
			if o.GetDeletionTimestamp() != nil {
				f["terminating"] = "true" // still there; a desired object must not be going
			}
			got[object{k.kind, o.GetNamespace(), o.GetName()}] = f
		}
	}
	return got, nil
}

func replicas(n *int32) string {
	if n == nil {
		return "<unset>"
	}
	return strconv.Itoa(int(*n))
}

// image is the first container's: agentd runs one container per Pod.
func image(containers []corev1.Container) string {
	if len(containers) == 0 {
		return ""
	}
	return containers[0].Image
}

// diff lists how got differs from want, one line per object, sorted:
// "missing" (desired, not there), "extra" (there, not desired) and "wrong"
// (there, with the fields that differ).
func diff(want, got view) []string {
	keys := slices.Collect(maps.Keys(want))
	for o := range got {
		if _, ok := want[o]; !ok {
			keys = append(keys, o)
		}
	}
	slices.SortFunc(keys, func(a, b object) int { return cmp.Compare(a.String(), b.String()) })
	var out []string
	for _, o := range keys {
		w, inWant := want[o]
		g, inGot := got[o]
		switch {
		case !inGot:
			out = append(out, fmt.Sprintf("missing %s (want %s)", o, describe(w)))
		case !inWant:
			out = append(out, fmt.Sprintf("extra   %s (found %s)", o, describe(g)))
		default:
			var wrong []string
			for _, k := range slices.Sorted(maps.Keys(w)) {
				if g[k] != w[k] {
					wrong = append(wrong, fmt.Sprintf("%s %q, want %q", k, g[k], w[k]))
				}
			}
			if g["terminating"] != "" {
				wrong = append(wrong, "being deleted")
			}
			if len(wrong) > 0 {
				out = append(out, fmt.Sprintf("wrong   %s: %s", o, strings.Join(wrong, "; ")))
			}
		}
	}
	return out
}

// describe shows an object's non-empty fields, sorted.
func describe(f fields) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(f)) {
		if f[k] != "" {
			parts = append(parts, strings.TrimPrefix(k, "label ")+"="+f[k])
		}
	}
	return strings.Join(parts, " ")
}
