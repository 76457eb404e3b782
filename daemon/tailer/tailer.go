package tailer

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/internal/recovery"
)

// RegionControl is the operator-set state of a region, read from the
// regions table so every ctrld replica honours it.
type RegionControl struct {
	Paused           bool
	ResyncGeneration int64
}

// Notice is one delivery to a subscriber.
type Notice struct {
	// Changes are the region's newly visible changes, ascending by
	// Version except that a settled hole may arrive after higher versions.
	Changes []changelog.Change
	// Watermark is the tailer's safe watermark after these changes.
	Watermark uint64
	// Control is the region's current control state.
	Control RegionControl
}

// ErrSlowSubscriber closes a subscription whose reader fell so far behind
// that its buffer filled; the stream ends and the client resumes from its
// last bookmark.
var ErrSlowSubscriber = errors.New("stream fell too far behind; reconnect from the last bookmark")

// ErrRestarted closes subscriptions when the tailer starts over after a
// panic: the client resumes from its last bookmark.
var ErrRestarted = errors.New("ctrld's change feed restarted after an internal error; reconnect from the last bookmark")

// ErrStopped closes subscriptions when the tailer stops: ctrld is shutting
// down and the client reconnects, to another replica if there is one.
var ErrStopped = errors.New("ctrld is shutting down")

// Config tunes the tailer. Zero values take the defaults.
type Config struct {
	// PollInterval is how often deployment_changes is read (default 100ms).
	PollInterval time.Duration
	// BatchSize caps rows per read (default 1000).
	BatchSize int
	// HoleGrace is how long a hole may stay open before the filler settles
	// it (default 500ms). Shorter settles rollbacks faster; longer runs the
	// filler less often for ordinary commit reordering.
	HoleGrace time.Duration
	// FillerLockWait bounds one filler attempt's wait behind an in-flight
	// transaction (default 10s; MySQL takes whole seconds).
	FillerLockWait time.Duration
	// ControlInterval is how often the regions table is read for pause
	// and forced resync (default 1s).
	ControlInterval time.Duration
	// SubscriberBuffer is how many undelivered notices a subscriber may
	// have before it is dropped (default 4096).
	SubscriberBuffer int
	// UnavailableAfter, when set, is how long the tailer may go without a
	// poll that succeeds (one that fails, or one that hangs: each poll,
	// region read and watermark write gets this long) before every
	// subscription ends with ErrDatabaseUnavailable and new ones are
	// refused until a poll succeeds. Zero: never; the subscriptions stay,
	// silent, for as long as the database is away, which is right where
	// no other replica could read it either (see DefaultUnavailableAfter),
	// and each round gets 30 s before it is tried again.
	UnavailableAfter time.Duration
}

// Defaults are the production settings zero Config fields take (ctrld's
// flags show them).
var Defaults = Config{
	PollInterval:     100 * time.Millisecond,
	BatchSize:        1000,
	HoleGrace:        500 * time.Millisecond,
	FillerLockWait:   10 * time.Second,
	ControlInterval:  time.Second,
	SubscriberBuffer: 4096,
}

func (c *Config) defaults() {
	if c.PollInterval <= 0 {
		c.PollInterval = Defaults.PollInterval
	}
	if c.BatchSize <= 0 {
		c.BatchSize = Defaults.BatchSize
	}
	if c.HoleGrace <= 0 {
		c.HoleGrace = Defaults.HoleGrace
	}
	if c.FillerLockWait < time.Second {
		c.FillerLockWait = Defaults.FillerLockWait
	}
	if c.ControlInterval <= 0 {
		c.ControlInterval = Defaults.ControlInterval
	}
	if c.SubscriberBuffer <= 0 {
		c.SubscriberBuffer = Defaults.SubscriberBuffer
	}
}

// Per round, at most maxHoleRanges open ranges are re-read, returning at
// most maxHoleRows rows, and at most maxFill pks are filled: a jump of a
// million auto-increment values is settled in bounded steps.
const (
	maxHoleRanges = 100
	maxHoleRows   = 10000
	maxFill       = 5000
)

// Tailer follows deployment_changes. Create it with New and run it with Run.
type Tailer struct {
	db      *sql.DB
	cfg     Config
	log     *slog.Logger
	metrics *metrics.Metrics
	guard   recovery.Guard // recovers panics in the poll loop and the filler
	poke    chan struct{}
	ready   chan struct{} // closed once the persisted watermark is loaded, or on stop
	// readyOnce closes ready.
	readyOnce sync.Once
	// controlMu orders reads of the regions table: a slow periodic read
	// must not overwrite a newer one an operator action triggered.
	controlMu sync.Mutex

	mu        sync.Mutex
	watermark uint64             // W: every pk <= W is committed or dead
	maxSeen   uint64             // newest pk read
	holes     holeList           // pks below maxSeen not visible yet
	early     []changelog.Change // visible rows above W, by Version
	control   map[string]RegionControl
	subs      map[*Subscription]struct{}
	stopped   bool
	filling   bool
	// fillerHold, after a filler run panicked, is when the next may start
	// (fillerBackoff spaces them out): a filler that panics every time
	// must not run and log a stack every poll.
	fillerHold    time.Time
	fillerBackoff *recovery.Backoff
	// failingSince is when polls began to fail (zero while they succeed);
	// unavailable is set once none has succeeded for UnavailableAfter, and
	// onAvailability hears of each switch (see notePoll).
	failingSince   time.Time
	lastPollOK     time.Time   // when a poll last succeeded (or the tailer started)
	pollLog        logThrottle // failed polls' log lines; only Run's goroutine uses it
	unavailable    bool
	onAvailability func(available bool)
	fillers        sync.WaitGroup // the filler run in flight, if any
	persisted      uint64
}

// New returns a tailer reading through db.
func New(db *sql.DB, cfg Config, log *slog.Logger, m *metrics.Metrics) *Tailer {
	cfg.defaults()
	guard := recovery.Guard{Log: log, Panics: m.Panics}
	return &Tailer{
		db:            db,
		cfg:           cfg,
		log:           log,
		metrics:       m,
		guard:         guard,
		fillerBackoff: guard.Backoff(),
		poke:          make(chan struct{}, 1),
		ready:         make(chan struct{}),
		control:       map[string]RegionControl{},
		subs:          map[*Subscription]struct{}{},
	}
}

// Poke asks for a poll now, e.g. right after this process committed a
// change, so the change reaches agents without waiting for the next tick.
func (t *Tailer) Poke() {
	select {
	case t.poke <- struct{}{}:
	default:
	}
}

// Watermark returns the current safe watermark.
func (t *Tailer) Watermark() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.watermark
}

// Run polls until ctx ends, then closes every subscription.
//
// A panic while polling must neither end ctrld nor leave every stream of
// the process waiting for a tailer that no longer polls (invariant I6).
// It is logged and counted, and the tailer starts over (restart): every
// subscription ends with ErrRestarted, so its agent reconnects from its
// last bookmark, and what the tailer read above its watermark is read
// again, because a poll cut short may have left it half-updated. A panic
// that comes back on every poll (a row that trips a bug) restarts it with
// a growing pause, so the streams of every region start over a few times
// a minute, not every second.
func (t *Tailer) Run(ctx context.Context) error {
	defer t.fillers.Wait()
	defer t.stop()
	if err := t.start(ctx); err != nil {
		return err
	}
	t.readyOnce.Do(func() { close(t.ready) })
	t.lastPollOK = time.Now() // the start read the database
	t.announce(true)
	t.guard.LoopResetting(ctx, "tailer", t.follow, t.restart)
	return nil
}

// follow polls until ctx ends.
func (t *Tailer) follow(ctx context.Context) {
	pollTick := time.NewTicker(t.cfg.PollInterval)
	defer pollTick.Stop()
	controlTick := time.NewTicker(t.cfg.ControlInterval)
	defer controlTick.Stop()
	persistTick := time.NewTicker(time.Second)
	defer persistTick.Stop()
	var controlLog, persistLog logThrottle
	for {
		more, err := t.pollWithin(ctx)
		if ctx.Err() == nil {
			t.notePoll(err, time.Now()) // logs the failure
		}
		if more && err == nil {
			continue // a full batch: read on without waiting
		}
		// The next poll waits for the poll tick or a poke, not for region
		// control or the watermark's persistence: PollInterval means what
		// it says. A tailer polling every hour reads the change log only
		// when poked (daemon/peers' tests rely on it), and an idle one
		// polls 10 times a second, not 12.
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-pollTick.C:
				break wait
			case <-t.poke:
				break wait
			// Neither touches what a poll updates, so a panic in one is
			// that round's failure (logged and counted by the guard), not
			// a reason to end every stream.
			// Their failures are logged as a poll's are, at most one line
			// per failureLogEvery: they fail every second while the
			// database is away.
			case <-controlTick.C:
				if err := t.boundedRun(ctx, "tailer-control", t.readControl); err != nil && ctx.Err() == nil && controlLog.due(time.Now()) {
					t.log.Warn("tailer: reading region control failed", "err", err)
				}
			case <-persistTick.C:
				if err := t.boundedRun(ctx, "tailer-persist", t.persistWatermark); err != nil && ctx.Err() == nil && persistLog.due(time.Now()) {
					t.log.Warn("tailer: persisting the watermark failed", "err", err)
				}
			}
		}
	}
}

// start loads the persisted watermark, retrying until the database answers.
func (t *Tailer) start(ctx context.Context) error {
	for {
		w, err := changelog.ReadMark(ctx, t.db, changelog.MarkSafeWatermark)
		if err == nil {
			err = t.readControl(ctx)
		}
		if err == nil {
			t.mu.Lock()
			t.watermark, t.maxSeen, t.persisted = w, w, w
			t.mu.Unlock()
			t.metrics.Watermark.Set(float64(w))
			return nil
		}
		t.log.Warn("tailer: cannot load the stream watermark; retrying", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// restart ends every subscription and forgets everything read above the
// watermark, keeping the watermark itself: it only moves at the end of a
// poll's update of the holes, so a poll cut short leaves it true, while
// maxSeen, the holes and the early rows may be half-updated. The next poll
// reads everything above the watermark again.
func (t *Tailer) restart() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closeAll(ErrRestarted)
	t.maxSeen = t.watermark
	t.holes = nil
	t.early = nil
	t.metrics.OpenHoles.Set(0)
}

// stop ends every subscription, and lets Subscribe return ErrStopped
// even if the tailer never started (its start panicked, say): a watch
// must not wait for it forever.
func (t *Tailer) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	t.closeAll(ErrStopped)
	t.readyOnce.Do(func() { close(t.ready) })
}

// closeAll ends every subscription with err. Called with mu held.
func (t *Tailer) closeAll(err error) {
	for s := range t.subs {
		s.endWith(err)
	}
	clear(t.subs)
	t.metrics.Subscriptions.Set(0)
}

// poll reads the rows above maxSeen and re-reads open holes under ctx,
// then updates W and delivers; a filler it starts runs under runCtx, as it
// outlives the poll. It reports whether a full batch was read.
func (t *Tailer) poll(ctx, runCtx context.Context) (more bool, err error) {
	start := time.Now()
	defer func() { t.metrics.PollDuration.Observe(time.Since(start).Seconds()) }()

	after, holes := t.toRead()

	rows, err := changelog.After(ctx, t.db, after, t.cfg.BatchSize)
	if err != nil {
		return false, err
	}
	spans := make([]changelog.Span, len(holes))
	for i, h := range holes {
		spans[i] = changelog.Span{Lo: h.lo, Hi: h.hi}
	}
	settled, err := changelog.InSpans(ctx, t.db, spans, maxHoleRows)
	if err != nil {
		return false, err
	}
	t.metrics.PollRows.Add(float64(len(rows) + len(settled)))

	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var visible []changelog.Change
	for _, r := range rows {
		if r.Version > t.maxSeen+1 {
			t.holes.open(t.maxSeen+1, r.Version-1, now)
		}
		t.maxSeen = r.Version
		if r.Type != changelog.GapType {
			visible = append(visible, r)
		}
	}
	for _, r := range settled {
		t.holes.settle(r.Version)
		if r.Type != changelog.GapType {
			visible = append(visible, r)
		}
	}
	oldW := t.watermark
	t.advance()
	t.deliver(visible, t.watermark != oldW)
	t.fillOldHoles(runCtx, now)
	return len(rows) == t.cfg.BatchSize, nil
}

// toRead returns where the next read of new rows starts and the holes to
// read again. Unlocked by defer: after a panic the tailer starts over and
// must not find mu held.
func (t *Tailer) toRead() (uint64, []hole) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.maxSeen, t.holes.oldest(maxHoleRanges)
}

// advance moves W to just below the lowest open hole and drops early rows
// it passed.
func (t *Tailer) advance() {
	w := t.maxSeen
	if len(t.holes) > 0 {
		w = t.holes[0].lo - 1
	}
	if w > t.watermark {
		t.watermark = w
	}
	t.early = slices.DeleteFunc(t.early, func(c changelog.Change) bool { return c.Version <= t.watermark })
	t.metrics.Watermark.Set(float64(t.watermark))
	t.metrics.OpenHoles.Set(float64(t.holes.pks()))
	if len(t.holes) > 0 {
		t.metrics.WatermarkHolds.Inc()
	}
}

// deliver hands each subscriber its region's changes. Called with mu held.
func (t *Tailer) deliver(visible []changelog.Change, watermarkMoved bool) {
	grew := false
	for _, c := range visible {
		if c.Version > t.watermark {
			t.early = append(t.early, c)
			grew = true
		}
	}
	if grew { // settled holes may land below later rows
		slices.SortFunc(t.early, func(a, b changelog.Change) int { return cmp.Compare(a.Version, b.Version) })
	}
	if len(visible) == 0 && !watermarkMoved {
		return
	}
	byRegion := map[string][]changelog.Change{}
	for _, c := range visible {
		byRegion[c.Region] = append(byRegion[c.Region], c)
	}
	for s := range t.subs {
		changes := byRegion[s.region]
		if len(changes) == 0 && !watermarkMoved {
			continue
		}
		t.send(s, Notice{Changes: changes, Watermark: t.watermark, Control: t.control[s.region]})
	}
}

// send delivers without ever blocking the tailer: a subscriber with
// SubscriberBuffer notices undelivered is dropped. Called with mu held.
func (t *Tailer) send(s *Subscription, n Notice) {
	if !s.deliver(n, t.cfg.SubscriberBuffer) {
		t.metrics.SlowSubscribers.Inc()
		s.endWith(ErrSlowSubscriber)
		delete(t.subs, s)
		t.metrics.Subscriptions.Set(float64(len(t.subs)))
	}
}

// readControl refreshes every region's pause and resync state and tells
// the subscribers of regions whose state changed.
func (t *Tailer) readControl(ctx context.Context) error {
	t.controlMu.Lock()
	defer t.controlMu.Unlock()
	rows, err := t.db.QueryContext(ctx, "SELECT id, paused, resync_generation FROM regions")
	if err != nil {
		return fmt.Errorf("read regions: %w", err)
	}
	defer rows.Close()
	next := map[string]RegionControl{}
	for rows.Next() {
		var id string
		var c RegionControl
		if err := rows.Scan(&id, &c.Paused, &c.ResyncGeneration); err != nil {
			return err
		}
		next[id] = c
	}
	if err := rows.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.control
	t.control = next
	for s := range t.subs {
		if old[s.region] != next[s.region] {
			t.send(s, Notice{Watermark: t.watermark, Control: next[s.region]})
		}
	}
	return nil
}

// KnowsRegion says whether the last read of the regions table (at most
// ControlInterval ago) found region.
func (t *Tailer) KnowsRegion(region string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.control[region]
	return ok
}

// RefreshControl re-reads region control now, e.g. right after an operator
// paused a region through this process.
func (t *Tailer) RefreshControl(ctx context.Context) error {
	return t.readControl(ctx)
}

func (t *Tailer) persistWatermark(ctx context.Context) error {
	t.mu.Lock()
	w, done := t.watermark, t.persisted
	t.mu.Unlock()
	if w <= done {
		return nil
	}
	if err := changelog.RaiseMark(ctx, t.db, changelog.MarkSafeWatermark, w); err != nil {
		return err
	}
	t.mu.Lock()
	t.persisted = max(t.persisted, w)
	t.mu.Unlock()
	return nil
}
