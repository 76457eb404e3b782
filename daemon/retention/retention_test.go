package retention_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/retention"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/agent"
	"github.com/deploysync/deploysync/ent/deploymentrevision"
	"github.com/deploysync/deploysync/ent/jsontype"
	"github.com/deploysync/deploysync/ent/resourcesync"
	"github.com/deploysync/deploysync/ent/rollout"
)

// writeChanges inserts n change rows (retention only looks at the rows,
// not at the state they point to) and marks them settled, as a running
// tailer would.
func writeChanges(t *testing.T, db *store.DB, n int) uint64 {
	t.Helper()
	ctx := context.Background()
	for start := 0; start < n; start += 5000 {
		rows := min(5000, n-start)
		values := strings.TrimSuffix(strings.Repeat("('sentinel', 's', 'eu', NOW(6)),", rows), ",")
		if _, err := db.SQL.ExecContext(ctx, "INSERT INTO deployment_changes (resource_type, resource_id, region, created_at) VALUES "+values); err != nil {
			t.Fatal(err)
		}
	}
	var head uint64
	if err := db.SQL.QueryRow("SELECT MAX(pk) FROM deployment_changes").Scan(&head); err != nil {
		t.Fatal(err)
	}
	if err := changelog.RaiseMark(ctx, db.SQL, changelog.MarkSafeWatermark, head); err != nil {
		t.Fatal(err)
	}
	return head
}

func count(t *testing.T, db *store.DB) int {
	var n int
	if err := db.SQL.QueryRow("SELECT COUNT(*) FROM deployment_changes").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func cleaner(db *store.DB, cfg retention.Config) *retention.Cleaner {
	return retention.New(db.SQL, cfg, slog.New(slog.DiscardHandler), metrics.New(prometheus.NewRegistry()))
}

// Rows past the TTL go in batches of 10,000, by one replica at a time, and
// the cleanup floor records how far.
func TestRetentionDeletesInBatchesUnderOneLock(t *testing.T) {
	db := storetest.New(t)
	head := writeChanges(t, db, 25000)
	ctx := context.Background()

	// Four replicas run at once: exactly one gets the lock and deletes.
	var wg sync.WaitGroup
	results := make([]int64, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := cleaner(db, retention.Config{TTL: time.Nanosecond}).RunOnce(ctx)
			if err != nil {
				t.Error(err)
			}
			results[i] = n
		}()
	}
	wg.Wait()
	var total int64
	winners := 0
	for _, n := range results {
		total += n
		if n > 0 {
			winners++
		}
	}
	if winners != 1 || total != 25000 {
		t.Fatalf("results %v: want one replica deleting all 25000", results)
	}
	if n := count(t, db); n != 0 {
		t.Fatalf("%d rows left", n)
	}
	floor, err := changelog.ReadMark(ctx, db.SQL, changelog.MarkCleanupFloor)
	if err != nil || floor != head {
		t.Fatalf("cleanup floor %d (%v), want %d", floor, err, head)
	}
}

// Rows younger than the TTL, above the safe watermark, or not yet applied
// by a recently heard agent stay.
func TestRetentionKeepsWhatIsStillNeeded(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	mid := writeChanges(t, db, 100)
	writeChanges(t, db, 100)

	// An agent heard from just now has applied up to mid.
	now := time.Now().UTC()
	if err := db.Ent.Agent.Create().SetRegion("eu").SetIdentity("a").SetAckedCursor(mid).SetLastHeartbeat(now).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cleaner(db, retention.Config{TTL: time.Nanosecond}).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db); n != 100 {
		t.Fatalf("want the 100 rows above the agent's cursor kept, %d left", n)
	}

	// Rows within the TTL stay whatever the agents did.
	if _, err := cleaner(db, retention.Config{TTL: time.Hour}).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db); n != 100 {
		t.Fatalf("TTL 1h deleted young rows: %d left", n)
	}
}

// Agent records nothing was heard of for the agent TTL go, however they
// came about; a record with a recent heartbeat, stream connection or
// update stays, however old it is.
func TestRetentionPrunesStaleAgentRecordsOnly(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	now := time.Now().UTC()
	long := now.Add(-2 * time.Hour)
	records := map[string]*ent.AgentCreate{
		// An agent that went away two hours ago.
		"gone": db.Ent.Agent.Create().SetLastHeartbeat(long).SetUpdatedAt(long),
		// An identity that opened a stream once and never reported.
		"one-stream": db.Ent.Agent.Create().SetConnectedSince(long).SetUpdatedAt(long),
		// A long-lived agent heartbeating now.
		"live": db.Ent.Agent.Create().SetCreatedAt(now.Add(-30 * 24 * time.Hour)).SetLastHeartbeat(now),
		// Heartbeating, with updated_at left behind by a write outside Ent.
		"live-stale-update": db.Ent.Agent.Create().SetLastHeartbeat(now).SetUpdatedAt(long),
		// Streaming since just now, no heartbeat yet.
		"connecting": db.Ent.Agent.Create().SetConnectedTo("ctrld-1").SetConnectedSince(now).SetUpdatedAt(long),
	}
	for identity, create := range records {
		if err := create.SetRegion("eu").SetIdentity(identity).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cleaner(db, retention.Config{AgentTTL: time.Hour, AgentWindow: time.Minute}).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	kept, err := db.Ent.Agent.Query().Order(ent.Asc(agent.FieldIdentity)).Select(agent.FieldIdentity).Strings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"connecting", "live", "live-stale-update"}; !slices.Equal(kept, want) {
		t.Fatalf("kept %v, want %v", kept, want)
	}
}

// The cleaner of one database runs while the cleaner of another database
// on the same server holds its lock: advisory locks are server-wide, the
// lock's name is per database.
func TestRetentionRunsBesideAnotherDatabasesCleaner(t *testing.T) {
	ctx := context.Background()
	other, db := storetest.New(t), storetest.New(t)
	conn, err := other.SQL.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var got int
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK("+retention.LockName+", 0)").Scan(&got); err != nil || got != 1 {
		t.Fatalf("take the other database's lock: %v, %v", got, err)
	}
	writeChanges(t, db, 10)
	if n, err := cleaner(db, retention.Config{TTL: time.Nanosecond}).RunOnce(ctx); err != nil || n != 10 {
		t.Fatalf("deleted %d rows (%v), want all 10", n, err)
	}
}

// A cursor no agent can honestly hold (at or above 2^63; ctrld refuses such
// reports now, but a record may predate that) neither stops retention nor
// holds rows back.
func TestRetentionSurvivesAHostileStoredCursor(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	writeChanges(t, db, 100)
	if _, err := db.SQL.ExecContext(ctx, "INSERT INTO agents (region, identity, acked_cursor, last_heartbeat, version, last_error, synced_generation, created_at, updated_at) VALUES ('eu', 'x', 18446744073709551615, NOW(6), '', '', 0, NOW(6), NOW(6))"); err != nil {
		t.Fatal(err)
	}
	n, err := cleaner(db, retention.Config{TTL: time.Nanosecond}).RunOnce(ctx)
	if err != nil || n != 100 {
		t.Fatalf("deleted %d (%v), want all 100", n, err)
	}
}

// The sync rows of resources their region no longer desires go; the rows
// of desired resources stay.
func TestRetentionPrunesSyncRowsOfResourcesThatAreGone(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	for _, region := range []string{"eu", "us"} {
		if err := desired.RegisterRegion(ctx, db.Ent, region); err != nil {
			t.Fatal(err)
		}
	}
	err := desired.New(db.Ent).Deploy(ctx, desired.DeploymentSpec{ID: "api", WorkspaceID: "ws", EnvironmentID: "prod",
		Image: "app:1", CPUMillicores: 100, MemoryMiB: 64}, []string{"eu"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	rows := []struct {
		region string
		kind   resourcesync.Kind
		id     string
	}{
		{"eu", resourcesync.KindDeployment, "api"}, // desired: stays
		{"us", resourcesync.KindDeployment, "api"}, // desired in eu only
		{"eu", resourcesync.KindDeployment, "gone"},
		{"eu", resourcesync.KindSentinel, "s1"},
		{"eu", resourcesync.KindCiliumNetworkPolicy, "p1"},
	}
	// Each reported on the newest change, as an agent does: only whether
	// its resource is desired decides.
	head, err := changelog.NewestVersion(ctx, db.SQL)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := db.Ent.ResourceSync.Create().SetRegion(r.region).SetKind(r.kind).SetResourceID(r.id).
			SetReceivedVersion(head).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cleaner(db, retention.Config{}).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	kept, err := db.Ent.ResourceSync.Query().All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 1 || kept[0].Region != "eu" || kept[0].ResourceID != "api" {
		t.Fatalf("kept %v, want only eu's deployment/api", kept)
	}
}

// Each deployment keeps its newest RevisionsKept revisions, and the
// rollouts to them; a deployment with fewer keeps all of them. A rollout
// in flight stays, however old its revision.
func TestRetentionKeepsEachDeploymentsNewestRevisions(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	if err := desired.RegisterRegion(ctx, db.Ent, "eu"); err != nil {
		t.Fatal(err)
	}
	s := desired.New(db.Ent)
	for _, id := range []string{"busy", "quiet"} {
		if err := s.Deploy(ctx, desired.DeploymentSpec{ID: id, WorkspaceID: "ws", EnvironmentID: "prod",
			Image: "app:1", CPUMillicores: 100, MemoryMiB: 64}, []string{"eu"}, 1); err != nil {
			t.Fatal(err)
		}
	}
	waves := desired.WithStrategy(ctx, jsontype.Strategy{Waves: []jsontype.Wave{{Regions: []string{"eu"}}}})
	v2 := "app:2"
	if _, err := s.UpdateDeployment(waves, "busy", desired.SpecUpdate{Image: &v2}); err != nil { // revision 2
		t.Fatal(err)
	}
	if _, err := s.ControlRollout(ctx, "busy", desired.RolloutPromote); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateDeployment(waves, "quiet", desired.SpecUpdate{Image: &v2}); err != nil { // in flight
		t.Fatal(err)
	}
	for replicas := range 6 {
		if err := s.Scale(ctx, "busy", "", 1+replicas); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cleaner(db, retention.Config{RevisionsKept: 3}).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int{"busy": 0, "quiet": 1} {
		if n := db.Ent.Rollout.Query().Where(rollout.DeploymentID(id)).CountX(ctx); n != want {
			t.Errorf("%s keeps %d rollouts, want %d", id, n, want)
		}
	}
	kept := func(id string) []int {
		revs, err := db.Ent.DeploymentRevision.Query().Where(deploymentrevision.DeploymentID(id)).
			Order(ent.Asc(deploymentrevision.FieldRevision)).All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []int
		for _, r := range revs {
			out = append(out, r.Revision)
		}
		return out
	}
	if got := kept("busy"); !slices.Equal(got, []int{6, 7, 8}) {
		t.Errorf("busy keeps revisions %v, want its newest three, [6 7 8]", got)
	}
	if got := kept("quiet"); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("quiet keeps revisions %v, want [1 2]", got)
	}
}

// Audit records are kept for the audit TTL (400 days unless configured),
// then deleted, more than a batch of them in one run; younger ones stay.
func TestRetentionDeletesAuditRecordsPastTheirTTL(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	now := time.Now().UTC()
	insert := func(n int, age time.Duration) {
		t.Helper()
		for start := 0; start < n; start += 5000 {
			rows := min(5000, n-start)
			values := strings.TrimSuffix(strings.Repeat("('alice', 'scale', 'api@eu', ?),", rows), ",")
			args := make([]any, rows)
			for i := range args {
				args[i] = now.Add(-age)
			}
			if _, err := db.SQL.ExecContext(ctx, "INSERT INTO operator_audit_log (actor, action, target, created_at) VALUES "+values, args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	audits := func() int {
		t.Helper()
		return db.Ent.AuditLog.Query().CountX(ctx)
	}
	insert(retention.BatchSize+2000, 401*24*time.Hour)
	insert(5, 399*24*time.Hour)
	insert(3, 0)

	if _, err := cleaner(db, retention.Config{}).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := audits(); n != 8 {
		t.Fatalf("with the default audit TTL, %d audit records are left; want the 8 younger than 400 days", n)
	}
	if _, err := cleaner(db, retention.Config{AuditTTL: time.Hour}).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := audits(); n != 3 {
		t.Fatalf("with an audit TTL of 1h, %d audit records are left; want the 3 written now", n)
	}
}

// Halts lifted longer ago than the audit TTL are deleted; a standing halt
// stays however old, and so does one lifted recently.
func TestRetentionDeletesHaltsLiftedPastTheAuditTTL(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	now := time.Now().UTC()
	halt := func(reason string, created time.Duration, lifted *time.Duration) {
		t.Helper()
		h := db.Ent.FleetHalt.Create().SetReason(reason).SetCreatedAt(now.Add(-created))
		if lifted != nil {
			h.SetLiftedAt(now.Add(-*lifted)).SetLiftedBy("alice")
		}
		h.SaveX(ctx)
	}
	ago := func(d time.Duration) *time.Duration { return &d }
	day := 24 * time.Hour
	halt("lifted 401 days ago", 402*day, ago(401*day))
	halt("lifted 2 days ago", 500*day, ago(2*day))
	halt("standing for 500 days", 500*day, nil)

	if _, err := cleaner(db, retention.Config{}).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, h := range db.Ent.FleetHalt.Query().AllX(ctx) {
		left = append(left, h.Reason)
	}
	slices.Sort(left)
	if want := []string{"lifted 2 days ago", "standing for 500 days"}; !slices.Equal(left, want) {
		t.Fatalf("halts left: %q, want %q", left, want)
	}
}
