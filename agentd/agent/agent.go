package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/deploysync/deploysync/agentd/checks"
	"github.com/deploysync/deploysync/agentd/dispatch"
	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/liveview"
	"github.com/deploysync/deploysync/agentd/metrics"
	"github.com/deploysync/deploysync/agentd/reconcile"
	"github.com/deploysync/deploysync/agentd/status"
	"github.com/deploysync/deploysync/agentd/watch"
	"github.com/deploysync/deploysync/internal/limits"
	"github.com/deploysync/deploysync/internal/naming"
	"github.com/deploysync/deploysync/internal/recovery"
	"github.com/deploysync/deploysync/internal/validate"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Config is agentd's configuration.
type Config struct {
	Region   string
	Identity string
	// Workers applies this many resources in parallel (default 8).
	Workers int
	// ResyncInterval is the periodic full resync (default 5m; negative: off).
	ResyncInterval time.Duration
	// StatusInterval batches status and resource sync reports (default 1s).
	StatusInterval time.Duration
	// Checks is how the region's rollout checks are evaluated: against
	// which Prometheus, how many queries at once, within what time.
	Checks checks.Config
	// HeartbeatInterval is the longest gap between agent status reports
	// (default 2s); a moved cursor is reported sooner. ctrld reads an
	// agent silent for 6s as gone (regionhealth.AgentSilence), so it is
	// well below that.
	HeartbeatInterval time.Duration
	// BackoffMin and BackoffMax bound stream reconnects (defaults 1s, 60s).
	BackoffMin, BackoffMax time.Duration
	// Version is reported to ctrld.
	Version string

	// LeaderElect runs the agent only while holding the region's Lease.
	LeaderElect bool
	// LeaseNamespace is the agent's own namespace, where its Lease is
	// (default "default"); it is reserved: nothing is applied there.
	LeaseNamespace string
	LeaseDuration  time.Duration // default 15s
	RenewDeadline  time.Duration // default 10s
	RetryPeriod    time.Duration // default 2s

	// ReservedNamespaces are namespaces the agent never writes into,
	// besides LeaseNamespace and those always reserved (see
	// naming.Reserved): applies there are refused, and nothing there is
	// deleted.
	ReservedNamespaces []string
	// NamespaceKnownFor is how long a namespace found to be the agent's
	// is trusted before it is read again (default 1m; see
	// reconcile.Namespaces).
	NamespaceKnownFor time.Duration
	// RefusedRetry is the first delay before an apply refused by the
	// tenant boundary is tried again; it doubles up to 5 times this
	// (default 1m; see dispatch.Terminal).
	RefusedRetry time.Duration

	// LiveViews is what the agent shows of its deployments through ctrld
	// (agentd --live-views): liveview.Logs (Pods, events and logs),
	// liveview.Pods (no logs), or liveview.Off or empty: no live views,
	// LiveRequests is never opened.
	LiveViews liveview.Serves

	// Readiness, when set, is kept up to date for /readyz.
	Readiness *Readiness
}

func (c *Config) defaults() {
	if c.Workers <= 0 {
		c.Workers = 8
	}
	if c.StatusInterval <= 0 {
		c.StatusInterval = time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 2 * time.Second
	}
	if c.NamespaceKnownFor <= 0 {
		c.NamespaceKnownFor = reconcile.NamespaceKnownFor
	}
	if c.RefusedRetry <= 0 {
		c.RefusedRetry = dispatch.RefusedRetryMin
	}
	if c.LeaseNamespace == "" {
		c.LeaseNamespace = "default"
	}
	if c.LeaseDuration <= 0 {
		c.LeaseDuration = 15 * time.Second
	}
	if c.RenewDeadline <= 0 {
		c.RenewDeadline = 10 * time.Second
	}
	if c.RetryPeriod <= 0 {
		c.RetryPeriod = 2 * time.Second
	}
}

// reserved is the namespaces the agent never writes into: its own, and
// ReservedNamespaces, besides those always reserved.
func (c *Config) reserved() (naming.Reserved, error) {
	r, err := naming.NewReserved(append([]string{c.LeaseNamespace}, c.ReservedNamespaces...)...)
	if err != nil {
		return naming.Reserved{}, fmt.Errorf("agent: reserved namespaces: %w", err)
	}
	return r, nil
}

// Clients reach the cluster the agent manages.
type Clients struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface // for CiliumNetworkPolicies
}

// ClientsFor builds Clients from a rest config.
func ClientsFor(cfg *rest.Config) (Clients, error) {
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Clients{}, err
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return Clients{}, err
	}
	return Clients{Kube: k, Dynamic: d}, nil
}

// Run runs the agent until ctx ends: directly, or whenever this replica
// holds the region's Lease when LeaderElect is set.
func Run(ctx context.Context, cfg Config, clients Clients, cluster ctrlv1.ClusterServiceClient, log *slog.Logger, m *metrics.Metrics) error {
	client := clients.Kube
	cfg.defaults()
	if cfg.Region == "" || cfg.Identity == "" {
		return errors.New("agent: region and identity are required")
	}
	if _, err := cfg.reserved(); err != nil {
		return err
	}
	if cfg.LiveViews != "" {
		if _, err := liveview.ParseServes(string(cfg.LiveViews)); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
	}
	if !cfg.LeaderElect {
		return runActive(ctx, cfg, clients, cluster, log, m)
	}
	cfg.Readiness.standBy()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: "agentd-" + cfg.Region, Namespace: cfg.LeaseNamespace},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}
	for ctx.Err() == nil {
		// RunOrDie returns when the lease is lost without waiting for
		// OnStartedLeading; the callback holds active while it runs, and
		// the loop takes it before electing again, so one process never
		// runs two agents at once. (A callback that starts only after that
		// finds its context already cancelled and returns at once.)
		var active sync.Mutex
		var runErr error
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   cfg.LeaseDuration,
			RenewDeadline:   cfg.RenewDeadline,
			RetryPeriod:     cfg.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            "agentd-" + cfg.Region,
			Callbacks: leaderelection.LeaderCallbacks{
				// The leader context ends the moment the lease is lost,
				// and with it every apply.
				OnStartedLeading: func(leading context.Context) {
					active.Lock()
					defer active.Unlock()
					log.Info("leader election: leading; applying", "identity", cfg.Identity)
					m.Leader.Set(1)
					defer m.Leader.Set(0)
					runErr = runActive(leading, cfg, clients, cluster, log, m)
				},
				OnStoppedLeading: func() {
					log.Info("leader election: not leading; standing by", "identity", cfg.Identity)
				},
				OnNewLeader: func(id string) {
					if id != cfg.Identity {
						log.Info("leader election: another replica leads", "leader", id)
					}
				},
			},
		})
		active.Lock()
		err := runErr
		active.Unlock()
		if err != nil && ctx.Err() == nil {
			log.Error("agent stopped", "err", err)
		}
	}
	return nil
}

// runActive is the agent proper.
func runActive(ctx context.Context, cfg Config, clients Clients, cluster ctrlv1.ClusterServiceClient, log *slog.Logger, m *metrics.Metrics) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reserved, err := cfg.reserved()
	if err != nil {
		return err
	}
	c := reconcile.NewCache(clients.Kube, 0)
	namespaces := reconcile.NewNamespaces(clients.Kube, reserved)
	namespaces.KnownFor = cfg.NamespaceKnownFor
	controllers := reconcile.NewControllers(reconcile.Deps{
		Kube: clients.Kube, Dynamic: clients.Dynamic, Cache: c, Namespaces: namespaces,
	})
	router := &router{controllers: controllers, metrics: m}

	hb := &heartbeat{client: cluster, cfg: cfg, log: log, metrics: m, kick: make(chan struct{}, 1)}
	d := dispatch.New(router, log, func(acked uint64) {
		m.AckedCursor.Set(float64(acked))
		hb.poke()
	}, dispatch.WithPanics(m.Panics), dispatch.WithRefusedRetry(cfg.RefusedRetry, 5*cfg.RefusedRetry))
	w := watch.New(cluster, d, func() ([]dispatch.Key, error) { return controllers.Present(ctx) }, watch.Config{
		Region: cfg.Region, Identity: cfg.Identity, ResyncInterval: cfg.ResyncInterval,
		BackoffMin: cfg.BackoffMin, BackoffMax: cfg.BackoffMax, StatusChanged: hb.poke,
	}, log, m)
	hb.dispatcher, hb.watcher = d, w
	cfg.Readiness.activate(w)
	defer cfg.Readiness.deactivate(cfg.LeaderElect)
	reporter := status.New(cluster, cfg.Region, c, cfg.StatusInterval, log).WithEvidence(clients.Kube)
	hb.flushStatus = reporter.Flush
	syncs := status.NewSyncReporter(cluster, cfg.Region, d, cfg.StatusInterval, log)

	checker, err := checks.New(cluster, cfg.Region, cfg.Checks, log)
	if err != nil {
		return err
	}

	guard := recovery.Guard{Log: log, Panics: m.Panics}
	var live *liveview.Server
	if cfg.LiveViews != "" && cfg.LiveViews != liveview.Off {
		live, err = liveview.New(liveview.Deps{Cluster: cluster, Kube: clients.Kube, Reserved: reserved, Namespaces: namespaces, Log: log, Guard: guard},
			liveview.Config{Region: cfg.Region, Identity: cfg.Identity, Serves: cfg.LiveViews, BackoffMin: cfg.BackoffMin, BackoffMax: cfg.BackoffMax})
		if err != nil {
			return err
		}
	}
	// Informer handlers run on client-go's goroutines, whose crash handler
	// ends the process on a panic. A panic here loses only this notice:
	// the next edit, or the next full sync, re-applies the resource.
	guarded := func(f func(obj any)) func(obj any) {
		return func(obj any) { guard.Run("drift", func() error { f(obj); return nil }) }
	}

	// Drift: an edit or delete of a managed object re-applies its resource.
	requeue := guarded(func(obj any) {
		for _, key := range reconcile.Owners(obj) {
			d.Requeue(key, nil)
		}
	})
	drift := cache.ResourceEventHandlerFuncs{
		// A new object re-applies its resource only when it is not where
		// the resource now is: left behind by a move whose apply ran
		// before the cache held it. (Every new object would re-apply each
		// resource once per object, with writes while the others are not
		// cached yet.)
		AddFunc: guarded(func(obj any) {
			o, ok := obj.(metav1.Object)
			if !ok {
				return
			}
			for _, key := range reconcile.Owners(obj) {
				d.Requeue(key, func(in dispatch.Intent) bool { return !in.Delete && reconcile.LeftBehind(in.Event, o) })
			}
		}),
		UpdateFunc: func(old, obj any) {
			if !edited(old, obj) {
				return // a status update (Pods moving along): nothing of ours changed
			}
			requeue(obj)
		},
		DeleteFunc: requeue,
	}
	for _, informer := range c.AppliedInformers() {
		informer.AddEventHandler(drift)
	}

	if err := c.Start(ctx); err != nil {
		return err
	}
	// A panic in one of these loops starts it again: none keeps anything
	// between rounds that a panic could leave half-done. Applies and
	// streams recover on their own, in the dispatcher (whose Run only
	// starts workers that do) and the watcher.
	var wg sync.WaitGroup
	run := func(where string, f func(context.Context)) {
		wg.Go(func() { guard.Loop(ctx, where, f) })
	}
	wg.Go(func() { d.Run(ctx, cfg.Workers) })
	run("status", reporter.Run)
	run("resource-sync", syncs.Run)
	run("heartbeat", hb.run)
	run("checks", checker.Run)
	if live != nil {
		run("live-views", live.Run)
	}
	err = w.Run(ctx)
	cancel()
	wg.Wait()
	return err
}

// router sends each resource to its kind's controller, and measures it.
type router struct {
	controllers *reconcile.Controllers
	metrics     *metrics.Metrics
}

func (r *router) Handle(ctx context.Context, key dispatch.Key, in dispatch.Intent) error {
	start := time.Now()
	err := r.handle(ctx, key, in)
	r.metrics.ApplyDuration.WithLabelValues(key.Kind).Observe(time.Since(start).Seconds())
	switch {
	case errors.Is(err, kube.ErrForeignNamespace):
		// The tenant boundary: retrying cannot help, and the region's
		// cursor must not wait for a person to act (see dispatch.Terminal).
		r.metrics.Conflicts.WithLabelValues(key.Kind).Inc()
		r.metrics.Failed.WithLabelValues(key.Kind).Inc()
		err = dispatch.Terminal(err)
	case errors.Is(err, kube.ErrBadEvent):
		// Retrying the same event cannot help either; the resource stays
		// failing with the error until ctrld sends one the agent can apply.
		r.metrics.Failed.WithLabelValues(key.Kind).Inc()
		err = dispatch.Terminal(err)
	case errors.Is(err, kube.ErrConflict), errors.Is(err, kube.ErrOwnedByAnother), errors.Is(err, reconcile.ErrNoCRD):
		r.metrics.Conflicts.WithLabelValues(key.Kind).Inc()
		r.metrics.Failed.WithLabelValues(key.Kind).Inc()
	case err != nil:
		r.metrics.Failed.WithLabelValues(key.Kind).Inc()
	case in.Delete:
		r.metrics.Applied.WithLabelValues(key.Kind, "delete").Inc()
	default:
		r.metrics.Applied.WithLabelValues(key.Kind, "apply").Inc()
	}
	return err
}

func (r *router) handle(ctx context.Context, key dispatch.Key, in dispatch.Intent) error {
	c, ok := r.controllers.For(key.Kind)
	if !ok {
		return fmt.Errorf("no controller for %s resources", key.Kind)
	}
	if in.Delete {
		return c.Delete(ctx, key.ID)
	}
	return c.Apply(ctx, in.Event)
}

// heartbeat reports the agent's status: when the cursor moves (acks within
// 200 ms make one report) and at least every HeartbeatInterval, from the term's first
// acknowledged bookmark on (or an error).
type heartbeat struct {
	client     ctrlv1.ClusterServiceClient
	cfg        Config
	log        *slog.Logger
	metrics    *metrics.Metrics
	dispatcher *dispatch.Dispatcher
	watcher    *watch.Watcher
	kick       chan struct{}
	// flushStatus reports the Pods' changes not reported yet; a heartbeat
	// is sent only after it succeeded, so that ctrld may read a heartbeat
	// as "what runs here is reported up to now" (a rollout's bake counts
	// only time so covered).
	flushStatus func(context.Context) error
}

func (h *heartbeat) poke() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

func (h *heartbeat) run(ctx context.Context) {
	tick := time.NewTicker(h.cfg.HeartbeatInterval)
	defer tick.Stop()
	for {
		h.send(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-h.kick:
			select { // coalesce bursts of acks
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

func (h *heartbeat) send(ctx context.Context) {
	h.metrics.QueueDepth.Set(float64(h.dispatcher.Depth()))
	if received, acked := h.watcher.Cursor(), h.dispatcher.Acked(); received > acked {
		h.metrics.Lag.Set(float64(received - acked))
	} else {
		h.metrics.Lag.Set(0)
	}
	req := &ctrlv1.ReportAgentStatusRequest{
		Region: h.cfg.Region, AgentIdentity: h.cfg.Identity,
		AckedVersion: h.dispatcher.Acked(), AgentVersion: h.cfg.Version,
		// Any text an apply error held: see validate.Text.
		LastError: validate.Text(h.dispatcher.LastError(), limits.MaxErrorBytes),
	}
	if err := h.watcher.GCError(); err != nil {
		req.LastFullSyncError = validate.Text(err.Error(), limits.MaxErrorBytes)
	}
	if req.LastError == "" {
		if err := h.watcher.LastError(); err != nil {
			req.LastError = validate.Text("stream: "+err.Error(), limits.MaxErrorBytes)
		} else {
			req.LastError = req.LastFullSyncError
		}
	}
	if !h.dispatcher.HasAcked() && req.LastError == "" {
		// Nothing acknowledged in this term yet, so no acked version to
		// report: ctrld would store 0 and show the whole retained log as
		// lag after every failover. Stay quiet until the first bookmark is
		// acked (the full sync's, normally seconds), unless there is an
		// error to show, which matters more than the lag figure.
		return
	}
	if t := h.watcher.LastFullSync(); !t.IsZero() {
		req.LastFullSync = timestamppb.New(t)
	}
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := h.flushStatus(callCtx); err != nil {
		// No heartbeat without the status before it: ctrld would read
		// stale Pods as current. Silent for long enough, the agent reads
		// as gone there, which is what it is to a rollout.
		if ctx.Err() == nil {
			h.log.Warn("heartbeat: reporting the Pods' status failed; no heartbeat without it", "err", err)
		}
		return
	}
	if _, err := h.client.ReportAgentStatus(callCtx, req); err != nil && ctx.Err() == nil {
		h.log.Warn("heartbeat: reporting agent status failed", "err", err)
	}
}

// edited reports whether an update touched what the agent applies: the
// spec (generation), labels or annotations (the spec hash). Status-only
// updates, most of a workload's updates, need no re-apply.
func edited(old, obj any) bool {
	o, ok1 := old.(metav1.Object)
	n, ok2 := obj.(metav1.Object)
	if !ok1 || !ok2 {
		return true
	}
	return o.GetGeneration() != n.GetGeneration() ||
		!maps.Equal(o.GetLabels(), n.GetLabels()) ||
		!maps.Equal(o.GetAnnotations(), n.GetAnnotations())
}
