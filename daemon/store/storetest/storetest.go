package storetest

import (
	"context"
	"testing"

	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/internal/testdb"
)

// New returns a client on a fresh, migrated database; both go away when t
// ends.
func New(t testing.TB) *store.DB {
	t.Helper()
	db := testdb.New(t)
	return open(t, db.DSN, testdb.Unavailable)
}

// NewOn is New on the server serverDSN reaches, a server of the test's own
// (internal/testmariadb) that the test may kill and start again.
func NewOn(t testing.TB, serverDSN string) *store.DB {
	t.Helper()
	db, drop, err := testdb.CreateOn(context.Background(), serverDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Errorf("storetest: %v", err)
		}
	})
	return open(t, db.DSN, func(t testing.TB, err error) { t.Fatal(err) })
}

func open(t testing.TB, dsn string, unavailable func(testing.TB, error)) *store.DB {
	t.Helper()
	client, err := store.Open(context.Background(), dsn)
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(func() { client.Close() })
	if err := store.Migrate(context.Background(), client.Ent); err != nil {
		t.Fatal(err)
	}
	return client
}
