package convergecheck

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/deploymentrevision"
	entrollout "github.com/deploysync/deploysync/ent/rollout"
)

// immediateChange is an update ctrld took, sent at sent and answered at
// answered, that made revision of the deployment with env REV=rev.
type immediateChange struct {
	deployment, rev string
	revision        int32
	sent, answered  time.Time
}

// judgeImmediate holds an update ctrld took to the fleet's controls, if
// it was an immediate change (its revision made no rollout): a change with
// no rollout to wait in must be refused while a freeze window covering
// its environment is closed, or a halt of its environment, of everywhere
// or of one of its regions stands. Only controls that stood all through
// the call count: set (answered) before it was sent and not lifted,
// replaced or deleted (sent) until after its answer. It returns the
// violations; none when the change made a rollout, its deployment is gone
// or the database cannot be read (a fault's outage). The operators who
// send these never break glass.
func (s *System) judgeImmediate(ctx context.Context, c immediateChange) []string {
	return judgeImmediate(ctx, s.env.DB.Ent, s.model, c)
}

func judgeImmediate(ctx context.Context, db *ent.Client, m *fleetModel, c immediateChange) []string {
	made, err := db.Rollout.Query().Where(entrollout.DeploymentID(c.deployment), entrollout.Revision(int(c.revision))).Exist(ctx)
	if err != nil || made {
		return nil
	}
	// The revision the call made, as it made it (its REV): a deployment
	// deleted and deployed again meanwhile, perhaps in another
	// environment, has other revisions, and is not judged.
	rev, err := db.DeploymentRevision.Query().Where(deploymentrevision.DeploymentID(c.deployment),
		deploymentrevision.Revision(int(c.revision))).Only(ctx)
	if err != nil || rev.Env["REV"] != c.rev {
		return nil
	}
	d, err := db.Deployment.Query().Where(deployment.ID(c.deployment)).Only(ctx)
	if err != nil {
		return nil
	}
	return m.immediateViolations(c, d, slices.Collect(maps.Keys(rev.Regions)))
}

func (m *fleetModel) immediateViolations(c immediateChange, d *ent.Deployment, regions []string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.Immediate++
	what := fmt.Sprintf("an immediate change of %s (%s/%s) to revision %d, sent at %s and taken at %s", c.deployment,
		d.WorkspaceID, d.EnvironmentID, c.revision, stamp(c.sent), stamp(c.answered))
	var out []string
	for _, w := range m.windows {
		if w.scope.coversEnv(d.WorkspaceID, d.EnvironmentID) && w.from.Before(c.sent) && c.answered.Before(w.until) &&
			w.closedThroughout(c.sent, c.answered) {
			out = append(out, fmt.Sprintf("%s, while freeze window %s of %s was closed (set at %s, %s)", what, w.name, w.scope,
				stamp(w.from), w.describe()))
		}
	}
	for _, h := range m.halts {
		in := h.scope.coversEnv(d.WorkspaceID, d.EnvironmentID)
		if h.scope.region != "" {
			in = slices.Contains(regions, h.scope.region)
		}
		if in && h.answered.Before(c.sent) && c.answered.Before(h.lifted) {
			out = append(out, fmt.Sprintf("%s, under halt #%d of %s (answered at %s)", what, h.id, h.scope, stamp(h.answered)))
		}
	}
	m.stats.Violations += len(out)
	return out
}
