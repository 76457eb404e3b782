package rolloutcheck

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// Sighting is one StatefulSet seen carrying one image with Replicas,
// or (Deleted) seen deleted. Every change the API server reports is one,
// its status's included.
type Sighting struct {
	Region, Namespace, Name, Image string
	// Env is the container's environment (literal values only): with the
	// image it tells one spec from another of the same image.
	Env      map[string]string
	Replicas int32
	// Generation is the StatefulSet's; ObservedGeneration the one its
	// status (the rest below) describes.
	Generation, ObservedGeneration int64
	// StatusReplicas, ReadyReplicas and UpdatedReplicas are the status's
	// replicas, readyReplicas and updatedReplicas: Pods there are, ready,
	// and on the current template.
	StatusReplicas, ReadyReplicas, UpdatedReplicas int32
	Deleted                                        bool
	At                                             time.Time
}

// AllReady tells whether, as the API server reported it, the StatefulSet
// ran at least one replica and every replica it asks for ran its current
// template, ready.
func (s Sighting) AllReady() bool {
	return !s.Deleted && s.Replicas > 0 && s.ObservedGeneration >= s.Generation &&
		s.StatusReplicas == s.Replicas && s.ReadyReplicas == s.Replicas && s.UpdatedReplicas == s.Replicas
}

// PodSighting is one Pod of a StatefulSet as the API server reported it,
// or (Deleted) its delete.
type PodSighting struct {
	Region, Namespace, Name, UID string
	// Owner is the StatefulSet that owns it.
	Owner string
	// Image and Env are its first container's, as for a Sighting.
	Image string
	Env   map[string]string
	// Restarts is the sum of its containers' restart counts.
	Restarts int32
	Ready    bool
	Deleted  bool
	At       time.Time
}

// ImageLog records the images and status of every StatefulSet of a
// cluster, and the Pods they own, as the API server reports them, from a
// list and then a watch that resumes from where it stood when the API
// server restarts. A watch that cannot resume (its history compacted
// away) is a gap: the log says so, and a verdict on it proves nothing for
// that time.
type ImageLog struct {
	region string
	mu     sync.Mutex
	seen   []Sighting
	pods   []PodSighting
	gaps   []string
}

// WatchImages starts logging the StatefulSets and their Pods of the
// cluster behind client until ctx ends. The first lists must succeed; a
// watch that cannot resume later is recorded as a gap and started again
// from a new list.
func WatchImages(ctx context.Context, region string, client kubernetes.Interface) (*ImageLog, error) {
	l := &ImageLog{region: region}
	sets := kind{what: "StatefulSets", record: l.recordObject,
		list: func(ctx context.Context) (runtime.Object, string, error) {
			list, err := client.AppsV1().StatefulSets("").List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, "", err
			}
			return list, list.ResourceVersion, nil
		},
		watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.AppsV1().StatefulSets("").Watch(ctx, o)
		}}
	pods := kind{what: "Pods", record: l.recordObject,
		list: func(ctx context.Context) (runtime.Object, string, error) {
			list, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, "", err
			}
			return list, list.ResourceVersion, nil
		},
		watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().Pods("").Watch(ctx, o)
		}}
	for _, k := range []kind{sets, pods} {
		w, err := l.listAndWatch(ctx, k)
		if err != nil {
			return nil, err
		}
		go l.keepWatching(ctx, k, w)
	}
	return l, nil
}

// kind is one resource the log follows.
type kind struct {
	what   string
	list   func(ctx context.Context) (runtime.Object, string, error)
	watch  func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error)
	record func(obj runtime.Object, deleted bool)
}

// keepWatching follows w, and after a watch that ended by itself a new
// list and watch, until ctx ends.
func (l *ImageLog) keepWatching(ctx context.Context, k kind, w *watchtools.RetryWatcher) {
	for {
		l.follow(ctx, k, w)
		if ctx.Err() != nil {
			return
		}
		for {
			var err error
			if w, err = l.listAndWatch(ctx, k); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// listAndWatch records every object of k there is and returns a watch of
// what happens after.
func (l *ImageLog) listAndWatch(ctx context.Context, k kind) (*watchtools.RetryWatcher, error) {
	list, version, err := k.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the %s of %s: %w", k.what, l.region, err)
	}
	switch list := list.(type) {
	case *appsv1.StatefulSetList:
		for i := range list.Items {
			k.record(&list.Items[i], false)
		}
	case *corev1.PodList:
		for i := range list.Items {
			k.record(&list.Items[i], false)
		}
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, version, &cache.ListWatch{WatchFuncWithContext: k.watch})
	if err != nil {
		return nil, fmt.Errorf("watch the %s of %s: %w", k.what, l.region, err)
	}
	return w, nil
}

// follow records what w reports until it or ctx ends; a watch that ends
// by itself is a gap.
func (l *ImageLog) follow(ctx context.Context, k kind, w *watchtools.RetryWatcher) {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.Done():
			if ctx.Err() == nil {
				l.gap(fmt.Sprintf("the watch of %s ended and could not resume", k.what))
			}
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				k.record(ev.Object, false)
			case watch.Deleted:
				k.record(ev.Object, true)
			case watch.Error:
				l.gap(fmt.Sprintf("watch error (%s): %v", k.what, ev.Object))
			}
		}
	}
}

// recordObject records a StatefulSet or a Pod a StatefulSet owns; other
// objects are not the log's.
func (l *ImageLog) recordObject(obj runtime.Object, deleted bool) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch o := obj.(type) {
	case *appsv1.StatefulSet:
		if deleted {
			l.seen = append(l.seen, Sighting{Region: l.region, Namespace: o.Namespace, Name: o.Name, Deleted: true, At: now})
			return
		}
		replicas := int32(1)
		if o.Spec.Replicas != nil {
			replicas = *o.Spec.Replicas
		}
		for _, c := range o.Spec.Template.Spec.Containers {
			l.seen = append(l.seen, Sighting{Region: l.region, Namespace: o.Namespace, Name: o.Name, Image: c.Image, Env: envOf(c),
				Replicas: replicas, Generation: o.Generation, ObservedGeneration: o.Status.ObservedGeneration,
				StatusReplicas: o.Status.Replicas, ReadyReplicas: o.Status.ReadyReplicas, UpdatedReplicas: o.Status.UpdatedReplicas,
				At: now})
		}
	case *corev1.Pod:
		owner := ""
		for _, ref := range o.OwnerReferences {
			if ref.Kind == "StatefulSet" {
				owner = ref.Name
			}
		}
		if owner == "" || len(o.Spec.Containers) == 0 {
			return
		}
		p := PodSighting{Region: l.region, Namespace: o.Namespace, Name: o.Name, UID: string(o.UID), Owner: owner,
			Image: o.Spec.Containers[0].Image, Env: envOf(o.Spec.Containers[0]), Deleted: deleted, At: now}
		for _, c := range o.Status.ContainerStatuses {
			p.Restarts += c.RestartCount
		}
		for _, c := range o.Status.Conditions {
			p.Ready = p.Ready || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}
		l.pods = append(l.pods, p)
	}
}

func envOf(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	return env
}

func (l *ImageLog) gap(why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gaps = append(l.gaps, time.Now().Format(time.RFC3339Nano)+": "+why)
}

// Sightings are the times a StatefulSet named name carried image, in
// order.
func (l *ImageLog) Sightings(name, image string) []Sighting {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Sighting
	for _, s := range l.seen {
		if s.Name == name && s.Image == image {
			out = append(out, s)
		}
	}
	return out
}

// History is every sighting of the StatefulSets named name, deletes
// included, in order.
func (l *ImageLog) History(name string) []Sighting {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Sighting
	for _, s := range l.seen {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Pods is every sighting of the Pods of the StatefulSets named owner,
// deletes included, in order.
func (l *ImageLog) Pods(owner string) []PodSighting {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []PodSighting
	for _, p := range l.pods {
		if p.Owner == owner {
			out = append(out, p)
		}
	}
	return out
}

// Gaps are the times the log could not follow the cluster: what happened
// in it until the next list may be missing.
func (l *ImageLog) Gaps() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.gaps...)
}
