package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/store/storetest"
	entagent "github.com/deploysync/deploysync/ent/agent"
)

// A batch decides an identity once however often it is in it (a new
// agent's heartbeat and stream arriving together): with one place left,
// every call of that identity is admitted into the one place, and a later
// new identity in the same batch is refused.
func TestABatchAdmitsAnIdentityOnceHoweverOftenItIsInIt(t *testing.T) {
	ctx := context.Background()
	db := storetest.New(t)
	if err := db.Ent.Region.Create().SetID("eu").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	s := New(db.Ent, db.SQL, nil, Config{MaxAgentsPerRegion: 4}, slog.New(slog.DiscardHandler))
	for i := range 3 {
		if err := db.Ent.Agent.Create().SetRegion("eu").SetIdentity(fmt.Sprintf("krane-%d", i)).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	conn := &connection{to: "ctrld-a", since: time.Now().UTC().Truncate(time.Microsecond)}
	batch := []*admission{
		{ctx: ctx, identity: "krane-new"},
		{ctx: ctx, identity: "krane-new", conn: conn},
		{ctx: ctx, identity: "krane-new"},
		{ctx: ctx, identity: "krane-other"},
	}
	refusals, err := s.admitBatch("eu", batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.OK, codes.ResourceExhausted} {
		if got := status.Code(refusals[i]); got != want {
			t.Errorf("admission %d (%s): %v, want %v", i, batch[i].identity, refusals[i], want)
		}
	}
	records, err := db.Ent.Agent.Query().Where(entagent.Region("eu")).All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(records) != 4 {
		t.Errorf("%d records, want 4 (the limit)", len(records))
	}
	for _, r := range records {
		if r.Identity == "krane-new" && (r.ConnectedTo != conn.to || r.ConnectedSince == nil || !r.ConnectedSince.Equal(conn.since)) {
			t.Errorf("krane-new's record says connected to %q since %v, want the stream's %q since %v", r.ConnectedTo, r.ConnectedSince, conn.to, conn.since)
		}
	}
}

// A record silent when the admitting transaction took its snapshot, whose
// agent has reconnected since (a known agent's stream start updates its
// record without the region's lock), keeps its place: a new identity
// takes the place of a record that is silent now.
func TestMakingRoomSparesARecordThatCameBackToLife(t *testing.T) {
	ctx := context.Background()
	db := storetest.New(t)
	if err := db.Ent.Region.Create().SetID("eu").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	s := New(db.Ent, db.SQL, nil, Config{MaxAgentsPerRegion: 2}, slog.New(slog.DiscardHandler))
	now := time.Now().UTC()
	for i, silent := range []time.Duration{30 * time.Minute, 20 * time.Minute} {
		if err := db.Ent.Agent.Create().SetRegion("eu").SetIdentity(fmt.Sprintf("krane-%d", i)).
			SetUpdatedAt(now.Add(-silent)).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := db.Ent.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	// The admitting transaction's snapshot: both records silent.
	if n, err := tx.Agent.Query().Where(entagent.Region("eu")).Count(ctx); err != nil || n != 2 {
		t.Fatalf("%d records (%v), want 2", n, err)
	}
	// krane-0, the longest silent, reconnects meanwhile.
	if err := db.Ent.Agent.Update().Where(entagent.Region("eu"), entagent.Identity("krane-0")).
		SetConnectedTo("ctrld-a").SetConnectedSince(now).SetUpdatedAt(now).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	refusal, err := s.makeRoom(ctx, tx, "eu", "krane-new", 2)
	if err != nil || refusal != nil {
		t.Fatalf("make room: %v, %v", refusal, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	left, err := db.Ent.Agent.Query().Where(entagent.Region("eu")).Select(entagent.FieldIdentity).Strings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(left) != "[krane-0]" {
		t.Errorf("records left: %v, want [krane-0] (the one that reconnected; krane-1 is the one silent now)", left)
	}
}
