package server_test

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/auditlog"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// inFlight counts what is under way, and keeps the most at once and the
// total.
type inFlight struct{ now, peak, total atomic.Int64 }

// start counts one more under way; the func it returns, one fewer.
func (f *inFlight) start() (done func()) {
	n := f.now.Add(1)
	f.total.Add(1)
	for p := f.peak.Load(); n > p && !f.peak.CompareAndSwap(p, n); p = f.peak.Load() {
	}
	return func() { f.now.Add(-1) }
}

// peakOf samples n every half millisecond into peak until ctx ends.
func peakOf(ctx context.Context, n func() int64, peak *atomic.Int64) {
	for ctx.Err() == nil {
		if v := n(); v > peak.Load() {
			peak.Store(v)
		}
		time.Sleep(500 * time.Microsecond)
	}
}

// unknownToken is a token ctrld never issued; wellFormed ones look like
// the ones it issues.
func unknownToken(i int, wellFormed bool) string {
	if !wellFormed {
		return fmt.Sprintf("not-a-token-%d", i)
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	return "dso_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(secret))
}

// Refused operator calls take bounded work, whatever their number: 64
// writes at once with one leaked agent token, then 200 unknown tokens
// (half shaped like ctrld's) sending 5 writes each, all while an operator
// scales and reads. The refusals never hold more than a third of the main
// pool (before: an audit INSERT each, with no deadline, 45 connections at
// once, the whole pool); tokens are looked up at most LookupsAtOnce at
// once (before: 199), an unknown token at most once however often it is
// sent, one not shaped like ctrld's never; the agent token's 64 refusals
// are one audit record that counts them (before: 64 records, 30 written
// at once); every one of the operator's calls succeeds within its usual
// 5 s deadline, and a token issued after the flood works at once.
func TestRefusedCallsTakeBoundedWork(t *testing.T) {
	db := storetest.New(t)
	var lookups, auditWrites inFlight
	// Before ctrld runs: Intercept and Use are not safe alongside queries.
	db.Ent.APIToken.Intercept(ent.InterceptFunc(func(next ent.Querier) ent.Querier {
		return ent.QuerierFunc(func(ctx context.Context, q ent.Query) (ent.Value, error) {
			defer lookups.start()()
			return next.Query(ctx, q)
		})
	}))
	db.Ent.AuditLog.Use(func(next ent.Mutator) ent.Mutator {
		return ent.MutateFunc(func(ctx context.Context, m ent.Mutation) (ent.Value, error) {
			defer auditWrites.start()()
			return next.Mutate(ctx, m)
		})
	})
	// One window for the whole test: its refusals are written when ctrld
	// stops.
	env := servertest.StartOn(t, db, server.Config{RefusalAuditWindow: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leaked := ctrlv1.NewOperatorServiceClient(env.Dial(env.AgentToken("eu")))
	op := env.Operator("alice")
	if _, err := op.Deploy(ctx, &ctrlv1.DeployRequest{DeploymentId: "api", WorkspaceId: "ws", EnvironmentId: "prod",
		Image: "app:1", CpuMillicores: 100, MemoryMib: 64, Regions: []string{"eu"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}

	var peakInUse atomic.Int64
	sampling, stopSampling := context.WithCancel(ctx)
	var background sync.WaitGroup
	background.Go(func() {
		peakOf(sampling, func() int64 { return int64(db.SQL.Stats().InUse) }, &peakInUse)
	})
	// The operator scales and reads throughout, each call with the
	// console's usual deadline.
	var opCalls atomic.Int64
	var opFailures []error
	background.Go(func() {
		for i := 0; sampling.Err() == nil; i++ {
			callCtx, end := context.WithTimeout(ctx, 5*time.Second)
			_, err := op.Scale(callCtx, &ctrlv1.ScaleRequest{DeploymentId: "api", Region: "eu", Replicas: int32(1 + i%5)})
			if err == nil {
				_, err = op.ListRegions(callCtx, &ctrlv1.ListRegionsRequest{})
			}
			end()
			opCalls.Add(2)
			if err != nil && sampling.Err() == nil {
				opFailures = append(opFailures, err)
			}
		}
	})

	// 64 writes at once with the leaked agent token.
	const flood = 64
	start := make(chan struct{})
	var wg sync.WaitGroup
	var wrongCodes atomic.Int64
	for range flood {
		wg.Go(func() {
			<-start
			_, err := leaked.ForceResync(ctx, &ctrlv1.ForceResyncRequest{Region: "eu", Reason: strings.Repeat("r", 1000)})
			if code(err) != codes.PermissionDenied {
				wrongCodes.Add(1)
				t.Errorf("a write with an agent token: got %v, want PermissionDenied", err)
			}
		})
	}
	close(start)
	wg.Wait()

	// 200 unknown tokens, half of them shaped like ctrld's, 5 writes each.
	const unknown, each = 200, 5
	lookupsBefore, opCallsBefore := lookups.total.Load(), opCalls.Load()
	start = make(chan struct{})
	for i := range unknown {
		client := ctrlv1.NewOperatorServiceClient(env.Dial(unknownToken(i, i%2 == 0)))
		wg.Go(func() {
			<-start
			for range each {
				_, err := client.ForceResync(ctx, &ctrlv1.ForceResyncRequest{Region: "eu", Reason: "flood"})
				if code(err) != codes.Unauthenticated {
					wrongCodes.Add(1)
					t.Errorf("a write with an unknown token: got %v, want Unauthenticated", err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	unknownLookups := lookups.total.Load() - lookupsBefore - (opCalls.Load() - opCallsBefore + 2)
	stopSampling()
	background.Wait()
	if wrongCodes.Load() > 0 {
		t.FailNow()
	}

	t.Logf("at most %d connections of the main pool in use, %d tokens looked up at once, %d lookups for the unknown tokens, %d audit writes at once",
		peakInUse.Load(), lookups.peak.Load(), unknownLookups, auditWrites.peak.Load())
	for _, err := range opFailures {
		t.Errorf("an operator call while refused calls flood ctrld: %v", err)
	}
	if n := peakInUse.Load(); n > store.MainConns/3 {
		t.Errorf("the main pool had %d connections in use at once while refused calls flooded ctrld; want at most %d, a third", n, store.MainConns/3)
	}
	if n := lookups.peak.Load(); n > auth.LookupsAtOnce {
		t.Errorf("%d tokens were looked up at once; want at most %d", n, auth.LookupsAtOnce)
	}
	if unknownLookups > unknown/2 {
		t.Errorf("%d unknown tokens, %d of them shaped like ctrld's, each refused %d times, were looked up %d times; want at most once each that is shaped like ctrld's",
			unknown, unknown/2, each, unknownLookups)
	}
	if n := auditWrites.peak.Load(); n > 2 {
		t.Errorf("%d audit records were written at once; want at most 2 (the operator's own, and the refusals' in one statement)", n)
	}
	// Unknown tokens are remembered as such, never a new one: a token
	// issued now works at once.
	if _, err := env.Operator("bob").ListRegions(ctx, &ctrlv1.ListRegionsRequest{}); err != nil {
		t.Errorf("a token issued after the flood of unknown ones: %v", err)
	}
	env.Server.Stop() // writes what it gathered
	refused := env.DB.Ent.AuditLog.Query().Where(auditlog.Actor("agent-eu")).AllX(context.Background())
	if len(refused) != 1 {
		t.Fatalf("%d writes refused for the agent token's kind left %d audit records; want 1 that counts them", flood, len(refused))
	}
	r := refused[0]
	if r.Count != flood || r.Action != "ForceResync" || !strings.Contains(r.Error, "cannot call") || r.LastSeenAt == nil || r.LastSeenAt.Before(r.CreatedAt) {
		t.Errorf("the refusals' audit record: count %d, action %q, error %q, first %v, last %v; want %d ForceResync refusals, first and last seen",
			r.Count, r.Action, r.Error, r.CreatedAt, r.LastSeenAt, flood)
	}
	if n := env.DB.Ent.AuditLog.Query().Where(auditlog.ActorNEQ("alice"), auditlog.ActorNEQ("agent-eu")).CountX(context.Background()); n != 0 {
		t.Errorf("the unknown tokens' writes left %d audit records; want none", n)
	}
}
