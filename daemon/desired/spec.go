package desired

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	"github.com/deploysync/deploysync/ent/jsontype"
)

// SpecHash names what a spec runs: the fields runsLike compares, so two
// specs that run alike have one hash and a rollback to an earlier spec
// gives the pods that ran it their old hash back. Agents label pods with
// it; sixteen hex digits are a valid label value and, at 64 bits, do not
// collide among one deployment's specs.
func SpecHash(s DeploymentSpec) string {
	// Field order is fixed by the struct; maps encode with sorted keys.
	b, _ := json.Marshal(struct {
		Image         string            `json:"i"`
		CPUMillicores int               `json:"c"`
		MemoryMiB     int               `json:"m"`
		Port          int               `json:"p"`
		Command       []string          `json:"a"`
		Env           map[string]string `json:"e"`
	}{s.Image, s.CPUMillicores, s.MemoryMiB, s.Port, nonNilArgs(s.Command), nonNilEnv(s.Env)})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// nonNilArgs and nonNilEnv make an empty command or env hash alike
// whether it was stored as NULL or as an empty JSON value.
func nonNilArgs(a []string) []string {
	if a == nil {
		return []string{}
	}
	return a
}

func nonNilEnv(e map[string]string) map[string]string {
	if e == nil {
		return map[string]string{}
	}
	return e
}

// storedSpec is spec as a rollout stores it, with its hash.
func storedSpec(s DeploymentSpec) jsontype.Spec {
	return jsontype.Spec{Image: s.Image, CPUMillicores: s.CPUMillicores, MemoryMiB: s.MemoryMiB, Port: s.Port,
		Command: s.Command, Env: s.Env, Hash: SpecHash(s)}
}

// setSpec gives the topologies update selects the spec to run, from the
// deployment's revision revision. The zero spec (no hash) is nothing: the
// regions run nothing of the deployment.
func setSpec(u *ent.DeploymentTopologyUpdate, s jsontype.Spec, revision int) *ent.DeploymentTopologyUpdate {
	return u.SetImage(s.Image).SetCPUMillicores(s.CPUMillicores).SetMemoryMib(s.MemoryMiB).SetPort(s.Port).
		SetCommand(s.Command).SetEnv(s.Env).SetSpecHash(s.Hash).SetSpecRevision(revision)
}

// FillTopologySpecs gives the topologies of a database written before
// regions had their own spec the spec of their deployment, which is what
// they ran. ctrld runs it after migrating the schema; it is idempotent.
//
// Written without change rows (changefeed.Backfill): the regions run what they ran, so agents
// have nothing to apply. They get the hash (and label their pods with it)
// with the deployment's next change or the region's next full sync.
// Topologies of a deployment that has had a rollout are left alone: an
// empty spec there is a region a new deployment's rollout has not reached.
//
// It fills only a database none of whose topologies has a spec yet: one
// from before this version. Once any region has its own spec, an empty
// one is a region a new deployment's rollout did not reach, or one its
// rollback left running nothing; the rollout that says so may be gone
// (retention prunes old rollouts), and filling it would hand the region
// the spec that failed, with no change row.
func FillTopologySpecs(ctx context.Context, client *ent.Client) (int, error) {
	filledBefore, err := client.DeploymentTopology.Query().Where(deploymenttopology.SpecHashNEQ("")).Exist(ctx)
	if err != nil || filledBefore {
		return 0, err
	}
	filled := 0
	for {
		topologies, err := client.DeploymentTopology.Query().
			Where(deploymenttopology.SpecHash(""),
				deploymenttopology.HasDeploymentWith(deployment.Not(deployment.HasRollouts()))).
			WithDeployment().Limit(500).All(ctx)
		if err != nil {
			return filled, fmt.Errorf("read topologies without a spec: %w", err)
		}
		if len(topologies) == 0 {
			return filled, nil
		}
		for _, t := range topologies {
			spec := storedSpec(specOf(t.Edges.Deployment))
			n, err := client.DeploymentTopology.Update().Where(deploymenttopology.ID(t.ID), deploymenttopology.SpecHash("")).
				SetImage(spec.Image).SetCPUMillicores(spec.CPUMillicores).SetMemoryMib(spec.MemoryMiB).SetPort(spec.Port).
				SetCommand(spec.Command).SetEnv(spec.Env).SetSpecHash(spec.Hash).
				Save(changefeed.Backfill(ctx))
			if err != nil {
				return filled, fmt.Errorf("fill the spec of deployment %s in %s: %w", t.DeploymentID, t.Region, err)
			}
			filled += n
		}
	}
}
