package feedcheck

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/deploysync/deploysync/daemon/stream/streamtest"
	"github.com/deploysync/deploysync/internal/wantstate"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// A view maps each resource an agent of a region should run to a text of
// everything it runs it with. The database's side comes from wantstate, not
// from the stream's own event builders, so a mistake there shows.

// desiredView is the texts of what a region should run.
func desiredView(r *wantstate.Region) map[streamtest.Key]string {
	view := map[streamtest.Key]string{}
	if r == nil {
		return view
	}
	for _, d := range r.Deployments {
		view[streamtest.Key{Kind: rpc.KindDeployment, ID: d.ID}] = deploymentText(d.Namespace, d.Image, d.Replicas,
			d.CPUMillicores, d.MemoryMiB, d.Port, d.Command, d.Env) + " hash=" + d.SpecHash
	}
	for _, s := range r.Sentinels {
		view[streamtest.Key{Kind: rpc.KindSentinel, ID: s.ID}] = sentinelText(s.Namespace, s.Image, s.Replicas, s.CPUMillicores, s.MemoryMiB)
	}
	for _, p := range r.Policies {
		view[streamtest.Key{Kind: rpc.KindCiliumNetworkPolicy, ID: p.ID}] = policyText(p.Namespace, p.Name, p.DeploymentID, p.Spec)
	}
	return view
}

// followerView turns a follower's applied events into the same texts.
func followerView(events map[streamtest.Key]*ctrlv1.DeploymentChangeEvent) map[streamtest.Key]string {
	view := make(map[streamtest.Key]string, len(events))
	for k, ev := range events {
		switch e := ev.Event.(type) {
		case *ctrlv1.DeploymentChangeEvent_Deployment:
			d := e.Deployment.GetDeployment()
			view[k] = deploymentText(d.GetNamespace(), d.GetImage(), int(d.GetReplicas()), int(d.GetCpuMillicores()),
				int(d.GetMemoryMib()), int(d.GetPort()), d.GetCommand(), d.GetEnv()) + " hash=" + d.GetSpecHash()
		case *ctrlv1.DeploymentChangeEvent_Sentinel:
			s := e.Sentinel.GetSentinel()
			view[k] = sentinelText(s.GetNamespace(), s.GetImage(), int(s.GetReplicas()), int(s.GetCpuMillicores()), int(s.GetMemoryMib()))
		case *ctrlv1.DeploymentChangeEvent_CiliumNetworkPolicy:
			p := e.CiliumNetworkPolicy.GetCiliumNetworkPolicy()
			view[k] = policyText(p.GetNamespace(), p.GetName(), p.GetDeploymentId(), p.GetSpec().AsMap())
		default:
			view[k] = fmt.Sprintf("unexpected event %T", ev.Event)
		}
	}
	return view
}

func deploymentText(ns, image string, replicas, cpu, mem, port int, command []string, env map[string]string) string {
	vars := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		vars = append(vars, k+"="+env[k])
	}
	return fmt.Sprintf("namespace=%s image=%s replicas=%d cpu=%dm memory=%dMi port=%d command=%q env=[%s]",
		ns, image, replicas, cpu, mem, port, command, strings.Join(vars, ","))
}

func sentinelText(ns, image string, replicas, cpu, mem int) string {
	return fmt.Sprintf("namespace=%s image=%s replicas=%d cpu=%dm memory=%dMi", ns, image, replicas, cpu, mem)
}

func policyText(ns, name, owner string, spec map[string]any) string {
	// encoding/json sorts map keys, and both sides hold JSON numbers as
	// float64, so equal specs encode equally.
	b, err := json.Marshal(spec)
	if err != nil {
		return fmt.Sprintf("namespace=%s name=%s spec not JSON: %v", ns, name, err)
	}
	return fmt.Sprintf("namespace=%s name=%s deployment=%q spec=%s", ns, name, owner, b)
}

// diff lists how a follower's view differs from the database's.
func diff(want map[streamtest.Key]string, events map[streamtest.Key]*ctrlv1.DeploymentChangeEvent) []string {
	got := followerView(events)
	var out []string
	for _, k := range keysOf(want, got) {
		w, inDB := want[k]
		g, held := got[k]
		switch {
		case inDB && !held:
			out = append(out, fmt.Sprintf("%s %s: missing (the database has %s)", k.Kind, k.ID, w))
		case !inDB && held:
			out = append(out, fmt.Sprintf("%s %s: still held, the database has no such running resource (held: %s)", k.Kind, k.ID, g))
		case w != g:
			out = append(out, fmt.Sprintf("%s %s: stale: holds %s, the database has %s", k.Kind, k.ID, g, w))
		}
	}
	return out
}

// keysOf lists a view's keys in order, for stable messages.
func keysOf(views ...map[streamtest.Key]string) []streamtest.Key {
	seen := map[streamtest.Key]bool{}
	for _, v := range views {
		for k := range v {
			seen[k] = true
		}
	}
	return slices.SortedFunc(maps.Keys(seen), func(a, b streamtest.Key) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.ID, b.ID))
	})
}
