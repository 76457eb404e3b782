package desired_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/internal/naming"
)

// pairSpec is deployment id of workspace ws, environment env.
func pairSpec(id, ws, env string) desired.DeploymentSpec {
	d := spec(id)
	d.WorkspaceID, d.EnvironmentID = ws, env
	return d
}

// ("acme-prod", "x") and ("acme", "prod-x") both map to namespace
// acme-prod-x. Whichever puts a resource there first owns it; every write
// of the other is refused with ErrConflict naming the namespace and its
// owner, and writes nothing. The owner goes on using it.
func TestNamespaceOfAnotherPairIsRefused(t *testing.T) {
	a, b := desired.Pair{WorkspaceID: "acme-prod", EnvironmentID: "x"}, desired.Pair{WorkspaceID: "acme", EnvironmentID: "prod-x"}
	if naming.Namespace(a.WorkspaceID, a.EnvironmentID) != naming.Namespace(b.WorkspaceID, b.EnvironmentID) {
		t.Fatal("the pairs no longer collide; pick two that do")
	}
	for _, order := range [][2]desired.Pair{{a, b}, {b, a}} {
		first, second := order[0], order[1]
		t.Run(first.WorkspaceID+"-first", func(t *testing.T) {
			s, client := setup(t)
			ctx := context.Background()
			if err := s.Deploy(ctx, pairSpec("api-1", first.WorkspaceID, first.EnvironmentID), []string{"eu-west"}, 1); err != nil {
				t.Fatal(err)
			}
			before := written(t, client)

			sentinel := desired.SentinelSpec{ID: "sen-1", WorkspaceID: second.WorkspaceID, EnvironmentID: second.EnvironmentID,
				Region: "eu-west", Image: "sentinel:1", Replicas: 1, CPUMillicores: 100, MemoryMiB: 64}
			policy := desired.PolicySpec{ID: "pol-1", WorkspaceID: second.WorkspaceID, EnvironmentID: second.EnvironmentID,
				Region: "eu-west", Name: "allow-all", Spec: map[string]any{"endpointSelector": map[string]any{}, "ingress": []any{map[string]any{}}}}
			_, sentinelErr := s.EnsureSentinel(ctx, sentinel)
			_, policyErr := s.EnsureCiliumPolicy(ctx, policy)
			for name, err := range map[string]error{
				"deploy":          s.Deploy(ctx, pairSpec("api-2", second.WorkspaceID, second.EnvironmentID), []string{"us-east"}, 1),
				"ensure sentinel": sentinelErr,
				"ensure policy":   policyErr,
			} {
				msg := fmt.Sprint(err)
				owner := fmt.Sprintf("workspace %s environment %s's", first.WorkspaceID, first.EnvironmentID)
				if !errors.Is(err, desired.ErrConflict) || !strings.Contains(msg, `"acme-prod-x"`) || !strings.Contains(msg, owner) {
					t.Errorf("%s by the second pair: got %v, want ErrConflict naming acme-prod-x and %s", name, err, owner)
				}
			}
			// Bad input is answered as bad input, whoever owns the namespace.
			bad := pairSpec("api-2", second.WorkspaceID, second.EnvironmentID)
			bad.MemoryMiB = 0
			if err := s.Deploy(ctx, bad, []string{"us-east"}, 1); !errors.Is(err, desired.ErrInvalid) {
				t.Errorf("bad deploy by the second pair: got %v, want ErrInvalid", err)
			}
			if after := written(t, client); after != before {
				t.Errorf("refused writes changed the database:\n before %s\n after  %s", before, after)
			}

			// The owner is not affected.
			if err := s.Deploy(ctx, pairSpec("api-3", first.WorkspaceID, first.EnvironmentID), []string{"us-east"}, 1); err != nil {
				t.Errorf("second deploy of the owner: %v", err)
			}
			sentinel.WorkspaceID, sentinel.EnvironmentID = first.WorkspaceID, first.EnvironmentID
			if _, err := s.EnsureSentinel(ctx, sentinel); err != nil {
				t.Errorf("sentinel of the owner: %v", err)
			}
		})
	}
}

// Concurrent first claims of one namespace by two pairs: the database lets
// exactly one pair in, and every write of the other is refused.
func TestConcurrentClaimsLetOnePairIn(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	pairs := []desired.Pair{{WorkspaceID: "acme-prod", EnvironmentID: "x"}, {WorkspaceID: "acme", EnvironmentID: "prod-x"}}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	start := make(chan struct{})
	for i := range errs {
		p := pairs[i%2]
		wg.Go(func() {
			<-start
			// Deploys run one at a time (they lock the regions); sentinels
			// do not, so their claims race each other and the deploys'.
			if i%4 < 2 {
				errs[i] = s.Deploy(ctx, pairSpec(fmt.Sprintf("api-%d", i), p.WorkspaceID, p.EnvironmentID), []string{"eu-west"}, 1)
				return
			}
			_, errs[i] = s.EnsureSentinel(ctx, desired.SentinelSpec{ID: fmt.Sprintf("gw-%d", i), WorkspaceID: p.WorkspaceID,
				EnvironmentID: p.EnvironmentID, Region: "eu-west", Image: "gw:1", Replicas: 1, CPUMillicores: 100, MemoryMiB: 64})
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.Is(err, desired.ErrConflict) {
			t.Errorf("deploy %d: %v, want success or ErrConflict", i, err)
		}
	}
	in := map[desired.Pair]int{}
	for _, d := range client.Deployment.Query().AllX(ctx) {
		in[desired.Pair{WorkspaceID: d.WorkspaceID, EnvironmentID: d.EnvironmentID}]++
	}
	for _, g := range client.Sentinel.Query().AllX(ctx) {
		in[desired.Pair{WorkspaceID: g.WorkspaceID, EnvironmentID: g.EnvironmentID}]++
	}
	if len(in) != 1 {
		t.Fatalf("deployments and sentinels per pair in namespace acme-prod-x: %v; want one pair only", in)
	}
	claim, err := client.Namespace.Get(ctx, "acme-prod-x")
	if err != nil {
		t.Fatal(err)
	}
	if owner := (desired.Pair{WorkspaceID: claim.WorkspaceID, EnvironmentID: claim.EnvironmentID}); in[owner] == 0 {
		t.Errorf("resources per pair in namespace acme-prod-x: %v; want the claim's owner %v", in, owner)
	}
}

// A database from before namespaces were claimed: ClaimExistingNamespaces
// claims every pair's namespace, leaves names unchanged, and reports (and
// logs) a namespace two pairs already share instead of merging them; the
// pair with the older resources keeps it.
func TestClaimExistingNamespaces(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	// Written as an older ctrld did: no claims.
	err := store.WithTx(ctx, client, func(tx *ent.Tx) error {
		for _, d := range []desired.DeploymentSpec{
			pairSpec("api-1", "acme-prod", "x"), // the older of the colliding pair
			pairSpec("api-2", "ws1", "prod"),
		} {
			if err := tx.Deployment.Create().SetID(d.ID).SetWorkspaceID(d.WorkspaceID).SetEnvironmentID(d.EnvironmentID).
				SetImage(d.Image).SetCPUMillicores(d.CPUMillicores).SetMemoryMib(d.MemoryMiB).Exec(ctx); err != nil {
				return err
			}
		}
		if err := tx.Sentinel.Create().SetID("sen-1").SetWorkspaceID("acme").SetEnvironmentID("prod-x").SetRegion("eu-west").
			SetImage("sentinel:1").SetReplicas(1).SetCPUMillicores(100).SetMemoryMib(64).
			SetCreatedAt(time.Now().Add(time.Hour)).Exec(ctx); err != nil {
			return err
		}
		return tx.CiliumNetworkPolicy.Create().SetID("pol-1").SetWorkspaceID("ws2").SetEnvironmentID("dev").SetRegion("eu-west").
			SetName("allow").SetSpec(map[string]any{"endpointSelector": map[string]any{}, "ingress": []any{map[string]any{}}}).Exec(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))

	for run := range 2 { // idempotent
		collisions, err := desired.ClaimExistingNamespaces(ctx, client, log)
		if err != nil {
			t.Fatal(err)
		}
		want := []desired.NamespaceCollision{{Namespace: "acme-prod-x",
			Owner:  desired.Pair{WorkspaceID: "acme-prod", EnvironmentID: "x"},
			Others: []desired.Pair{{WorkspaceID: "acme", EnvironmentID: "prod-x"}}}}
		if fmt.Sprint(collisions) != fmt.Sprint(want) {
			t.Errorf("run %d: collisions %v, want %v", run, collisions, want)
		}
		var claims []string
		for _, c := range client.Namespace.Query().AllX(ctx) {
			claims = append(claims, fmt.Sprintf("%s=%s/%s", c.ID, c.WorkspaceID, c.EnvironmentID))
		}
		slices.Sort(claims)
		if got := strings.Join(claims, " "); got != "acme-prod-x=acme-prod/x ws1-prod=ws1/prod ws2-dev=ws2/dev" {
			t.Errorf("run %d: claims %s", run, got)
		}
	}
	if line := logged.String(); !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "namespace=acme-prod-x") {
		t.Errorf("the collision was not logged as an error: %q", line)
	}

	// From now on the claims hold: the other pair adds nothing there.
	if err := s.Deploy(ctx, pairSpec("api-3", "acme", "prod-x"), []string{"eu-west"}, 1); !errors.Is(err, desired.ErrConflict) {
		t.Errorf("deploy of the pair that lost the namespace: got %v, want ErrConflict", err)
	}
	if err := s.Deploy(ctx, pairSpec("api-4", "ws2", "dev"), []string{"eu-west"}, 1); err != nil {
		t.Errorf("deploy into a backfilled namespace of the same pair: %v", err)
	}
}

// Claims made before their namespace was reserved (by an older ctrld, or
// before --reserved-namespaces named it) are reported at start, logged as
// errors, and never rewritten: the claim and its resources stay, and from
// now on the pair adds nothing there.
func TestReservedClaimsAreReportedNotRewritten(t *testing.T) {
	_, client := setup(t)
	ctx := context.Background()
	err := store.WithTx(ctx, client, func(tx *ent.Tx) error { // as an older ctrld wrote them
		for _, d := range []desired.DeploymentSpec{
			pairSpec("dns", "kube", "system"),
			pairSpec("agent", "platform", "agents"),
			pairSpec("api", "acme", "prod"),
		} {
			if err := tx.Deployment.Create().SetID(d.ID).SetWorkspaceID(d.WorkspaceID).SetEnvironmentID(d.EnvironmentID).
				SetImage(d.Image).SetCPUMillicores(d.CPUMillicores).SetMemoryMib(d.MemoryMiB).Exec(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	if _, err := desired.ClaimExistingNamespaces(ctx, client, log); err != nil {
		t.Fatal(err)
	}
	before := written(t, client)
	reserved := naming.MustReserved("platform-agents")
	for run := range 2 {
		found, err := desired.ReportReservedClaims(ctx, client, reserved, log)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range found {
			got = append(got, fmt.Sprintf("%s=%s/%s", c.Namespace, c.Owner.WorkspaceID, c.Owner.EnvironmentID))
		}
		if strings.Join(got, " ") != "kube-system=kube/system platform-agents=platform/agents" {
			t.Errorf("run %d: reported %v, want kube-system and platform-agents", run, got)
		}
	}
	if after := written(t, client); after != before {
		t.Errorf("reporting changed the database:\n before %s\n after  %s", before, after)
	}
	for _, ns := range []string{"kube-system", "platform-agents"} {
		if !strings.Contains(logged.String(), "level=ERROR") || !strings.Contains(logged.String(), "namespace="+ns) {
			t.Errorf("the reserved claim of %s was not logged as an error: %q", ns, logged.String())
		}
	}
	s := desired.New(client, desired.WithReserved(reserved))
	if err := s.Deploy(ctx, pairSpec("dns-2", "kube", "system"), []string{"eu-west"}, 1); !errors.Is(err, desired.ErrInvalid) {
		t.Errorf("a new deploy into the reserved claim: got %v, want ErrInvalid", err)
	}
	if err := s.Deploy(ctx, pairSpec("api-2", "acme", "prod"), []string{"eu-west"}, 1); err != nil {
		t.Errorf("a deploy into an unreserved claim: %v", err)
	}
}
