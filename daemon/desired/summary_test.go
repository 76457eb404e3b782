package desired_test

import (
	"strings"
	"testing"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/jsontype"
)

func rev(action, image string, env map[string]string, regions map[string]jsontype.RegionSpec) *ent.DeploymentRevision {
	return &ent.DeploymentRevision{Action: action, Image: image, CPUMillicores: 100, MemoryMib: 64, Port: 8080,
		Env: env, Regions: regions}
}

func TestSummariesSayWhatChangedWithoutEnvValues(t *testing.T) {
	running := func(n int) jsontype.RegionSpec { return jsontype.RegionSpec{Replicas: n, Status: "running"} }
	stopped := func(n int) jsontype.RegionSpec { return jsontype.RegionSpec{Replicas: n, Status: "stopped"} }
	base := rev("deploy", "app:1", map[string]string{"FOO": "secret-1", "OLD": "x"},
		map[string]jsontype.RegionSpec{"us-east": running(3), "eu-west": running(2)})
	moreCPU := rev("update", "app:1", base.Env, base.Regions)
	moreCPU.CPUMillicores, moreCPU.MemoryMib, moreCPU.Port, moreCPU.Command = 200, 128, 9090, []string{"serve"}

	cases := []struct {
		name      string
		prev, cur *ent.DeploymentRevision
		all       string
		inUSEast  string
	}{
		{"deploy", nil, base, "created in eu-west, us-east", "created"},
		{"first recorded after an older deploy", nil, rev("scale", "app:1", nil, map[string]jsontype.RegionSpec{"us-east": running(4)}),
			"history starts here: app:1, us-east running 4 replicas", "desired: running, 4 replicas, app:1"},
		{"image, replicas, env and a stop", base,
			rev("update", "app:2", map[string]string{"FOO": "secret-2", "NEW": "y"},
				map[string]jsontype.RegionSpec{"us-east": running(4), "eu-west": stopped(2)}),
			"image app:1 -> app:2; env FOO changed; env NEW added; env OLD removed; stopped in eu-west; replicas us-east 3 -> 4",
			"image app:1 -> app:2; env FOO changed; env NEW added; env OLD removed; replicas 3 -> 4"},
		{"resources, port and command", base, moreCPU,
			"cpu 100m -> 200m; memory 64Mi -> 128Mi; port 8080 -> 9090; command changed",
			"cpu 100m -> 200m; memory 64Mi -> 128Mi; port 8080 -> 9090; command changed"},
		{"start", rev("stop", "app:1", nil, map[string]jsontype.RegionSpec{"us-east": stopped(3)}),
			rev("start", "app:1", nil, map[string]jsontype.RegionSpec{"us-east": running(3)}), "started in us-east", "started"},
		{"nothing", base, base, "no change", "no change"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := desired.Summarize(c.prev, c.cur); got != c.all {
				t.Errorf("Summarize = %q, want %q", got, c.all)
			}
			if got := desired.SummarizeRegion(c.prev, c.cur, "us-east"); got != c.inUSEast {
				t.Errorf("SummarizeRegion(us-east) = %q, want %q", got, c.inUSEast)
			}
			if got := desired.Summarize(c.prev, c.cur) + desired.SummarizeRegion(c.prev, c.cur, "us-east"); strings.Contains(got, "secret") {
				t.Errorf("an env value is shown: %q", got)
			}
		})
	}
}
