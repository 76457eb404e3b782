package rolloutcheck

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// Sighting is one StatefulSet seen carrying one image with Replicas,
// or (Deleted) seen deleted.
type Sighting struct {
	Region, Namespace, Name, Image string
	Replicas                       int32
	Deleted                        bool
	At                             time.Time
}

// ImageLog records the images of every StatefulSet of a cluster as the
// API server reports them, from a list and then a watch that resumes
// from where it stood when the API server restarts. A watch that cannot
// resume (its history compacted away) is a gap: the log says so, and a
// verdict on it proves nothing for that time.
type ImageLog struct {
	region string
	mu     sync.Mutex
	seen   []Sighting
	gaps   []string
}

// WatchImages starts logging the StatefulSets of the cluster behind
// client until ctx ends. The first list must succeed; a watch that cannot
// resume later is recorded as a gap and started again from a new list.
func WatchImages(ctx context.Context, region string, client kubernetes.Interface) (*ImageLog, error) {
	l := &ImageLog{region: region}
	w, err := l.listAndWatch(ctx, client)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			l.follow(ctx, w)
			if ctx.Err() != nil {
				return
			}
			for {
				if w, err = l.listAndWatch(ctx, client); err == nil {
					break
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
		}
	}()
	return l, nil
}

// listAndWatch records every StatefulSet there is and returns a watch of
// what happens after.
func (l *ImageLog) listAndWatch(ctx context.Context, client kubernetes.Interface) (*watchtools.RetryWatcher, error) {
	list, err := client.AppsV1().StatefulSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the StatefulSets of %s: %w", l.region, err)
	}
	for i := range list.Items {
		l.record(&list.Items[i])
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.AppsV1().StatefulSets("").Watch(ctx, o)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watch the StatefulSets of %s: %w", l.region, err)
	}
	return w, nil
}

// follow records what w reports until it or ctx ends; a watch that ends
// by itself is a gap.
func (l *ImageLog) follow(ctx context.Context, w *watchtools.RetryWatcher) {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.Done():
			if ctx.Err() == nil {
				l.gap("the watch ended and could not resume")
			}
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			sts, isSts := ev.Object.(*appsv1.StatefulSet)
			switch {
			case isSts && (ev.Type == watch.Added || ev.Type == watch.Modified):
				l.record(sts)
			case isSts && ev.Type == watch.Deleted:
				l.mu.Lock()
				l.seen = append(l.seen, Sighting{Region: l.region, Namespace: sts.Namespace, Name: sts.Name, Deleted: true, At: time.Now()})
				l.mu.Unlock()
			case ev.Type == watch.Error:
				l.gap(fmt.Sprintf("watch error: %v", ev.Object))
			}
		}
	}
}

func (l *ImageLog) record(sts *appsv1.StatefulSet) {
	l.mu.Lock()
	defer l.mu.Unlock()
	replicas := int32(1)
	if sts.Spec.Replicas != nil {
		replicas = *sts.Spec.Replicas
	}
	for _, c := range sts.Spec.Template.Spec.Containers {
		l.seen = append(l.seen, Sighting{Region: l.region, Namespace: sts.Namespace, Name: sts.Name, Image: c.Image,
			Replicas: replicas, At: time.Now()})
	}
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

// Gaps are the times the log could not follow the cluster: what happened
// in it until the next list may be missing.
func (l *ImageLog) Gaps() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.gaps...)
}
