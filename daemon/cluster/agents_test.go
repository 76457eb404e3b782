package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/cluster"
	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/retention"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	entagent "github.com/deploysync/deploysync/ent/agent"
	"github.com/deploysync/deploysync/internal/eventually"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// maxAgents is the production limit these tests run with.
var maxAgents = cluster.Defaults.MaxAgentsPerRegion

// heartbeat reports identity's status in region.
func heartbeat(agent ctrlv1.ClusterServiceClient, region, identity string) error {
	_, err := agent.ReportAgentStatus(context.Background(), &ctrlv1.ReportAgentStatusRequest{Region: region, AgentIdentity: identity})
	return err
}

// watch opens identity's stream in region and returns its first event's
// error: nil once the full sync's bookmark arrives, or the refusal.
func watch(t *testing.T, agent ctrlv1.ClusterServiceClient, region, identity string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := agent.WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{Region: region, AgentIdentity: identity})
	if err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}

// fillRegion gives region the limit's worth of agent records, krane-0 on.
func fillRegion(t *testing.T, agent ctrlv1.ClusterServiceClient, region string) {
	t.Helper()
	for i := range maxAgents {
		if err := heartbeat(agent, region, fmt.Sprintf("krane-%d", i)); err != nil {
			t.Fatalf("heartbeat %d of %d: %v", i+1, maxAgents, err)
		}
	}
}

// wantRefused fails unless err refuses a new identity for the limit.
func wantRefused(t *testing.T, what string, err error) {
	t.Helper()
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(msg, "agent_identity") ||
		!strings.Contains(msg, fmt.Sprintf("%d agent records, the limit per region", maxAgents)) {
		t.Errorf("%s: got %v, want ResourceExhausted naming agent_identity and the limit of %d", what, err, maxAgents)
	}
}

// identities lists region's agent records.
func identities(t *testing.T, env *servertest.Env, region string) []string {
	t.Helper()
	ids, err := env.DB.Ent.Agent.Query().Where(entagent.Region(region)).Select(entagent.FieldIdentity).Strings(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// silence makes identity's record look as if nothing was heard of it for
// d, as when its agent went away that long ago.
func silence(t *testing.T, env *servertest.Env, region, identity string, d time.Duration) {
	t.Helper()
	then := time.Now().UTC().Add(-d)
	n, err := env.DB.Ent.Agent.Update().Where(entagent.Region(region), entagent.Identity(identity)).
		SetUpdatedAt(then).SetLastHeartbeat(then).ClearConnectedSince().SetConnectedTo("").Save(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("silence %s: %d records, %v", identity, n, err)
	}
}

// One agent token cannot fill the agents table (which every console reads
// each second) by inventing identities: once its region has the limit's
// worth of records, a new identity's heartbeat and stream are refused with
// ResourceExhausted and leave no record, while the known identities report
// and stream on, and other regions are not affected.
func TestNewAgentIdentitiesBeyondTheLimitAreRefused(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	agent := env.Agent("eu")
	fillRegion(t, agent, "eu")

	wantRefused(t, "heartbeat of a new identity", heartbeat(agent, "eu", "invented"))
	wantRefused(t, "stream of a new identity", watch(t, agent, "eu", "invented-too"))
	if ids := identities(t, env, "eu"); len(ids) != maxAgents {
		t.Errorf("region eu has %d agent records after the refusals, want %d: %v", len(ids), maxAgents, ids)
	}

	if err := heartbeat(agent, "eu", "krane-0"); err != nil {
		t.Errorf("heartbeat of a known identity: %v", err)
	}
	if err := watch(t, agent, "eu", "krane-1"); err != nil {
		t.Errorf("stream of a known identity: %v", err)
	}
	if err := heartbeat(env.Agent("us"), "us", "invented"); err != nil {
		t.Errorf("heartbeat of a new identity in another region: %v", err)
	}
}

// A region's records do not lock out the agents of its next rollout: the
// record of an agent silent for ten minutes (agents report every ten
// seconds) gives its place to a new identity. One silent for less keeps it.
func TestASilentAgentsRecordMakesRoomForANewOne(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	agent := env.Agent("eu")
	fillRegion(t, agent, "eu")

	silence(t, env, "eu", "krane-0", 5*time.Minute)
	wantRefused(t, "heartbeat of a new identity beside one silent for 5 minutes", heartbeat(agent, "eu", "krane-new"))

	silence(t, env, "eu", "krane-0", 11*time.Minute)
	if err := watch(t, agent, "eu", "krane-new"); err != nil {
		t.Fatalf("stream of a new identity beside one silent for 11 minutes: %v", err)
	}
	ids := identities(t, env, "eu")
	if len(ids) != maxAgents || !slices.Contains(ids, "krane-new") || slices.Contains(ids, "krane-0") {
		t.Errorf("agent records %v, want krane-new in krane-0's place, %d in all", ids, maxAgents)
	}
}

// A record retention deleted (nothing heard of it for --agent-ttl) frees
// its place.
func TestAnAgentRecordRetentionDeletedMakesRoom(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	agent := env.Agent("eu")
	fillRegion(t, agent, "eu")
	wantRefused(t, "heartbeat of a new identity in a full region", heartbeat(agent, "eu", "krane-new"))

	silence(t, env, "eu", "krane-0", retention.Defaults.AgentTTL+time.Hour)
	cleaner := retention.New(env.DB.SQL, retention.Config{}, servertest.Logger(), metrics.New(prometheus.NewRegistry()))
	if _, err := cleaner.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ids := identities(t, env, "eu"); len(ids) != maxAgents-1 {
		t.Fatalf("retention left %d agent records, want %d", len(ids), maxAgents-1)
	}
	if err := heartbeat(agent, "eu", "krane-new"); err != nil {
		t.Errorf("heartbeat of a new identity once retention deleted a record: %v", err)
	}
}

// New identities arriving all at once, by heartbeats and streams alike and
// through two ctrld replicas, are counted one at a time: a burst does not
// leave the region over its limit.
func TestABurstOfNewIdentitiesStaysWithinTheLimit(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	replicas := []string{env.Server.Addr, env.StartReplica().Addr}
	const burst = 100
	errs := make(chan error, burst)
	start := make(chan struct{})
	for i := range burst {
		// A token each, as each agent has: no stream is refused for
		// its token's limit.
		agent := ctrlv1.NewClusterServiceClient(servertest.Dial(t, replicas[i%2], env.AgentToken("eu")))
		go func() {
			<-start
			identity := fmt.Sprintf("burst-%d", i)
			if i%4 < 2 {
				errs <- heartbeat(agent, "eu", identity)
			} else {
				errs <- watch(t, agent, "eu", identity)
			}
		}()
	}
	close(start)
	admitted := 0
	for range burst {
		err := <-errs
		switch {
		case err == nil:
			admitted++
		case status.Code(err) != codes.ResourceExhausted:
			t.Errorf("heartbeat or stream: %v", err)
		}
	}
	if ids := identities(t, env, "eu"); len(ids) != maxAgents || admitted != maxAgents {
		t.Fatalf("%d heartbeats and streams admitted, %d records; want exactly the limit, %d", admitted, len(ids), maxAgents)
	}
}

// A new identity's heartbeats and streams arriving together take one place:
// with one place left in the region, all of them are admitted, and the
// region is full, not over.
func TestANewIdentityArrivingTwiceAtOnceTakesOnePlace(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	agent := env.Agent("eu")
	for i := range maxAgents - 1 {
		if err := heartbeat(agent, "eu", fmt.Sprintf("krane-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	const calls = 20
	errs := make(chan error, calls)
	start := make(chan struct{})
	for i := range calls {
		agent := env.Agent("eu") // a token each: no stream is refused for its token's limit
		go func() {
			<-start
			if i%2 == 0 {
				errs <- heartbeat(agent, "eu", "krane-new")
			} else {
				errs <- watch(t, agent, "eu", "krane-new")
			}
		}()
	}
	close(start)
	for range calls {
		if err := <-errs; err != nil {
			t.Errorf("krane-new: %v", err)
		}
	}
	if ids := identities(t, env, "eu"); len(ids) != maxAgents || !slices.Contains(ids, "krane-new") {
		t.Errorf("agent records %v, want krane-new among %d", ids, maxAgents)
	}
}

// A stored cursor no agent can honestly hold (at or above 2^63; intake
// refuses one now, but a record may predate that) neither stops a full
// region from admitting a new identity nor fails that agent's resume.
func TestAHostileStoredCursorBlocksNoAdmissionAndNoResume(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	agent := env.Agent("eu")
	fillRegion(t, agent, "eu")
	silence(t, env, "eu", "krane-0", 11*time.Minute)
	if _, err := env.DB.SQL.Exec("UPDATE agents SET acked_cursor = 18446744073709551615 WHERE identity IN ('krane-0', 'krane-1')"); err != nil {
		t.Fatal(err)
	}
	if err := heartbeat(agent, "eu", "newcomer"); err != nil {
		t.Fatalf("a new identity in place of the silent record: %v", err)
	}
	// A resume (cursor above 0, within the versions issued) reads the
	// agent's record.
	if _, err := env.DB.SQL.Exec("INSERT INTO deployment_changes (resource_type, resource_id, region, created_at) VALUES ('sentinel', 's', 'eu', NOW(6))"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := agent.WatchDeploymentChanges(ctx, &ctrlv1.WatchDeploymentChangesRequest{Region: "eu", AgentIdentity: "krane-1", VersionLastSeen: 1})
	if err == nil {
		_, err = s.Recv()
	}
	if err != nil {
		t.Fatalf("krane-1's stream: %v", err)
	}
}

// A stream whose client went away while its new identity waited to be
// admitted leaves no record that says it is connected: the admission,
// decided after the client left, writes the record, and the stream's end
// clears its connection.
func TestAStreamThatGaveUpWhileAdmittedIsNotLeftConnected(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	agent := env.Agent("eu")
	ctx := context.Background()
	// Hold the region's row: admissions wait for it.
	lock, err := env.DB.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	if _, err := lock.ExecContext(ctx, "SELECT id FROM regions WHERE id = 'eu' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	streamCtx, giveUp := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		s, err := agent.WatchDeploymentChanges(streamCtx, &ctrlv1.WatchDeploymentChangesRequest{Region: "eu", AgentIdentity: "krane-new"})
		if err == nil {
			_, err = s.Recv()
		}
		done <- err
	}()
	// The admission waits for the lock (its locking read shows in the
	// process list meanwhile); the client gives up then.
	eventually.True(t, 10*time.Second, "the admission never waited for the region's lock", func() bool {
		var waiting int
		err := env.DB.SQL.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND INFO LIKE '%FROM `regions`%FOR UPDATE%'").Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		return waiting > 0
	})
	giveUp()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("the stream ended with %v, want Canceled", err)
	}
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	// The admission goes through now; then the stream's end clears it.
	eventually.True(t, 10*time.Second, "krane-new's record was never written as not connected", func() bool {
		records, err := env.DB.Ent.Agent.Query().Where(entagent.Region("eu"), entagent.Identity("krane-new")).All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(records) == 1 && records[0].ConnectedTo == "" && records[0].ConnectedSince == nil
	})
}
