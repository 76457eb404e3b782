package reconcile

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// UpToDate is upToDate, for the external tests' real informers.
func (c *Cache) UpToDate(store cache.Store, live metav1.Object, hash string, same func() bool) bool {
	return c.upToDate(store, live, hash, same)
}

// Remembers: a match of the object with uid is remembered.
func (c *Cache) Remembers(uid types.UID) bool {
	_, ok := c.matched.Load(uid)
	return ok
}
