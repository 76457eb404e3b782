package cmdline

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// docs/cli-json.md has a row for every field a JSON document can carry: a
// field added to the API's messages or to result must be documented.
func TestCLIJSONDocNamesEveryField(t *testing.T) {
	doc := readFile(t, "../../docs/cli-json.md")
	var names []string
	for _, m := range []proto.Message{&ctrlv1.RegionOverview{}, &ctrlv1.DeploymentSummary{}, &ctrlv1.DeploymentInRegion{},
		&ctrlv1.Rollout{}, &ctrlv1.RolloutRegion{}, &ctrlv1.RolloutStrategy{}, &ctrlv1.RolloutWave{}, &ctrlv1.RolloutCheck{}, &ctrlv1.RegionCheck{}, &ctrlv1.LivePod{}, &ctrlv1.LiveContainer{}, &ctrlv1.LiveEvent{}, &ctrlv1.StreamLogsResponse{},
		&ctrlv1.DeploymentRevision{}, &ctrlv1.GetFleetResponse{}, &ctrlv1.FleetHalt{}, &ctrlv1.FleetScope{}, &ctrlv1.FreezeWindow{},
		&ctrlv1.PacingBound{}, &ctrlv1.HaltRolloutsResponse{}, &ctrlv1.ResumeRolloutsResponse{}, &ctrlv1.SetFreezeWindowResponse{}} {
		fields := m.ProtoReflect().Descriptor().Fields()
		for i := range fields.Len() {
			names = append(names, string(fields.Get(i).Name()))
		}
	}
	for f := range reflect.TypeFor[result]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		names = append(names, name)
	}
	for _, name := range names {
		if !strings.Contains(doc, "| `"+name+"` |") {
			t.Errorf("docs/cli-json.md has no row for field %s", name)
		}
	}
}

// The README names every environment variable the console reads.
func TestREADMENamesEveryEnvironmentVariable(t *testing.T) {
	readme := readFile(t, "../../README.md")
	for _, f := range App().Flags {
		for _, v := range f.(cli.DocGenerationFlag).GetEnvVars() {
			if !strings.Contains(readme, "`"+v+"`") {
				t.Errorf("README.md does not name %s", v)
			}
		}
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
