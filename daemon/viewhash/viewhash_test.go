package viewhash_test

import (
	"context"
	"regexp"
	"sync"
	"testing"

	"github.com/deploysync/deploysync/daemon/store/storetest"
	"github.com/deploysync/deploysync/daemon/viewhash"
	"github.com/deploysync/deploysync/ent/installationsecret"
)

var label = regexp.MustCompile(`^[0-9a-f]{16}$`)

// A migrated database has one secret; replicas that start together on a
// database without one agree on the one that is stored; another
// installation keys hashes otherwise.
func TestOneSecretPerDatabase(t *testing.T) {
	ctx := context.Background()
	db := storetest.New(t)
	if n := db.Ent.InstallationSecret.Query().CountX(ctx); n != 1 {
		t.Fatalf("a migrated database has %d installation secrets, want 1", n)
	}
	before, err := viewhash.Load(ctx, db.Ent)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := viewhash.Load(ctx, db.Ent); err != nil || again.Of("0123456789abcdef") != before.Of("0123456789abcdef") {
		t.Fatalf("a second load keys otherwise (%v)", err)
	}

	db.Ent.InstallationSecret.Delete().Where(installationsecret.ID(viewhash.SecretID)).ExecX(ctx)
	keys := make([]viewhash.Key, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			var err error
			if keys[i], err = viewhash.NewSource(db.Ent).Key(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i, k := range keys {
		if k.Of("0123456789abcdef") != keys[0].Of("0123456789abcdef") {
			t.Errorf("replica %d keys otherwise than replica 0", i)
		}
	}
	if keys[0].Of("0123456789abcdef") == before.Of("0123456789abcdef") {
		t.Errorf("a new secret keys as the deleted one did")
	}

	other, err := viewhash.Load(ctx, storetest.New(t).Ent)
	if err != nil {
		t.Fatal(err)
	}
	if other.Of("0123456789abcdef") == before.Of("0123456789abcdef") {
		t.Errorf("two installations key a hash alike")
	}
}

// Of keeps what the hashes it stands for are: a label value of sixteen
// hex digits, equal for equal hashes; none stays none.
func TestOfIsALabelValue(t *testing.T) {
	k, err := viewhash.Load(context.Background(), storetest.New(t).Ent)
	if err != nil {
		t.Fatal(err)
	}
	a, b := k.Of("0123456789abcdef"), k.Of("0123456789abcdee")
	if !label.MatchString(a) || !label.MatchString(b) || a == b || a == "0123456789abcdef" || k.Of("0123456789abcdef") != a {
		t.Errorf("Of gives %q and %q", a, b)
	}
	if k.Of("") != "" {
		t.Errorf("Of(\"\") = %q, want none", k.Of(""))
	}
}
