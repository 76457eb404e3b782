package desired

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/changefeed"
	"github.com/deploysync/deploysync/ent/ciliumnetworkpolicy"
	"github.com/deploysync/deploysync/ent/deployment"
	"github.com/deploysync/deploysync/ent/namespace"
	"github.com/deploysync/deploysync/ent/sentinel"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/internal/validate"
)

// checkPair refuses, as ErrInvalid, a pair whose namespace is reserved
// (naming.Reserved): workspace "kube" and environment "system" would put
// their objects in kube-system. It runs before any statement, so the
// refusal writes nothing. A pair whose IDs are not IDs is left to the
// checks that name the wrong field.
func (s *Store) checkPair(workspaceID, environmentID string) error {
	if validate.ID(workspaceID) != nil || validate.ID(environmentID) != nil {
		return nil
	}
	name := naming.Namespace(workspaceID, environmentID)
	if why, reserved := s.reserved.Why(name); reserved {
		return fmt.Errorf("workspace_id, environment_id: %w: workspace %s environment %s make namespace %q, which no workspace may have: %s; use other IDs",
			ErrInvalid, workspaceID, environmentID, name, why)
	}
	return nil
}

// claimNamespace makes the namespace of (workspaceID, environmentID) theirs,
// or fails with ErrConflict when another pair holds it: naming.Namespace
// maps different pairs to one name ("acme-prod"+"x", "acme"+"prod-x"), and
// agents would then overwrite one pair's objects with the other's. It runs
// last in the transaction that puts a resource there: the claim commits or
// rolls back with it, and bad input, which that transaction's statements
// judge first, is answered as bad input whoever owns the namespace.
func claimNamespace(ctx context.Context, tx *ent.Tx, workspaceID, environmentID string) error {
	name := naming.Namespace(workspaceID, environmentID)
	// Claims never change, so one in this transaction's snapshot is
	// current. One committed since is not in it: the insert then fails on
	// the primary key (after waiting for a claim still in flight), and a
	// locking read, which sees the newest committed rows, finds it. (A
	// locking first read would take a gap lock, and two first claims of a
	// name would deadlock on it.)
	owner, err := tx.Namespace.Query().Where(namespace.ID(name)).Only(ctx)
	if ent.IsNotFound(err) {
		err = tx.Namespace.Create().SetID(name).SetWorkspaceID(workspaceID).SetEnvironmentID(environmentID).Exec(ctx)
		if !ent.IsConstraintError(err) {
			return err
		}
		owner, err = tx.Namespace.Query().Where(namespace.ID(name)).ForShare(changefeed.ShareLock).Only(ctx)
	}
	if err != nil {
		return err
	}
	if owner.WorkspaceID != workspaceID || owner.EnvironmentID != environmentID {
		return fmt.Errorf("namespace %q: %w: it is workspace %s environment %s's, and workspace %s environment %s would share it (their IDs join to the same name); use other IDs",
			name, ErrConflict, owner.WorkspaceID, owner.EnvironmentID, workspaceID, environmentID)
	}
	return nil
}

// Pair is a workspace's environment: what a namespace belongs to.
type Pair struct {
	WorkspaceID, EnvironmentID string
}

// NamespaceCollision is a namespace that existing resources of several pairs
// share, written before namespaces were claimed. Owner holds the claim (it
// had claimed it already, or has the oldest resource there); the Others
// cannot add resources, but what they have there stays, mixed with the
// Owner's objects, until an operator deletes it and recreates it under other
// IDs.
type NamespaceCollision struct {
	Namespace string
	Owner     Pair
	Others    []Pair
}

// ClaimExistingNamespaces claims the namespace of every pair that has a
// deployment, sentinel or policy, for databases written before namespaces
// were claimed. ctrld runs it at start, after the schema migration; it is
// idempotent and changes no namespace name. A namespace several pairs
// already share is not merged: one pair keeps it, each collision is logged
// as an error and returned.
func ClaimExistingNamespaces(ctx context.Context, client *ent.Client, log *slog.Logger) ([]NamespaceCollision, error) {
	pairs, err := existingPairs(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("list the workspaces and environments in use: %w", err)
	}
	byName := map[string][]Pair{}
	for _, p := range pairs { // oldest first: the first pair of a name is its owner unless one claimed it already
		name := naming.Namespace(p.WorkspaceID, p.EnvironmentID)
		byName[name] = append(byName[name], p)
	}
	names := slices.Sorted(maps.Keys(byName))
	var collisions []NamespaceCollision
	for chunk := range slices.Chunk(names, 500) {
		creates := make([]*ent.NamespaceCreate, 0, len(chunk))
		for _, name := range chunk {
			first := byName[name][0]
			creates = append(creates, client.Namespace.Create().SetID(name).SetWorkspaceID(first.WorkspaceID).SetEnvironmentID(first.EnvironmentID))
		}
		if err := client.Namespace.CreateBulk(creates...).OnConflict().Ignore().Exec(ctx); err != nil {
			return nil, fmt.Errorf("claim namespaces: %w", err)
		}
		claims, err := client.Namespace.Query().Where(namespace.IDIn(chunk...)).All(ctx)
		if err != nil {
			return nil, fmt.Errorf("read namespace claims: %w", err)
		}
		for _, c := range claims {
			owner := Pair{c.WorkspaceID, c.EnvironmentID}
			others := slices.DeleteFunc(slices.Clone(byName[c.ID]), func(p Pair) bool { return p == owner })
			if len(others) == 0 {
				continue
			}
			collisions = append(collisions, NamespaceCollision{Namespace: c.ID, Owner: owner, Others: others})
			log.Error("namespace shared by several workspaces/environments: their agents overwrite each other's objects there; "+
				"only the owner may add resources now, and an operator must delete the others' and recreate them under other IDs",
				"namespace", c.ID, "owner", owner, "others", others)
		}
	}
	return collisions, nil
}

// existingPairs lists every pair with a deployment, sentinel or policy,
// oldest first (by its oldest resource; ties by IDs, so runs agree).
func existingPairs(ctx context.Context, client *ent.Client) ([]Pair, error) {
	type row struct {
		WorkspaceID   string    `json:"workspace_id"`
		EnvironmentID string    `json:"environment_id"`
		Oldest        time.Time `json:"min"`
	}
	var deployments, sentinels, policies []row
	err := client.Deployment.Query().GroupBy(deployment.FieldWorkspaceID, deployment.FieldEnvironmentID).
		Aggregate(ent.Min(deployment.FieldCreatedAt)).Scan(ctx, &deployments)
	if err == nil {
		err = client.Sentinel.Query().GroupBy(sentinel.FieldWorkspaceID, sentinel.FieldEnvironmentID).
			Aggregate(ent.Min(sentinel.FieldCreatedAt)).Scan(ctx, &sentinels)
	}
	if err == nil {
		err = client.CiliumNetworkPolicy.Query().GroupBy(ciliumnetworkpolicy.FieldWorkspaceID, ciliumnetworkpolicy.FieldEnvironmentID).
			Aggregate(ent.Min(ciliumnetworkpolicy.FieldCreatedAt)).Scan(ctx, &policies)
	}
	if err != nil {
		return nil, err
	}
	oldest := map[Pair]time.Time{}
	for _, r := range slices.Concat(deployments, sentinels, policies) {
		p := Pair{r.WorkspaceID, r.EnvironmentID}
		if t, ok := oldest[p]; !ok || r.Oldest.Before(t) {
			oldest[p] = r.Oldest
		}
	}
	pairs := slices.Collect(maps.Keys(oldest))
	slices.SortFunc(pairs, func(a, b Pair) int {
		return cmp.Or(oldest[a].Compare(oldest[b]), cmp.Compare(a.WorkspaceID, b.WorkspaceID), cmp.Compare(a.EnvironmentID, b.EnvironmentID))
	})
	return pairs, nil
}

// ReservedClaim is a namespace claimed before it was reserved (by an older
// ctrld, or before --reserved-namespaces named it).
type ReservedClaim struct {
	Namespace string
	Owner     Pair
	Why       string
}

// ReportReservedClaims logs, as errors, and returns the claims whose
// namespace reserved now holds. It changes nothing: a claim never changes
// (agents hold objects under its name), and the resources there stay as
// they are. From now on the pair can add nothing there (checkPair), and an
// agent refuses to write into a reserved namespace (naming.Reserved), so
// an operator should delete those resources and recreate them under other
// IDs. ctrld runs it at start, after ClaimExistingNamespaces.
func ReportReservedClaims(ctx context.Context, client *ent.Client, reserved naming.Reserved, log *slog.Logger) ([]ReservedClaim, error) {
	// Every claim is read: one short row per pair, once per start, and
	// the rule is then asked of each name exactly as checkPair asks it.
	claims, err := client.Namespace.Query().Order(namespace.ByID()).All(ctx)
	if err != nil {
		return nil, fmt.Errorf("read namespace claims: %w", err)
	}
	var found []ReservedClaim
	for _, c := range claims {
		why, ok := reserved.Why(c.ID)
		if !ok {
			continue
		}
		rc := ReservedClaim{Namespace: c.ID, Owner: Pair{c.WorkspaceID, c.EnvironmentID}, Why: why}
		found = append(found, rc)
		log.Error("namespace claimed by a workspace's environment is reserved now: its resources stay as they are, the pair can add none there, "+
			"and agents refuse to write into reserved namespaces; an operator should delete them and recreate them under other IDs",
			"namespace", rc.Namespace, "owner", rc.Owner, "why", why)
	}
	return found, nil
}
