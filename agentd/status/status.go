// Package status reports what the cluster actually runs back to ctrld:
// the Pods of each deployment (name, address, phase, readiness) and each
// sentinel's available replicas and health, from the informer cache,
// batched and deduplicated — a burst of events for one resource becomes
// one report — and retried until ctrld takes them.
package status

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/reconcile"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// maxPerReport caps deployments per ReportDeploymentStatus call.
const maxPerReport = 500

// Reporter sends deployment status.
type Reporter struct {
	client   ctrlv1.ClusterServiceClient
	region   string
	cache    *reconcile.Cache
	interval time.Duration
	log      *slog.Logger

	mu        sync.Mutex
	dirty     map[string]bool // deployments
	sentinels map[string]bool
}

// New returns a Reporter sending at most every interval.
func New(client ctrlv1.ClusterServiceClient, region string, c *reconcile.Cache, interval time.Duration, log *slog.Logger) *Reporter {
	if interval <= 0 {
		interval = time.Second
	}
	r := &Reporter{client: client, region: region, cache: c, interval: interval, log: log, dirty: map[string]bool{}, sentinels: map[string]bool{}}
	mark := func(obj any) {
		deployment, sentinel := kube.OwnerIDs(obj)
		if deployment != "" {
			r.markDirty(deployment)
		}
		if sentinel != "" {
			r.mu.Lock()
			r.sentinels[sentinel] = true
			r.mu.Unlock()
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    mark,
		UpdateFunc: func(_, obj any) { mark(obj) },
		DeleteFunc: mark,
	}
	c.PodInformer.AddEventHandler(handler)
	c.StatefulSetInformer.AddEventHandler(handler)
	c.DeploymentInformer.AddEventHandler(handler)
	return r
}

func (r *Reporter) markDirty(id string) {
	r.mu.Lock()
	r.dirty[id] = true
	r.mu.Unlock()
}

// Run reports until ctx ends.
func (r *Reporter) Run(ctx context.Context) {
	tick := time.NewTicker(r.interval)
	defer tick.Stop()
	backoff := r.interval
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := r.flush(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("status: reporting to ctrld failed; will retry", "err", err)
			backoff = min(2*backoff, 30*time.Second)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = r.interval
	}
}

// flush sends what changed; on failure it stays dirty.
func (r *Reporter) flush(ctx context.Context) error {
	if err := r.flushSentinels(ctx); err != nil {
		return err
	}
	return r.flushDeployments(ctx)
}

func (r *Reporter) flushSentinels(ctx context.Context) error {
	r.mu.Lock()
	ids := slices.Sorted(maps.Keys(r.sentinels))
	clear(r.sentinels)
	r.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	req := &ctrlv1.ReportSentinelStatusRequest{Region: r.region}
	for _, id := range ids {
		deps, err := reconcile.Owned[*appsv1.Deployment](r.cache.DeploymentInformer, kube.SentinelLabel, id)
		if err != nil {
			return err
		}
		st := &ctrlv1.SentinelStatus{SentinelId: id, Health: ctrlv1.SentinelHealth_SENTINEL_HEALTH_UNHEALTHY}
		for _, d := range deps {
			st.AvailableReplicas += d.Status.AvailableReplicas
			if d.Spec.Replicas != nil && d.Status.AvailableReplicas >= *d.Spec.Replicas {
				st.Health = ctrlv1.SentinelHealth_SENTINEL_HEALTH_HEALTHY
			}
		}
		req.Sentinels = append(req.Sentinels, st)
	}
	if _, err := r.client.ReportSentinelStatus(ctx, req); err != nil {
		r.mu.Lock()
		for _, id := range ids {
			r.sentinels[id] = true
		}
		r.mu.Unlock()
		return err
	}
	return nil
}

func (r *Reporter) flushDeployments(ctx context.Context) error {
	r.mu.Lock()
	ids := slices.Sorted(maps.Keys(r.dirty))
	clear(r.dirty)
	r.mu.Unlock()
	for start := 0; start < len(ids); start += maxPerReport {
		batch := ids[start:min(len(ids), start+maxPerReport)]
		req := &ctrlv1.ReportDeploymentStatusRequest{Region: r.region}
		for _, id := range batch {
			pods, err := reconcile.Owned[*corev1.Pod](r.cache.PodInformer, kube.DeploymentLabel, id)
			if err != nil {
				return err
			}
			status := &ctrlv1.DeploymentStatus{DeploymentId: id}
			for _, p := range pods {
				status.Instances = append(status.Instances, instance(p))
			}
			req.Deployments = append(req.Deployments, status)
		}
		if _, err := r.client.ReportDeploymentStatus(ctx, req); err != nil {
			for _, id := range ids[start:] {
				r.markDirty(id)
			}
			return err
		}
	}
	return nil
}

func instance(p *corev1.Pod) *ctrlv1.Instance {
	in := &ctrlv1.Instance{PodName: p.Name, Address: p.Status.PodIP}
	switch p.Status.Phase {
	case corev1.PodPending:
		in.Status = ctrlv1.InstanceStatus_INSTANCE_STATUS_PENDING
	case corev1.PodRunning:
		in.Status = ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING
	case corev1.PodFailed, corev1.PodSucceeded:
		in.Status = ctrlv1.InstanceStatus_INSTANCE_STATUS_FAILED
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			in.Ready = true
		}
	}
	for _, c := range p.Spec.Containers {
		in.CpuMillicores += int32(c.Resources.Requests.Cpu().MilliValue())
		in.MemoryMib += int32(c.Resources.Requests.Memory().Value() >> 20)
	}
	return in
}
