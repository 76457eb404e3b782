package desired_test

import (
	"context"
	"strings"
	"testing"

	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/internal/naming"
)

// A deployment's topologies carry its namespace (a full sync reads a
// region's deployments from them alone), and `ctrld migrate` gives the
// topologies an older ctrld wrote, with none, their deployment's, and
// writes no change rows for it: what agents are sent is the same.
func TestTopologiesCarryTheirDeploymentsNamespace(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	long := strings.Repeat("w", 40) // a shortened namespace, ending in a hash
	for _, d := range []struct{ id, ws, env string }{{"a", "ws1", "prod"}, {"b", "ws1", "dev"}, {"c", long, "prod"}} {
		if err := s.Deploy(ctx, pairSpec(d.id, d.ws, d.env), []string{"eu-west", "us-east"}, 1); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"a": "ws1-prod", "b": "ws1-dev", "c": naming.Namespace(long, "prod")}
	check := func(when string) {
		t.Helper()
		tops, err := client.DeploymentTopology.Query().All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(tops) != 6 {
			t.Fatalf("%d topologies, want 6", len(tops))
		}
		for _, top := range tops {
			if top.Namespace != want[top.DeploymentID] {
				t.Errorf("%s: %s in %s has namespace %q, want %q", when, top.DeploymentID, top.Region, top.Namespace, want[top.DeploymentID])
			}
		}
	}
	check("deployed")

	// As an older ctrld wrote them.
	// rawsql: older rows: deployment_topology.namespace is immutable in Ent.
	if _, err := client.ExecContext(ctx, "UPDATE deployment_topology SET namespace = ''"); err != nil {
		t.Fatal(err)
	}
	if n := client.DeploymentTopology.Query().Where(deploymenttopology.Namespace("")).CountX(ctx); n != 6 {
		t.Fatalf("%d topologies without a namespace, want 6", n)
	}
	before := len(changes(t, client))
	if err := store.Migrate(ctx, client); err != nil {
		t.Fatal(err)
	}
	check("migrated")
	if after := len(changes(t, client)); after != before {
		t.Errorf("the migration wrote %d change rows", after-before)
	}
}
