package desired_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/deploysync/deploysync/daemon/desired"
)

// deployAll runs one Deploy per region list at the same moment, deployment
// i as ID prefix-i, and returns their errors.
func deployAll(s *desired.Store, prefix string, regions [][]string) []error {
	ctx := context.Background()
	errs := make([]error, len(regions))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range regions {
		wg.Go(func() {
			<-start
			errs[i] = s.Deploy(ctx, spec(fmt.Sprintf("%s-%d", prefix, i)), regions[i], 1)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// Operators (or CI) deploying many services at once all succeed, whether
// the deploys share a region or each has its own: concurrent deploys used
// to deadlock on the topology index, and most of a burst failed even after
// store.WithTx's reruns.
func TestConcurrentDeploysAllSucceed(t *testing.T) {
	const burst = 16
	for _, c := range []struct {
		name    string
		regions func(i int) []string
	}{
		{"one region", func(int) []string { return []string{"eu-west"} }},
		{"a region each", func(i int) []string { return []string{fmt.Sprintf("region-%d", i)} }},
		{"overlapping regions", func(i int) []string {
			return [][]string{{"eu-west", "us-east"}, {"us-east", "ap-south"}, {"ap-south", "eu-west"}}[i%3]
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, client := setup(t)
			ctx := context.Background()
			regions := make([][]string, burst)
			for i := range regions {
				regions[i] = c.regions(i)
				for _, r := range regions[i] {
					if err := s.EnsureRegion(ctx, r); err != nil {
						t.Fatal(err)
					}
				}
			}
			topologies := 0
			for round := range 10 {
				for i, err := range deployAll(s, fmt.Sprintf("api-%d", round), regions) {
					if err != nil {
						t.Fatalf("round %d: deploy %d of %d concurrent: %v", round, i, burst, err)
					}
					topologies += len(regions[i])
				}
			}
			if n := client.DeploymentTopology.Query().CountX(ctx); n != topologies {
				t.Errorf("%d topologies stored, want %d", n, topologies)
			}
			if n := len(changes(t, client)); n != topologies {
				t.Errorf("%d change rows, want one per topology, %d", n, topologies)
			}
		})
	}
}

// A deploy names at most desired.MaxDeployRegions regions. 70,000 valid,
// distinct names used to reach the database and fail there ("too many
// placeholders", Unavailable, raw driver text); now they are refused
// before it, naming the field, and nothing is written.
func TestDeployRegionsAreBounded(t *testing.T) {
	s, client := setup(t)
	ctx := context.Background()
	many := make([]string, 0, 70_000)
	for i := range cap(many) {
		many = append(many, fmt.Sprintf("r-%d", i))
	}
	// Registered, so that only their number is wrong.
	for _, r := range many[:desired.MaxDeployRegions+1] {
		if err := s.EnsureRegion(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	before := written(t, client)
	for _, n := range []int{len(many), desired.MaxDeployRegions + 1} {
		err := s.Deploy(ctx, spec("api-1"), many[:n], 1)
		if !errors.Is(err, desired.ErrInvalid) || !strings.HasPrefix(err.Error(), "regions: ") || !strings.Contains(err.Error(), fmt.Sprint(n)) {
			t.Errorf("deploy to %d regions: got %v, want ErrInvalid naming regions and their number", n, err)
		}
	}
	if after := written(t, client); after != before {
		t.Errorf("refused deploys changed the database:\n before %s\n after  %s", before, after)
	}
	if err := s.Deploy(ctx, spec("api-1"), many[:desired.MaxDeployRegions], 1); err != nil {
		t.Errorf("deploy to %d regions, the most allowed: %v", desired.MaxDeployRegions, err)
	}
}
