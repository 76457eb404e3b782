package reconcile_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/internal/eventually"
)

// An object deleted on the API server while an apply compares it leaves
// no match behind, even when the informer has already told the cache of
// the delete (and the cache forgot the object) before the comparison
// ends: a match kept then would never be dropped.
func TestAMatchOfAnObjectDeletedWhileComparedIsNotKept(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := e.deps.Apply(ctx, e.state("api", 1)); err != nil {
		t.Fatal(err)
	}
	e.waitCached(t, cachedStatefulSet, e.ns, "api", 1)
	store := e.cache.ServiceInformer.GetStore()
	svc, err := e.cache.Services.Services(e.ns).Get("api")
	if err != nil {
		t.Fatal(err)
	}
	hash := svc.Annotations[kube.HashAnnotation]
	if !e.cache.UpToDate(store, svc, hash, func() bool { return true }) || !e.cache.Remembers(svc.UID) {
		t.Fatal("the Service as applied is not remembered as up to date")
	}

	// Someone labels it: the next apply compares the new version.
	edited := svc.DeepCopy()
	edited.Labels["team"] = "x"
	if _, err := e.admin.CoreV1().Services(e.ns).Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 15*time.Second, "the cache never saw the relabelled Service", func() bool {
		svc, err = e.cache.Services.Services(e.ns).Get("api")
		return err == nil && svc.Labels["team"] == "x"
	})
	e.cache.UpToDate(store, svc, hash, func() bool {
		// Deleted meanwhile, and the informer's delete handled: the old
		// match is forgotten before this one is remembered.
		if err := e.admin.CoreV1().Services(e.ns).Delete(ctx, "api", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, 15*time.Second, "the cache still remembers the deleted Service's match", func() bool { return !e.cache.Remembers(svc.UID) })
		return true
	})
	if e.cache.Remembers(svc.UID) {
		t.Error("a match is remembered for a Service the cache no longer holds")
	}
}
