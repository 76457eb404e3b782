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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/reconcile"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// maxPerReport caps the resources of one report: deployments per
// ReportDeploymentStatus, resources per ReportResourceSync (ctrld's limit).
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

	// evidence, when set, adds what crashed containers said.
	evidence *Evidence

	// flushing holds one flush at a time (a lock a waiter can give up on
	// when its context ends): Flush returns only when what was marked
	// before it was called has been reported, not merely taken by a flush
	// of the loop's that is still sending it.
	flushing chan struct{}
}

// reportTimeout bounds one report call: a ctrld that hangs (a lock wait in
// its database, say) must not hold the reporter, and the heartbeat behind
// it, for longer.
const reportTimeout = 10 * time.Second

// New returns a Reporter sending at most every interval.
func New(client ctrlv1.ClusterServiceClient, region string, c *reconcile.Cache, interval time.Duration, log *slog.Logger) *Reporter {
	if interval <= 0 {
		interval = time.Second
	}
	r := &Reporter{client: client, region: region, cache: c, interval: interval, log: log, dirty: map[string]bool{}, sentinels: map[string]bool{},
		flushing: make(chan struct{}, 1)}
	mark := func(obj any) {
		labels := kube.LabelsOf(obj)
		if deployment := labels[kube.DeploymentLabel]; deployment != "" {
			r.mark(r.dirty, deployment)
		}
		if sentinel := labels[kube.SentinelLabel]; sentinel != "" {
			r.mark(r.sentinels, sentinel)
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

// WithEvidence makes the reports carry what crashed containers said,
// their logs read through kube, and returns r.
func (r *Reporter) WithEvidence(kube kubernetes.Interface) *Reporter {
	r.evidence = newEvidence(kube, func(deployment string) { r.mark(r.dirty, deployment) })
	return r
}

// mark records ids (in dirty or sentinels) as to be reported.
func (r *Reporter) mark(set map[string]bool, ids ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		set[id] = true
	}
}

// take empties set (dirty or sentinels) and returns what it held, sorted.
func (r *Reporter) take(set map[string]bool) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := slices.Sorted(maps.Keys(set))
	clear(set)
	return ids
}

// Run reports until ctx ends.
func (r *Reporter) Run(ctx context.Context) {
	every(ctx, r.interval, r.log, "status", r.Flush)
}

// Flush reports now what changed and is not reported yet, and returns
// once ctrld took it (nil) or not. The heartbeat calls it first: a
// heartbeat ctrld receives then says that every change of the Pods the
// agent saw before it is reported, which is what a rollout's bake counts
// on (ctrld's regionhealth.AgentSilence).
func (r *Reporter) Flush(ctx context.Context) error {
	select {
	case r.flushing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-r.flushing }()
	ctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	return r.flush(ctx)
}

// every calls flush at most once per interval until ctx ends; after a
// failure it waits a backoff growing up to 30s before the next call.
func every(ctx context.Context, interval time.Duration, log *slog.Logger, what string, flush func(context.Context) error) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	backoff := interval
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := flush(ctx); err != nil && ctx.Err() == nil {
			log.Warn(what+": reporting to ctrld failed; will retry", "err", err)
			backoff = min(2*backoff, 30*time.Second)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = interval
	}
}

// flush sends what changed. What ctrld did not take stays to report,
// whether the send failed or something on the way failed or panicked (the
// status loop starts again after a panic).
func (r *Reporter) flush(ctx context.Context) error {
	if err := r.flushSentinels(ctx); err != nil {
		return err
	}
	return r.flushDeployments(ctx)
}

func (r *Reporter) flushSentinels(ctx context.Context) error {
	ids := r.take(r.sentinels)
	if len(ids) == 0 {
		return nil
	}
	sent := false
	defer func() {
		if !sent {
			r.mark(r.sentinels, ids...)
		}
	}()
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
		return err
	}
	sent = true
	return nil
}

func (r *Reporter) flushDeployments(ctx context.Context) error {
	ids := r.take(r.dirty)
	sent := 0 // ids[:sent] are reported
	defer func() { r.mark(r.dirty, ids[sent:]...) }()
	for sent < len(ids) {
		batch := ids[sent:min(len(ids), sent+maxPerReport)]
		req := &ctrlv1.ReportDeploymentStatusRequest{Region: r.region}
		for _, id := range batch {
			pods, err := reconcile.Owned[*corev1.Pod](r.cache.PodInformer, kube.DeploymentLabel, id)
			if err != nil {
				return err
			}
			status := &ctrlv1.DeploymentStatus{DeploymentId: id}
			for _, p := range pods {
				in := instance(p)
				if r.evidence != nil && !in.Ready {
					in.Evidence = r.evidence.For(p, id)
				}
				status.Instances = append(status.Instances, in)
			}
			req.Deployments = append(req.Deployments, status)
		}
		if _, err := r.client.ReportDeploymentStatus(ctx, req); err != nil {
			return err
		}
		sent += len(batch)
	}
	return nil
}
