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
// never is.
func TestUpToDateComparesAnObjectVersionOnce(t *testing.T) {
	c := &Cache{}
	at := func(version, hash string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{UID: "u1", ResourceVersion: version,
			Annotations: map[string]string{kube.HashAnnotation: hash}}}
	}
	compared := 0
	steps := []struct {
		name     string
		live     *corev1.Service
		hash     string
		same     bool // what the comparison says
		forget   any  // forgotten first, if set
		want     bool
		compares int
	}{
		{"first look", at("5", "h1"), "h1", true, nil, true, 1},
		{"same version again", at("5", "h1"), "h1", true, nil, true, 0},
		{"another desired hash", at("5", "h1"), "h2", true, nil, false, 0},
		{"edited out of band", at("6", "h1"), "h1", false, nil, false, 1},
		{"still edited", at("6", "h1"), "h1", false, nil, false, 1},
		{"put back", at("7", "h1"), "h1", true, nil, true, 1},
		{"deleted", at("7", "h1"), "h1", true, at("7", "h1"), true, 1},
		{"deleted, final state unknown", at("7", "h1"), "h1", true, cache.DeletedFinalStateUnknown{Obj: at("7", "h1")}, true, 1},
	}
	for _, s := range steps {
		if s.forget != nil {
			c.forget(s.forget)
		}
		before := compared
		got := c.upToDate(s.live, s.hash, func() bool { compared++; return s.same })
		if got != s.want || compared-before != s.compares {
			t.Errorf("%s: upToDate = %v after %d comparisons, want %v after %d", s.name, got, compared-before, s.want, s.compares)
		}
	}
}
