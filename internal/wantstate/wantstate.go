package wantstate

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/sentinel"
	"github.com/deploysync/deploysync/internal/naming"
)

// Deployment is a deployment as one region should run it: its topology's
// spec (a rollout in flight gives regions different ones).
type Deployment struct {
	ID, Namespace, Image, SpecHash           string
	Replicas, CPUMillicores, MemoryMiB, Port int
	Command                                  []string
	Env                                      map[string]string
}

// Sentinel is a running sentinel.
type Sentinel struct {
	ID, Namespace, Image               string
	Replicas, CPUMillicores, MemoryMiB int
}

// Policy is a Cilium network policy; DeploymentID is empty for an
// environment's policy.
type Policy struct {
	ID, Namespace, Name, DeploymentID string
	Spec                              map[string]any
}

// Region is everything one region should run.
type Region struct {
	Deployments []Deployment
	Sentinels   []Sentinel
	Policies    []Policy
}

// Read returns what every region should run, by region name. The reads
// share one snapshot, so every topology read has its deployment (I6).
func Read(ctx context.Context, db *ent.Client) (map[string]*Region, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("desired state: begin snapshot: %w", err)
	}
	defer tx.Rollback()
	client := tx.Client()

	regions := map[string]*Region{}
	in := func(region string) *Region {
		if regions[region] == nil {
			regions[region] = &Region{}
		}
		return regions[region]
	}
	topologies, err := client.DeploymentTopology.Query().
		Where(deploymenttopology.DesiredStatusEQ(deploymenttopology.DesiredStatusRunning), deploymenttopology.SpecHashNEQ("")).
		WithDeployment().All(ctx)
	if err != nil {
		return nil, fmt.Errorf("desired state: topologies: %w", err)
	}
	for _, t := range topologies {
		d := t.Edges.Deployment
		r := in(t.Region)
		r.Deployments = append(r.Deployments, Deployment{ID: d.ID, Namespace: naming.Namespace(d.WorkspaceID, d.EnvironmentID),
			Image: t.Image, Replicas: t.Replicas, CPUMillicores: t.CPUMillicores, MemoryMiB: t.MemoryMib, Port: t.Port,
			Command: t.Command, Env: t.Env, SpecHash: t.SpecHash})
	}
	sentinels, err := client.Sentinel.Query().Where(sentinel.DesiredStateEQ(sentinel.DesiredStateRunning)).All(ctx)
	if err != nil {
		return nil, fmt.Errorf("desired state: sentinels: %w", err)
	}
	for _, s := range sentinels {
		r := in(s.Region)
		r.Sentinels = append(r.Sentinels, Sentinel{ID: s.ID, Namespace: naming.Namespace(s.WorkspaceID, s.EnvironmentID),
			Image: s.Image, Replicas: s.Replicas, CPUMillicores: s.CPUMillicores, MemoryMiB: s.MemoryMib})
	}
	policies, err := client.CiliumNetworkPolicy.Query().All(ctx)
	if err != nil {
		return nil, fmt.Errorf("desired state: policies: %w", err)
	}
	for _, p := range policies {
		owner := ""
		if p.DeploymentID != nil {
			owner = *p.DeploymentID
		}
		r := in(p.Region)
		r.Policies = append(r.Policies, Policy{ID: p.ID, Namespace: naming.Namespace(p.WorkspaceID, p.EnvironmentID),
			Name: p.Name, DeploymentID: owner, Spec: p.Spec})
	}
	return regions, nil
}
