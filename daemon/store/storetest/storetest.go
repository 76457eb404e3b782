// Package storetest gives tests a migrated database on the real test server,
// opened through the same constructor ctrld uses.
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
	client, err := store.Open(context.Background(), db.DSN)
	if err != nil {
		testdb.Unavailable(t, err)
	}
	t.Cleanup(func() { client.Close() })
	if err := store.Migrate(context.Background(), client.Ent); err != nil {
		t.Fatal(err)
	}
	return client
}
