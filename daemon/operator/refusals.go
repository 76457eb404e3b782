package operator

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/internal/validate"
)

// DefaultRefusalWindow is how long identical operator writes that
// authentication refused are gathered into one audit record, by default.
const DefaultRefusalWindow = 10 * time.Second

// refusalKinds bounds the distinct refusals one window gathers (a token,
// a method, a reason each). Only known tokens are gathered, which
// operators issue, so real traffic stays far below it; past it refusals
// are counted and logged, not recorded one by one.
const refusalKinds = 1024

// refusalBatch is how many gathered records one INSERT writes: a record
// is up to about 9 KiB (two 4 KiB columns), and a statement must stay
// well within max_allowed_packet.
const refusalBatch = 100

// refusalKey is what makes two refusals identical.
type refusalKey struct{ token, method, reason string }

// gathered is one audit record in the making, with how many identical
// refusals it stands for.
type gathered struct {
	record      auditRecord
	count       int
	first, last time.Time
}

// refusalLog gathers the operator writes authentication refused, in
// memory, for one window at a time: a refusal costs its caller a map
// update under a mutex, never a database write or a wait. Each window's
// records are written together, one row per kind of refusal with its
// count and its first and last time (FlushRefusals), so however fast a
// leaked agent token calls, the audit log grows by at most one row per
// token, method and reason each window. A hot row updated in place (an
// upsert of a count) would cost a write per call instead, and on a Galera
// cluster replicas writing the same row through different nodes would
// fail each other's certification; these rows are only inserted, each by
// the replica that saw its refusals.
//
// A replica that stops writes what it gathered (server.Stop); one that
// crashes loses up to one window of refusals, which its log still shows
// (the first of each kind is logged when it happens).
type refusalLog struct {
	mu       sync.Mutex
	byKey    map[refusalKey]*gathered
	overflow int // refusals past refusalKinds this window
	// anonymous counts the writes refused without a valid token, by
	// method and reason: those are only logged, since anyone who can
	// reach the port could send them.
	anonymous map[refusalKey]int
}

// AuditRefusal puts on record an operator write, or a read of logs, that
// authentication refused before it reached the service (auth.Authenticator's
// OnOperatorRefusal). A known caller (a token of another kind, such as an
// agent's; a read-only key; a token or key without the logs grant) leaves an
// audit record under its name, one per kind of refusal and window
// (refusalLog). A call with no valid token is only logged, once per
// method and window with its count: anyone who can reach the port could
// send those, and must not be able to fill the database, or the log, with
// them.
func (s *Service) AuditRefusal(ctx context.Context, r auth.Refusal) {
	if auth.IsRead(r.Method) {
		return // reads are not audited
	}
	method := r.Method[strings.LastIndex(r.Method, "/")+1:]
	reason := status.Convert(r.Err).Message()
	now := time.Now().UTC()
	if r.TokenName == "" {
		if s.refusals.countAnonymous(refusalKey{method: method, reason: reason}) {
			s.log.Warn("operator: refused a write without a valid token; more like it are counted until the next audit flush", "method", method, "err", reason)
		}
		return
	}
	key := refusalKey{token: cmp.Or(r.TokenID, r.TokenName), method: method, reason: reason}
	if s.refusals.count(key, now, nil) {
		return
	}
	// The first of its kind this window: its record, the request's detail
	// marshalled, is made outside the lock every refused call takes.
	why := reason
	if r.TokenID != "" {
		why += " (" + r.TokenID + ")"
	}
	record := auditRecord{actor: validate.Clip(r.TokenName, auditNameLen), action: validate.Clip(method, auditNameLen),
		error: validate.Clip(why, auditTextLen)}
	if req, ok := r.Request.(proto.Message); ok {
		record.detail = auditDetail(req) // the first attempt's
	}
	if s.refusals.count(key, now, &record) {
		return // another call of its kind came first meanwhile
	}
	s.log.Warn("operator: refused a write by a token of another kind; more like it are counted into one audit record",
		"method", method, "token", record.actor, "token_id", r.TokenID, "err", reason)
}

// countAnonymous counts a refusal without a valid token under key and
// reports whether it is the first of its kind this window (to be logged).
func (l *refusalLog) countAnonymous(key refusalKey) (first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.anonymous == nil {
		l.anonymous = map[refusalKey]int{}
	}
	if _, seen := l.anonymous[key]; !seen && len(l.anonymous) >= refusalKinds {
		l.overflow++
		return false
	}
	l.anonymous[key]++
	return l.anonymous[key] == 1
}

// count adds a refusal at now to key's record and reports true when key
// had one, or when the log is full (the refusal is then only counted as
// overflow). Otherwise, with a record, it starts key's with it and reports
// false; without one it changes nothing and reports false.
func (l *refusalLog) count(key refusalKey, now time.Time, record *auditRecord) (done bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if g := l.byKey[key]; g != nil {
		g.count++
		g.last = now
		return true
	}
	if len(l.byKey) >= refusalKinds {
		l.overflow++
		return true
	}
	if record == nil {
		return false
	}
	if l.byKey == nil {
		l.byKey = map[refusalKey]*gathered{}
	}
	l.byKey[key] = &gathered{record: *record, count: 1, first: now, last: now}
	return false
}

// RunRefusalAudit writes the refusals gathered (AuditRefusal) every window
// until ctx ends. What is gathered after its last round is written by a
// last FlushRefusals, once no call can add to it (server.Stop).
func (s *Service) RunRefusalAudit(ctx context.Context, window time.Duration) {
	t := time.NewTicker(cmp.Or(window, DefaultRefusalWindow))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.FlushRefusals(ctx)
		}
	}
}

// FlushRefusals writes the refusals gathered since the last flush, a row
// per kind with its count, within auditTimeout. Records the database
// refuses are logged in full at error level, as audit does.
func (s *Service) FlushRefusals(ctx context.Context) {
	l := &s.refusals
	l.mu.Lock()
	byKey, anonymous, overflow := l.byKey, l.anonymous, l.overflow
	l.byKey, l.anonymous, l.overflow = nil, nil, 0
	l.mu.Unlock()

	for key, n := range anonymous {
		if n > 1 {
			s.log.Warn("operator: refused writes without a valid token", "method", key.method, "count", n, "err", key.reason)
		}
	}
	if overflow > 0 {
		s.log.Error(fmt.Sprintf("operator: refused writes of more than %d kinds in one window; these were only counted", refusalKinds), "count", overflow)
	}
	records := make([]*gathered, 0, len(byKey))
	for _, g := range byKey {
		records = append(records, g)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	for start := 0; start < len(records); start += refusalBatch {
		batch := records[start:min(start+refusalBatch, len(records))]
		creates := make([]*ent.AuditLogCreate, len(batch))
		for i, g := range batch {
			r := g.record
			creates[i] = s.client.AuditLog.Create().SetActor(r.actor).SetAction(r.action).SetTarget(r.target).
				SetDetail(r.detail).SetError(r.error).SetCreatedAt(g.first).SetCount(g.count)
			if g.count > 1 {
				creates[i].SetLastSeenAt(g.last)
			}
		}
		if err := s.client.AuditLog.CreateBulk(creates...).Exec(ctx); err != nil {
			for _, g := range batch {
				r := g.record
				s.log.Error(auditLost(err), "actor", r.actor, "action", r.action, "target", r.target, "detail", r.detail, "error", r.error,
					"count", g.count, "first", g.first, "last", g.last, "err", err)
			}
		}
	}
}
