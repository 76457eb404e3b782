package desired

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/deploysync/deploysync/daemon/kinds"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/jsontype"
)

// Summarize says what revision cur changed from prev (nil when cur is the
// first one recorded), e.g. "image app:1 -> app:2; replicas us-east 3 -> 4;
// env FOO changed; stopped in eu-west". Env values are never shown.
func Summarize(prev, cur *ent.DeploymentRevision) string {
	if prev == nil {
		if cur.Action == ActionDeploy {
			return "created in " + strings.Join(slices.Sorted(maps.Keys(cur.Regions)), ", ")
		}
		return "history starts here: " + describe(cur)
	}
	parts := specChanges(prev, cur)
	for _, region := range slices.Sorted(maps.Keys(cur.Regions)) {
		was, ok := prev.Regions[region]
		now := cur.Regions[region]
		switch {
		case !ok:
			parts = append(parts, fmt.Sprintf("added in %s with %d replicas", region, now.Replicas))
			continue
		case was.Replicas != now.Replicas:
			parts = append(parts, fmt.Sprintf("replicas %s %d -> %d", region, was.Replicas, now.Replicas))
		}
		if was.Status != now.Status {
			parts = append(parts, statusWord(now.Status)+" in "+region)
		}
	}
	for _, region := range slices.Sorted(maps.Keys(prev.Regions)) {
		if _, ok := cur.Regions[region]; !ok {
			parts = append(parts, "removed from "+region)
		}
	}
	return joined(parts)
}

// SummarizeRegion says what revision cur changed in region from prev (nil
// when cur is the first one recorded), e.g. "replicas 3 -> 4", "image app:1
// -> app:2", "stopped", "created".
func SummarizeRegion(prev, cur *ent.DeploymentRevision, region string) string {
	now, ok := cur.Regions[region]
	if !ok {
		return "deleted"
	}
	if prev == nil {
		if cur.Action == ActionDeploy {
			return "created"
		}
		return kinds.DescribeState(now.Status, now.Replicas, cur.Image)
	}
	was, ok := prev.Regions[region]
	if !ok {
		return "created"
	}
	parts := specChanges(prev, cur)
	if was.Replicas != now.Replicas {
		parts = append(parts, fmt.Sprintf("replicas %d -> %d", was.Replicas, now.Replicas))
	}
	if was.Status != now.Status {
		parts = append(parts, statusWord(now.Status))
	}
	return joined(parts)
}

// SummarizePromotion says what a rollout's promotion of region does,
// e.g. "rollout to revision 7, wave 2 of 3: image app:1 -> app:2".
func SummarizePromotion(r *ent.Rollout, region string) string {
	from, to := r.FromSpec, r.ToSpec
	prev := &ent.DeploymentRevision{Image: from.Image, CPUMillicores: from.CPUMillicores, MemoryMib: from.MemoryMiB, Port: from.Port,
		Command: from.Command, Env: from.Env}
	cur := &ent.DeploymentRevision{Image: to.Image, CPUMillicores: to.CPUMillicores, MemoryMib: to.MemoryMiB, Port: to.Port,
		Command: to.Command, Env: to.Env}
	what := joined(specChanges(prev, cur))
	if from.Hash == "" {
		what = "created: " + to.Image
	}
	wave := slices.IndexFunc(r.Strategy.Waves, func(w jsontype.Wave) bool { return slices.Contains(w.Regions, region) })
	return fmt.Sprintf("rollout to revision %d, wave %d of %d: %s", r.Revision, wave+1, len(r.Strategy.Waves), what)
}

// specChanges lists what changed in the spec every region shares.
func specChanges(prev, cur *ent.DeploymentRevision) []string {
	var parts []string
	if prev.Image != cur.Image {
		parts = append(parts, fmt.Sprintf("image %s -> %s", prev.Image, cur.Image))
	}
	if prev.CPUMillicores != cur.CPUMillicores {
		parts = append(parts, fmt.Sprintf("cpu %dm -> %dm", prev.CPUMillicores, cur.CPUMillicores))
	}
	if prev.MemoryMib != cur.MemoryMib {
		parts = append(parts, fmt.Sprintf("memory %dMi -> %dMi", prev.MemoryMib, cur.MemoryMib))
	}
	if prev.Port != cur.Port {
		parts = append(parts, fmt.Sprintf("port %d -> %d", prev.Port, cur.Port))
	}
	if !slices.Equal(prev.Command, cur.Command) {
		parts = append(parts, "command changed")
	}
	names := slices.Collect(maps.Keys(cur.Env))
	for name := range prev.Env {
		if _, ok := cur.Env[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		was, had := prev.Env[name]
		now, has := cur.Env[name]
		switch {
		case !had:
			parts = append(parts, "env "+name+" added")
		case !has:
			parts = append(parts, "env "+name+" removed")
		case was != now:
			parts = append(parts, "env "+name+" changed")
		}
	}
	return parts
}

func describe(r *ent.DeploymentRevision) string {
	parts := []string{r.Image}
	for _, region := range slices.Sorted(maps.Keys(r.Regions)) {
		spec := r.Regions[region]
		parts = append(parts, fmt.Sprintf("%s %s %d replicas", region, spec.Status, spec.Replicas))
	}
	return strings.Join(parts, ", ")
}

// statusWord is what a change to status did: "stopped" or "started".
func statusWord(status string) string {
	if status == string(Stopped) {
		return "stopped"
	}
	return "started"
}

func joined(parts []string) string {
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, "; ")
}
