package stream

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/daemon/tailer"
	"github.com/deploysync/deploysync/ent"
	entagent "github.com/deploysync/deploysync/ent/agent"
	"github.com/deploysync/deploysync/ent/region"
	"github.com/deploysync/deploysync/internal/limits"
	"github.com/deploysync/deploysync/internal/recovery"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Errors a stream ends with; the gRPC layer maps them to status codes.
var (
	// ErrUnknownRegion: no such region is registered.
	ErrUnknownRegion = errors.New("unknown region")
	// ErrFellBehind: the client read too slowly; it should resume.
	ErrFellBehind = tailer.ErrSlowSubscriber
)

// Config tunes streams. Zero values take the defaults.
type Config struct {
	// PageSize is the full sync's keyset page size, and the catch-up's
	// (default 5000). Each page is a statement of its own, a round trip
	// the next page waits for: at 500 the database spent about a third
	// more CPU on a region of 60,000 than at 2000 (BenchmarkFullSync's
	// db-cpu-ms/sync: 357-360 against 223-270 ms), and once the pages went
	// out in batches the statements were a full sync's critical path: at
	// 5000 a batched full sync of 60,000 took 0.49-0.50x the seed's time
	// against 0.66-0.80x at 2000, in the same runs on a loaded machine
	// (load 3-6), the database's CPU 100-103 ms against 140-147. A sync's
	// peak live heap goes from 2.1-2.8 MiB to 4.9-6.5 (two pages).
	PageSize int
	// KeepAlive is how often an idle stream repeats its bookmark (default 10s).
	KeepAlive time.Duration
	// Instance names this ctrld process in agents' connected_to.
	Instance string
	// SendTimeout ends a stream whose client takes no data for this long
	// while events wait for it (default 30s), counted from when it last
	// took some, whatever is queued. The client resumes from its last
	// bookmark when it reconnects.
	SendTimeout time.Duration
	// MaxFullSyncs bounds the full syncs reading a page at once (default
	// 8, half the streams' database pool). A full sync holds its slot only
	// while it reads, never while it waits for its client to read what it
	// sent, so slow clients cannot keep others from syncing.
	MaxFullSyncs int
	// MaxStreamsPerToken bounds the streams one token may have open; more
	// are refused with ResourceExhausted (default 4: an agent has one, two
	// while it rolls over, and a stream whose end the server has not
	// noticed yet may linger beside them).
	MaxStreamsPerToken int
	// MaxStreams bounds the streams this process serves; more are refused
	// with ResourceExhausted (default 10,000). Each holds a connection (a
	// file descriptor) and about 40 KiB of goroutine stacks and gRPC's
	// and TLS's state: BenchmarkIdleStreams measured 10,000 idle streams
	// at 710 MiB RSS as they finished opening, with TLS or without, and
	// under 610 MiB once idle for a minute; deploy/k8s gives ctrld 1 GiB.
	MaxStreams int
	// ConnectionRefresh is how often RefreshConnections marks the records
	// of the streams' agents as heard from (default 2m).
	ConnectionRefresh time.Duration
}

// Defaults are the production settings zero Config fields take (ctrld's
// flags show them).
var Defaults = Config{
	PageSize:           5000,
	KeepAlive:          10 * time.Second,
	SendTimeout:        30 * time.Second,
	MaxFullSyncs:       8,
	MaxStreamsPerToken: 4,
	MaxStreams:         10000,
	ConnectionRefresh:  2 * time.Minute,
}

func (c *Config) defaults() {
	if c.PageSize <= 0 {
		c.PageSize = Defaults.PageSize
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = Defaults.KeepAlive
	}
	if c.SendTimeout <= 0 {
		c.SendTimeout = Defaults.SendTimeout
	}
	if c.MaxFullSyncs <= 0 {
		c.MaxFullSyncs = Defaults.MaxFullSyncs
	}
	if c.MaxStreamsPerToken <= 0 {
		c.MaxStreamsPerToken = Defaults.MaxStreamsPerToken
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = Defaults.MaxStreams
	}
	if c.ConnectionRefresh <= 0 {
		c.ConnectionRefresh = Defaults.ConnectionRefresh
	}
}

// Streamer serves WatchDeploymentChanges streams.
type Streamer struct {
	db      *sql.DB
	client  *ent.Client
	tailer  *tailer.Tailer
	cfg     Config
	log     *slog.Logger
	metrics *metrics.Metrics
	guard   recovery.Guard
	// admission bounds the streams per token and in total.
	admission *admission
	// fullSyncSlots holds one entry per full sync in progress.
	fullSyncSlots chan struct{}
	// connections are the agent records the streams hold, for
	// RefreshConnections.
	connections connections
}

// New returns a Streamer. client and db should be a pool of the streams'
// own (store.DB's StreamEnt and StreamSQL), so that streams never take the
// connections unary calls need.
func New(client *ent.Client, db *sql.DB, t *tailer.Tailer, cfg Config, log *slog.Logger, m *metrics.Metrics) *Streamer {
	cfg.defaults()
	return &Streamer{
		db: db, client: client, tailer: t, cfg: cfg, log: log, metrics: m,
		guard:         recovery.Guard{Log: log, Panics: m.Panics},
		admission:     newAdmission(cfg.MaxStreamsPerToken, cfg.MaxStreams, m.StreamsRefused),
		fullSyncSlots: make(chan struct{}, cfg.MaxFullSyncs),
	}
}

// Request is one stream's parameters.
type Request struct {
	Region   string
	Identity string
	Cursor   uint64 // last bookmark's resume_version; 0 for a full sync
	// Batches: the client takes a full sync's pages as batch events
	// (rpc.Batch), a message a page instead of one a resource.
	Batches bool
	// AdmitAgent, if set, is called when the agent has no record yet,
	// once the stream itself is admitted: it decides whether the agent
	// may have one and writes it, connected to connectedTo since since;
	// its error ends the stream. Unset, any agent may.
	AdmitAgent func(ctx context.Context, connectedTo string, since time.Time) error
	// Accepted, if set, is called once the stream is accepted (admitted,
	// its connection recorded), before anything is sent; its error ends
	// the stream.
	Accepted func() error
}

// Send delivers one event to the client.
type Send func(*ctrlv1.DeploymentChangeEvent) error

// outcome is why following the tailer stopped.
type outcome int

const (
	outcomeDone   outcome = iota // context ended
	outcomePaused                // the region was paused
	outcomeResync                // an operator forced a resync
)

// Serve streams the region's changes until ctx ends, the client must
// resync, or an error occurs. Streams beyond the limits are refused with
// ResourceExhausted before any database work; a client that reads nothing
// for the send timeout gets an ErrFellBehind.
func (s *Streamer) Serve(ctx context.Context, req Request, send Send) error {
	release, err := s.admission.admit(ctx)
	if err != nil {
		return err
	}
	defer release()
	// Whatever of this stream's connection was written is cleared when it
	// ends, after a failed start too (an admission decided after its
	// client went away still writes the record), and after a panic in
	// admit: so the deferred call is in place before admit runs, and
	// admit sets since before its first write.
	var since time.Time
	defer func() {
		if !since.IsZero() {
			s.disconnected(req, since)
		}
	}()
	err = aside(func() error { return s.admit(ctx, req, &since) })
	if err != nil {
		return err
	}
	if req.Accepted != nil {
		if err := req.Accepted(); err != nil {
			return err
		}
	}
	s.metrics.Streams.WithLabelValues(req.Region).Inc()
	defer s.metrics.Streams.WithLabelValues(req.Region).Dec()
	defer s.connections.hold(&connection{region: req.Region, identity: req.Identity, since: since})()

	// The outbox's sender ends by itself once its queue is empty, or when
	// its send fails, as every send does once the handler has returned.
	// A client that takes no data for the send timeout while events wait
	// ends the handler's context, wherever the handler waits, with a
	// *stallError as the cause.
	ctx, endStream := context.WithCancelCause(ctx)
	defer endStream(nil)
	out := newOutbox(ctx, endStream, send, s.cfg.SendTimeout, s.guard)
	st := &state{req: req, send: out.send, clientCursor: req.Cursor, bookmarked: req.Cursor}
	err = s.serve(ctx, st)
	var stall *stallError
	if !errors.As(context.Cause(ctx), &stall) {
		// What is queued still goes out before the handler returns: the
		// last event may be a resync_required.
		if ferr := out.flush(); err == nil {
			err = ferr
		}
	}
	if errors.As(context.Cause(ctx), &stall) {
		// Whatever the handler was doing when the stall ended its
		// context, the stall is why the stream ends.
		err = stall
		s.metrics.StalledStreams.WithLabelValues(req.Region).Inc()
		s.log.Warn("stream: ending a stream whose client does not read, and closing its connection",
			"region", req.Region, "agent", req.Identity, "send_timeout", stall.timeout, "pending_events", stall.pending)
		// What the stream handed gRPC stays queued after the handler
		// returns, with the stream's end behind it, for as long as the
		// client reads nothing: up to an event (a MiB) per ended stream,
		// which a client could pile up without bound while the token's
		// stream limit, released now, let it open more. Closed, the
		// connection takes it all; the agent dials again.
		closeConnection(ctx)
	}
	return err
}

// admit checks that the region exists and that its agent may have a
// record, and records the stream's connection as of *since, which it sets
// before it writes (left zero when it wrote nothing).
//
// The region is looked up in the tailer's copy of the regions table, read
// every ControlInterval; only a region it did not find (registered since,
// or gone) costs a statement. A known agent's record is then updated in
// place, one statement: the agents that reconnect (all of them, after a
// ctrld restart) take no lock and no transaction. Only an identity with no
// record goes through AdmitAgent, which counts the region's records under
// a lock (cluster.admitAgent).
func (s *Streamer) admit(ctx context.Context, req Request, since *time.Time) error {
	if !s.tailer.KnowsRegion(req.Region) {
		if exists, err := s.client.Region.Query().Where(region.ID(req.Region)).Exist(ctx); err != nil {
			return err
		} else if !exists {
			return fmt.Errorf("%w %q", ErrUnknownRegion, req.Region)
		}
	}
	// The database's clock, as the rollout driver compares it with a
	// region's bake (a stream that connected since may have missed what
	// happened before): to the microsecond, the column's precision.
	at, err := store.Now(ctx, s.db)
	if err != nil {
		return fmt.Errorf("record agent connection: %w", err)
	}
	*since = at
	// connected_since always changes, so a record that exists is always
	// counted as updated.
	n, err := s.client.Agent.Update().
		Where(entagent.Region(req.Region), entagent.Identity(req.Identity)).
		SetConnectedTo(s.cfg.Instance).SetConnectedSince(at).
		Save(ctx)
	if err != nil {
		return fmt.Errorf("record agent connection: %w", err)
	}
	if n > 0 {
		return nil
	}
	if req.AdmitAgent != nil {
		return req.AdmitAgent(ctx, s.cfg.Instance, at)
	}
	return s.connected(ctx, req, at)
}

// serve runs st's stream until it ends.
func (s *Streamer) serve(ctx context.Context, st *state) error {
	for {
		result, err := s.serveSubscribed(ctx, st)
		if err != nil || result == outcomeDone {
			return err
		}
		if result == outcomeResync {
			return st.send(resyncRequired("an operator forced a resync of region " + st.req.Region))
		}
		if err := s.waitUnpaused(ctx, st.req.Region); err != nil {
			return err
		}
		// Resume from the last bookmark: everything after it is sent again.
		st.clientCursor = st.bookmarked
	}
}

// state is what one stream has told its client so far.
type state struct {
	req  Request
	send Send
	// clientCursor: the client has every change at or below it.
	clientCursor uint64
	// bookmarked is the last resume version sent.
	bookmarked uint64
	// seen is the highest tailer watermark this stream has processed.
	seen uint64
	// generation is the region's resync generation this stream honours.
	generation int64
	// control is the region's control state as last seen.
	control tailer.RegionControl
	// heldBack: a pause during the full sync held live changes back.
	heldBack bool
}

// serveSubscribed serves st from one new subscription, released however
// serving ends (a panic included, which the server recovers from: the
// tailer must not keep feeding a subscription nobody reads, I8).
func (s *Streamer) serveSubscribed(ctx context.Context, st *state) (outcome, error) {
	sub, err := s.tailer.Subscribe(ctx, st.req.Region)
	if err != nil {
		return outcomeDone, err
	}
	defer sub.Close()
	return s.serveOnce(ctx, sub, st)
}

// takeFullSyncSlot waits for one of the MaxFullSyncs slots, for reading
// one page, and returns its release.
func (s *Streamer) takeFullSyncSlot(ctx context.Context) (release func(), err error) {
	release = func() { <-s.fullSyncSlots }
	select {
	case s.fullSyncSlots <- struct{}{}:
		return release, nil
	default:
	}
	s.metrics.FullSyncsWaiting.Inc()
	defer s.metrics.FullSyncsWaiting.Dec()
	select {
	case s.fullSyncSlots <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// controlOutcome says whether the last seen control state stops the stream.
func (st *state) controlOutcome() outcome {
	switch {
	case st.control.Paused:
		return outcomePaused
	case st.control.ResyncGeneration > st.generation:
		return outcomeResync
	}
	return outcomeDone
}

// serveOnce serves st from sub.
func (s *Streamer) serveOnce(ctx context.Context, sub *tailer.Subscription, st *state) (outcome, error) {
	if sub.Control.Paused {
		return outcomePaused, nil
	}
	st.control = sub.Control
	var result outcome
	var caughtUp bool
	err := aside(func() (err error) {
		result, caughtUp, err = s.bringUpToDate(ctx, sub, st)
		return err
	})
	if err != nil || !caughtUp {
		return result, err
	}
	return s.follow(ctx, sub, st)
}

// bringUpToDate sends st's client what it lacks up to the subscription's
// watermark: a full sync, or the changes after its cursor. caughtUp is
// false when the stream must stop instead, result says why.
func (s *Streamer) bringUpToDate(ctx context.Context, sub *tailer.Subscription, st *state) (result outcome, caughtUp bool, err error) {
	if st.clientCursor == 0 {
		if err := s.fullSync(ctx, sub, st); err != nil {
			return outcomeDone, false, err
		}
		// Control may have changed while the snapshot streamed; changes
		// held back by a pause are caught up from the database.
		if result := st.controlOutcome(); result != outcomeDone {
			return result, false, nil
		}
		if st.heldBack {
			st.heldBack = false
			return outcomePaused, false, nil
		}
		return outcomeDone, true, nil
	}
	st.generation = sub.Control.ResyncGeneration
	if reason, err := s.mustResync(ctx, st); err != nil || reason != "" {
		if err == nil {
			err = st.send(resyncRequired(reason))
		}
		return outcomeDone, false, err
	}
	if err := s.catchUp(ctx, sub, st); err != nil {
		if errors.Is(err, errCursorTooOld) {
			err = st.send(resyncRequired(fmt.Sprintf("cursor %d: retention deleted changes while they were being sent", st.clientCursor)))
		}
		return outcomeDone, false, err
	}
	return outcomeDone, true, nil
}

// mustResync says why a resuming client cannot be served incrementally:
// retention deleted changes it has not seen (I5), its cursor is from
// another history, or it skipped a resync an operator forced.
func (s *Streamer) mustResync(ctx context.Context, st *state) (string, error) {
	floor, err := changelog.ReadMark(ctx, s.db, changelog.MarkCleanupFloor)
	if err != nil {
		return "", err
	}
	if st.clientCursor < floor {
		return fmt.Sprintf("cursor %d predates the retained changes (retention deleted up to %d)", st.clientCursor, floor), nil
	}
	// A cursor beyond every version this database issued comes from another
	// history (a restore from backup, a failover that lost transactions):
	// the changes written since then have lower versions and would be
	// filtered out as already seen. Every cursor a replica sent is at most
	// its watermark, whose row retention keeps or whose value is persisted.
	newest, err := changelog.NewestVersion(ctx, s.db)
	if err != nil {
		return "", err
	}
	if st.clientCursor > newest {
		return fmt.Sprintf("cursor %d is ahead of this database's newest version %d (restored or failed over?)", st.clientCursor, newest), nil
	}
	// Only the column needed: Ent reads acked_cursor through a signed
	// integer, and a stored value at or above 2^63 must not fail resumes.
	generations, err := s.client.Agent.Query().
		Where(entagent.Region(st.req.Region), entagent.Identity(st.req.Identity)).
		Select(entagent.FieldSyncedGeneration).Ints(ctx)
	if err != nil {
		return "", err
	}
	var synced int64
	if len(generations) > 0 {
		synced = int64(generations[0])
	}
	// The subscription's copy of the region's control: a resync forced
	// after the tailer read it reaches this stream as the next notice.
	if synced < st.generation {
		return "an operator forced a resync of region " + st.req.Region, nil
	}
	return "", nil
}

// catchUp sends the region's changes in (clientCursor, W] from the
// database, then the tailer's early changes, then a bookmark.
func (s *Streamer) catchUp(ctx context.Context, sub *tailer.Subscription, st *state) error {
	from, to := st.clientCursor, sub.Watermark
	for from < to {
		rows, err := s.changesBetween(ctx, st.req.Region, from, to)
		if err != nil {
			return err
		}
		if err := s.sendChanges(ctx, st, rows); err != nil {
			return err
		}
		if len(rows) < s.cfg.PageSize {
			break
		}
		from = rows[len(rows)-1].Version
	}
	if err := s.sendChanges(ctx, st, sub.Early); err != nil {
		return err
	}
	// Retention may have emptied part of the range while it was read; a
	// bookmark now would claim changes nobody sent.
	if floor, err := changelog.ReadMark(ctx, s.db, changelog.MarkCleanupFloor); err != nil {
		return err
	} else if st.clientCursor < floor {
		return errCursorTooOld
	}
	st.seen = sub.Watermark
	return s.bookmark(st, false)
}

// errCursorTooOld: retention deleted changes the client has not seen.
var errCursorTooOld = errors.New("cursor predates the retained changes")

// changesBetween reads one page of the region's changes in (from, to].
// Every pk in that range is settled, so a plain read sees them all.
func (s *Streamer) changesBetween(ctx context.Context, region string, from, to uint64) ([]changelog.Change, error) {
	return changelog.InRegion(ctx, s.db, region, from, to, s.cfg.PageSize)
}

// maxNoticesPerRelay bounds the notices one relay loads the state of.
const maxNoticesPerRelay = 64

// follow relays the tailer's notices until ctx ends or control says stop.
func (s *Streamer) follow(ctx context.Context, sub *tailer.Subscription, st *state) (outcome, error) {
	keepAlive := time.NewTicker(s.cfg.KeepAlive)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			return outcomeDone, nil
		case <-keepAlive.C:
			if err := st.send(bookmark(st.bookmarked, false)); err != nil {
				return outcomeDone, err
			}
		case <-sub.Ready():
			// Whatever waits, up to a bound, makes one state load.
			notices, ok := sub.Take(maxNoticesPerRelay)
			if !ok {
				return outcomeDone, sub.Err()
			}
			if len(notices) == 0 {
				continue
			}
			var result outcome
			err := aside(func() (err error) { result, err = s.relay(ctx, st, notices); return err })
			if err != nil || result != outcomeDone {
				return result, err
			}
		}
	}
}

// relay sends the changes of notices and then a bookmark; it returns
// outcomePaused or outcomeResync when control says so.
func (s *Streamer) relay(ctx context.Context, st *state, notices []tailer.Notice) (outcome, error) {
	var changes []changelog.Change
	for _, n := range notices {
		st.control = n.Control
		if result := st.controlOutcome(); result != outcomeDone {
			return result, nil
		}
		changes = append(changes, n.Changes...)
		st.seen = max(st.seen, n.Watermark)
	}
	if err := s.sendChanges(ctx, st, changes); err != nil {
		return outcomeDone, err
	}
	return outcomeDone, s.bookmark(st, false)
}

// sendChanges loads and sends events for changes the client has not seen.
func (s *Streamer) sendChanges(ctx context.Context, st *state, changes []changelog.Change) error {
	fresh := changes[:0:0]
	for _, c := range changes {
		if c.Version > st.clientCursor {
			fresh = append(fresh, c)
		}
	}
	events, err := loadEvents(ctx, s.client, st.req.Region, fresh)
	if err != nil {
		return err
	}
	return s.sendEvents(st, events)
}

func (s *Streamer) sendEvents(st *state, events []*ctrlv1.DeploymentChangeEvent) error {
	for _, ev := range events {
		if err := st.send(ev); err != nil {
			return err
		}
		s.metrics.EventsSent.WithLabelValues(st.req.Region, eventKind(ev)).Inc()
	}
	return nil
}

// maxBatchBytes bounds a batch's events as they would be sent alone: a
// quarter of the message limit, as a resource is at most (a resource that
// large is a batch of its own), so that a batch always fits a message.
const maxBatchBytes = limits.MaxResourceBytes

// sendPage sends a full-sync page of one kind's events, all versioned v:
// as batches to a client that takes them, else one by one. Batch or not,
// each resource counts as an event of its kind.
func (s *Streamer) sendPage(st *state, kind string, v uint64, events []*ctrlv1.DeploymentChangeEvent) error {
	if !st.req.Batches {
		for _, ev := range events {
			ev.Version = v
		}
		return s.sendEvents(st, events)
	}
	n := len(events)
	for _, b := range rpc.Batch(v, events, maxBatchBytes) {
		if err := st.send(b); err != nil {
			return err
		}
	}
	s.metrics.EventsSent.WithLabelValues(st.req.Region, kind).Add(float64(n))
	return nil
}

// bookmark sends the highest settled version the stream has caught up to,
// if it moved.
func (s *Streamer) bookmark(st *state, fullSyncDone bool) error {
	v := max(st.seen, st.clientCursor)
	if v <= st.bookmarked && !fullSyncDone {
		return nil
	}
	if err := st.send(bookmark(v, fullSyncDone)); err != nil {
		return err
	}
	st.bookmarked = v
	s.metrics.EventsSent.WithLabelValues(st.req.Region, "bookmark").Inc()
	return nil
}

// waitUnpaused blocks until the region is no longer paused.
func (s *Streamer) waitUnpaused(ctx context.Context, region string) error {
	for {
		resumed, err := s.watchPause(ctx, region)
		if resumed || err != nil {
			return err
		}
	}
}

// watchPause follows one subscription while the region stays paused. It
// returns resumed=false, and no error, when the tailer dropped the
// subscription for not reading (nobody reads while paused): look again.
func (s *Streamer) watchPause(ctx context.Context, region string) (resumed bool, err error) {
	sub, err := s.tailer.Subscribe(ctx, region)
	if err != nil {
		return false, err
	}
	defer sub.Close()
	for paused := sub.Control.Paused; paused; {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-sub.Ready():
			notices, ok := sub.Take(maxNoticesPerRelay)
			if !ok {
				if err := sub.Err(); !errors.Is(err, tailer.ErrSlowSubscriber) {
					return true, err
				}
				return false, nil
			}
			if len(notices) > 0 {
				paused = notices[len(notices)-1].Control.Paused
			}
		}
	}
	return true, nil
}

// connected records in the agents table (actual state: no change rows)
// that this process holds the agent's stream since since, the stream's own
// mark for disconnected; it writes the agent's record if there is none.
func (s *Streamer) connected(ctx context.Context, req Request, since time.Time) error {
	err := s.client.Agent.Create().
		SetRegion(req.Region).SetIdentity(req.Identity).
		SetConnectedTo(s.cfg.Instance).SetConnectedSince(since).
		OnConflictColumns(entagent.FieldRegion, entagent.FieldIdentity).
		Update(func(u *ent.AgentUpsert) { u.UpdateConnectedTo().UpdateConnectedSince().UpdateUpdatedAt() }).
		Exec(ctx)
	if err != nil {
		return fmt.Errorf("record agent connection: %w", err)
	}
	return nil
}

// disconnected clears the connection record if it is still this stream's:
// an agent that reconnected (to this process or another) before the old
// stream was noticed gone keeps its newer record.
func (s *Streamer) disconnected(req Request, since time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.client.Agent.Update().
		Where(entagent.Region(req.Region), entagent.Identity(req.Identity),
			entagent.ConnectedTo(s.cfg.Instance), entagent.ConnectedSince(since)).
		SetConnectedTo("").ClearConnectedSince().Exec(ctx)
	if err != nil {
		s.log.Warn("stream: recording the agent's disconnect failed", "region", req.Region, "agent", req.Identity, "err", err)
	}
}

// recordSyncedGeneration stores which forced-resync generation the agent's
// full sync honoured. When the agent finished it (its garbage collection
// included) is the agent's to say, in its status reports: ctrld only knows
// it sent the last page.
func (s *Streamer) recordSyncedGeneration(ctx context.Context, req Request, generation int64) error {
	// A region never forced to resync has nothing to record (a record's
	// synced generation starts at 0, and mustResync only asks whether it
	// is below the region's): a write per stream start saved.
	if generation == 0 {
		return nil
	}
	return s.client.Agent.Update().
		Where(entagent.Region(req.Region), entagent.Identity(req.Identity)).
		SetSyncedGeneration(generation).
		Exec(ctx)
}

// eventKind labels an event in metrics: its resource's kind, or what else
// it is.
func eventKind(ev *ctrlv1.DeploymentChangeEvent) string {
	if r, _, ok := rpc.ResourceOf(ev); ok {
		return r.Kind
	}
	switch ev.Event.(type) {
	case *ctrlv1.DeploymentChangeEvent_Bookmark:
		return "bookmark"
	case *ctrlv1.DeploymentChangeEvent_ResyncRequired:
		return "resync_required"
	}
	return "unknown"
}
