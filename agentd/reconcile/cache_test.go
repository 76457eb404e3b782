package reconcile

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/deploysync/deploysync/agentd/kube"
)

// upToDate compares an object version with a desired hash once: a match
// is remembered until the object changes or leaves the cache, a mismatch
// never is, and neither is a match of an object that left the cache
// while it was compared.
func TestUpToDateComparesAnObjectVersionOnce(t *testing.T) {
	c := &Cache{}
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	at := func(version, hash string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "api", UID: "u1", ResourceVersion: version,
			Annotations: map[string]string{kube.HashAnnotation: hash}}}
	}
	if err := store.Add(at("5", "h1")); err != nil {
		t.Fatal(err)
	}
	// deleted is what the informer does when the object is deleted: drop
	// it from its store, then tell its handlers.
	deleted := func(obj any) {
		if err := store.Delete(at("7", "h1")); err != nil {
			t.Fatal(err)
		}
		c.forget(obj)
	}
	compared := 0
	steps := []struct {
		name     string
		live     *corev1.Service
		hash     string
		same     bool // what the comparison says
		forget   any  // forgotten first, if set
		during   any  // deleted while compared, if set
		want     bool
		compares int
	}{
		{name: "first look", live: at("5", "h1"), hash: "h1", same: true, want: true, compares: 1},
		{name: "same version again", live: at("5", "h1"), hash: "h1", same: true, want: true},
		{name: "another desired hash", live: at("5", "h1"), hash: "h2", same: true, want: false},
		{name: "edited out of band", live: at("6", "h1"), hash: "h1", same: false, want: false, compares: 1},
		{name: "still edited", live: at("6", "h1"), hash: "h1", same: false, want: false, compares: 1},
		{name: "put back", live: at("7", "h1"), hash: "h1", same: true, want: true, compares: 1},
		{name: "deleted", live: at("7", "h1"), hash: "h1", same: true, forget: at("7", "h1"), want: true, compares: 1},
		{name: "deleted, final state unknown", live: at("7", "h1"), hash: "h1", same: true,
			forget: cache.DeletedFinalStateUnknown{Obj: at("7", "h1")}, want: true, compares: 1},
		{name: "deleted while compared", live: at("8", "h1"), hash: "h1", same: true, during: at("7", "h1"), want: true, compares: 1},
		{name: "not remembered after", live: at("8", "h1"), hash: "h1", same: true, want: true, compares: 1},
	}
	for _, s := range steps {
		if s.forget != nil {
			c.forget(s.forget)
		}
		before := compared
		got := c.upToDate(store, s.live, s.hash, func() bool {
			compared++
			if s.during != nil {
				deleted(s.during)
			}
			return s.same
		})
		if got != s.want || compared-before != s.compares {
			t.Errorf("%s: upToDate = %v after %d comparisons, want %v after %d", s.name, got, compared-before, s.want, s.compares)
		}
	}
	if _, ok := c.matched.Load("u1"); ok {
		t.Error("a match is remembered for an object the cache does not hold")
	}
}
