package peers

import (
	"context"
	"fmt"
	"time"

	"entgo.io/ent/dialect/sql"

	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/ctrldreplica"
	"github.com/deploysync/deploysync/ent/predicate"
)

// The statements on ctrld_replicas. Heartbeats are stamped and aged by the
// database's clock (NOW(6)), never by a replica's, so replicas whose clocks
// disagree still agree on who is alive.

// heartbeat registers self, or refreshes its heartbeat: one statement, so a
// row deleted while this replica was silent (ForgetAfter) comes back.
func heartbeat(ctx context.Context, client *ent.Client, self *ent.CtrldReplica) error {
	err := client.CtrldReplica.Create().
		SetID(self.ID).SetInstance(self.Instance).SetAddress(self.Address).SetSecret(self.Secret).
		OnConflict(sql.ResolveWith(func(u *sql.UpdateSet) {
			u.Set(ctrldreplica.FieldHeartbeatAt, sql.Expr("NOW(6)"))
		})).
		Exec(ctx)
	if err != nil {
		return fmt.Errorf("heartbeat of ctrld replica %s: %w", self.ID, err)
	}
	return nil
}

// MaxPeers bounds the replicas one replica pokes: rows beyond it (which
// only someone writing the table by hand could add) cost nothing.
const MaxPeers = 64

// livePeers returns the replicas other than self heard of within ttl, the
// freshest MaxPeers of them.
func livePeers(ctx context.Context, client *ent.Client, selfID string, ttl time.Duration) ([]*ent.CtrldReplica, error) {
	rows, err := client.CtrldReplica.Query().
		Where(ctrldreplica.IDNEQ(selfID), heardWithin(ttl)).
		Order(ent.Desc(ctrldreplica.FieldHeartbeatAt)).
		Limit(MaxPeers).
		All(ctx)
	if err != nil {
		return nil, fmt.Errorf("read live ctrld replicas: %w", err)
	}
	return rows, nil
}

// forgetSilent deletes the rows not heard of within after: replicas that
// died without deleting their own.
func forgetSilent(ctx context.Context, client *ent.Client, after time.Duration) (int, error) {
	n, err := client.CtrldReplica.Delete().Where(predicate.CtrldReplica(func(s *sql.Selector) {
		s.Where(sql.Not(heardWithinP(s, after)))
	})).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("delete silent ctrld replicas: %w", err)
	}
	return n, nil
}

// unregister deletes self's row: a replica that stops is not poked again.
func unregister(ctx context.Context, client *ent.Client, selfID string) error {
	if _, err := client.CtrldReplica.Delete().Where(ctrldreplica.ID(selfID)).Exec(ctx); err != nil {
		return fmt.Errorf("delete ctrld replica %s: %w", selfID, err)
	}
	return nil
}

func heardWithin(d time.Duration) predicate.CtrldReplica {
	return func(s *sql.Selector) { s.Where(heardWithinP(s, d)) }
}

func heardWithinP(s *sql.Selector, d time.Duration) *sql.Predicate {
	return sql.P(func(b *sql.Builder) {
		b.Ident(s.C(ctrldreplica.FieldHeartbeatAt)).WriteString(" >= NOW(6) - INTERVAL ").
			Arg(d.Microseconds()).WriteString(" MICROSECOND")
	})
}
