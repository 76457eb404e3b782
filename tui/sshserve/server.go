package sshserve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/ssh"
	"charm.land/wish/v2"
	wishrecover "charm.land/wish/v2/recover"
	"github.com/charmbracelet/colorprofile"
	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/time/rate"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
	"github.com/deploysync/deploysync/tui/cmdline"
)

// Identity is the person a registered key belongs to.
type Identity struct {
	Name     string
	ReadOnly bool
	// Logs: the key may read pods' logs (ctrld operator add-key --logs).
	Logs bool
}

// Keys looks up registered keys by their SHA256 fingerprint ("SHA256:…").
type Keys interface {
	// Find returns the key's owner; ok is false when it is not
	// registered, err only for a failed lookup.
	Find(ctx context.Context, fingerprint string) (_ Identity, ok bool, err error)
	// Live returns the owners of the keys among fingerprints that are
	// still registered.
	Live(ctx context.Context, fingerprints []string) (map[string]Identity, error)
}

// Console opens a session's way to ctrld's operator service.
type Console interface {
	// Open returns an operator client acting for who, holding the key
	// fingerprint, connected from remoteAddr, for as long as the session
	// lasts; close ends it (its credential dies with it).
	Open(who Identity, fingerprint, remoteAddr string) (op ctrlv1.OperatorServiceClient, reconnect func(), close func(), err error)
}

// Config is the SSH front door's configuration. Zero fields take the
// defaults in Defaults.
type Config struct {
	// Listen is the SSH address, e.g. ":2222".
	Listen string
	// HostKeyFile holds the server's private host key;
	// GenerateHostKey creates it (ed25519) when missing (dev stack).
	HostKeyFile     string
	GenerateHostKey bool
	// IdleTimeout ends a session whose person typed nothing for this
	// long; MaxSessionTime ends any session after this long.
	IdleTimeout, MaxSessionTime time.Duration
	// MaxSessionsPerKey and MaxSessions bound open sessions.
	MaxSessionsPerKey, MaxSessions int
	// AuthPerSecond and AuthBurst limit failed authentication attempts
	// (each key a client offers that is not registered is one) per source
	// address (IPv6 by /64); see authLimiter.
	AuthPerSecond float64
	AuthBurst     int
	// MaxUnauthenticated and MaxUnauthenticatedPerAddress bound the
	// connections that run no session yet (handshake, authentication),
	// in all and per source address (IPv6 by /64); a connection beyond
	// them is closed at once. AuthTimeout is how long such a connection
	// may take to start a session, and how long a connection whose last
	// session ended stays open.
	MaxUnauthenticated, MaxUnauthenticatedPerAddress int
	AuthTimeout                                      time.Duration
	// Recheck is how often live sessions' keys are checked again: a
	// removed key's sessions end within it.
	Recheck time.Duration
	// Refresh is the console's poll interval.
	Refresh time.Duration
	// KeysPerSecond and KeyBurst bound the input events (keys, pastes,
	// mouse events) a console session takes; beyond them they are
	// dropped. Each event costs the console an update and a redraw.
	KeysPerSecond float64
	KeyBurst      int
}

// Defaults are the zero fields' values.
var Defaults = Config{
	IdleTimeout:       30 * time.Minute,
	MaxSessionTime:    12 * time.Hour,
	MaxSessionsPerKey: 4,
	MaxSessions:       200,
	AuthPerSecond:     1,
	AuthBurst:         10,
	Recheck:           2 * time.Second,
	Refresh:           time.Second,
	// A real client authenticates in well under a second; the bounds
	// only need to hold the logins in flight during a flood.
	MaxUnauthenticated:           64,
	MaxUnauthenticatedPerAddress: 16,
	AuthTimeout:                  10 * time.Second,
	// A person types a few keys a second, a held key repeats at about
	// 30; a paste of raw keystrokes is what goes beyond.
	KeysPerSecond: 50,
	KeyBurst:      200,
}

// maxChannelsPerConn bounds the session channels open on one connection,
// as OpenSSH's MaxSessions (10) does.
const maxChannelsPerConn = 10

// maxEnv bounds the variables a session keeps.
const maxEnv = 8

// inputCounts are the input events of all console sessions: seen, and
// passed on to their consoles.
type inputCounts struct{ seen, passed atomic.Int64 }

// keyLookupsAtOnce bounds concurrent registry lookups for authentication:
// they share ctrld's database pool with everything else (I8).
const keyLookupsAtOnce = 4

func (c *Config) fill() {
	d := Defaults
	set := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&c.IdleTimeout, d.IdleTimeout)
	set(&c.MaxSessionTime, d.MaxSessionTime)
	set(&c.Recheck, d.Recheck)
	set(&c.Refresh, d.Refresh)
	set(&c.AuthTimeout, d.AuthTimeout)
	if c.MaxUnauthenticated <= 0 {
		c.MaxUnauthenticated = d.MaxUnauthenticated
	}
	if c.MaxUnauthenticatedPerAddress <= 0 {
		c.MaxUnauthenticatedPerAddress = d.MaxUnauthenticatedPerAddress
	}
	if c.MaxSessionsPerKey <= 0 {
		c.MaxSessionsPerKey = d.MaxSessionsPerKey
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = d.MaxSessions
	}
	if c.AuthPerSecond <= 0 {
		c.AuthPerSecond = d.AuthPerSecond
	}
	if c.AuthBurst <= 0 {
		c.AuthBurst = d.AuthBurst
	}
	if c.KeysPerSecond <= 0 {
		c.KeysPerSecond = d.KeysPerSecond
	}
	if c.KeyBurst <= 0 {
		c.KeyBurst = d.KeyBurst
	}
}

// Server is a running SSH front door.
type Server struct {
	cfg     Config
	keys    Keys
	console Console
	log     *slog.Logger
	ssh     *ssh.Server
	lis     net.Listener
	limiter *authLimiter
	known   *registered
	counts  *sessionCounts
	gate    *connGate
	lookups *keyLookups
	windows sync.Map // a session (ssh.Session) with a terminal → its *windowDrain
	input   inputCounts
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu   sync.Mutex
	live map[*liveSession]struct{}
}

// liveSession is an open session as the re-check sees it.
type liveSession struct {
	fingerprint string
	who         Identity
	end         context.CancelCauseFunc
}

// Errors a session ends with, shown to the person.
var (
	errKeyRemoved = errors.New("your key was removed or its role changed: session ended")
	errIdle       = errors.New("idle for too long: session ended")
	errMaxTime    = errors.New("the session reached its maximum time: session ended")
)

// Start listens on cfg.Listen and serves until Stop.
func Start(ctx context.Context, cfg Config, keys Keys, console Console, log *slog.Logger) (*Server, error) {
	cfg.fill()
	hostKey, err := loadHostKey(cfg.HostKeyFile, cfg.GenerateHostKey)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, keys: keys, console: console, log: log,
		limiter: newAuthLimiter(cfg.AuthPerSecond, cfg.AuthBurst, 10000),
		known:   newRegistered(10000),
		counts:  &sessionCounts{perKey: cfg.MaxSessionsPerKey, total: cfg.MaxSessions, byKey: map[string]int{}},
		gate:    newConnGate(cfg.MaxUnauthenticated, cfg.MaxUnauthenticatedPerAddress, cfg.AuthTimeout),
		lookups: newKeyLookups(keyLookupsAtOnce),
		live:    map[*liveSession]struct{}{}}
	s.ssh, err = wish.NewServer(
		func(srv *ssh.Server) error {
			srv.AddHostKey(hostKey)
			return nil
		},
		ssh.EmulatePty(),
		// Public keys only: with no password or keyboard-interactive
		// handler, x/crypto/ssh offers no other method.
		wish.WithPublicKeyAuth(s.authenticate),
		wish.WithVersion("deploysync"),
		// A panic in a session ends that session (its defers revoke its
		// credential), logged, not ctrld.
		wish.WithMiddleware(wishrecover.MiddlewareWithLogger(panicLog{log}, func(ssh.Handler) ssh.Handler { return s.handle })),
	)
	if err != nil {
		return nil, err
	}
	// What OpenSSH offers, without SHA-1 (algorithms.go).
	s.ssh.ServerConfigCallback = func(ssh.Context) *gossh.ServerConfig { return serverConfig() }
	// Session channels within their bounds, their requests filtered
	// (channels.go); no other kind of channel.
	s.ssh.ChannelHandlers = map[string]ssh.ChannelHandler{"session": s.sessionChannel}
	s.ssh.HandshakeTimeout = cfg.AuthTimeout
	s.ssh.PtyHandler = s.drainWindows(s.ssh.PtyHandler)
	s.ssh.ConnCallback = s.admitConn
	// A backstop: the sessions end themselves at MaxSessionTime, with
	// the reason on screen; no connection outlives that by much.
	// (Saturated: a caller's huge maximum must not overflow to a
	// negative, that is no, backstop.)
	s.ssh.MaxTimeout = cfg.MaxSessionTime + time.Minute
	if s.ssh.MaxTimeout < cfg.MaxSessionTime {
		s.ssh.MaxTimeout = cfg.MaxSessionTime
	}
	s.lis, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("SSH listen on %s: %w", cfg.Listen, err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.wg.Go(func() {
		if err := s.ssh.Serve(s.lis); err != nil && !errors.Is(err, ssh.ErrServerClosed) {
			log.Error("ssh: server stopped", "err", err)
		}
	})
	s.wg.Go(func() { s.recheck(runCtx) })
	log.Info("ssh console serving", "listen", s.Addr())
	return s, nil
}

// Addr is the listener's address.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Stop closes the listener and every session.
func (s *Server) Stop() {
	s.cancel()
	s.ssh.Close()
	// Close forgets a listener Serve has not registered yet (a Stop
	// right after Start): close it here too, or Serve would wait on it.
	s.lis.Close()
	s.wg.Wait()
}

// authenticate admits a key that is registered. Unknown keys are charged
// to the source address's budget; from an address whose budget is spent
// only keys found registered before are looked up (see authLimiter). It
// only answers "may this key log in": who the session is for is looked up
// again from the session's own key (handle).
func (s *Server) authenticate(ctx ssh.Context, key ssh.PublicKey) bool {
	addr := addrKey(ctx.RemoteAddr())
	fp := gossh.FingerprintSHA256(key)
	done, within := s.limiter.begin(addr, time.Now())
	if err := weakKey(key); err != nil {
		// Whatever the registry holds; charged as a failure, so that
		// the log lines are bounded as the lookups are.
		done(true)
		if within {
			s.log.Warn("ssh: a key too weak to log in with was offered; refused", "remote", ctx.RemoteAddr().String(), "fingerprint", fp, "err", err)
		}
		return false
	}
	if !within && !s.known.seen(fp) {
		s.log.Warn("ssh: failed authentication attempts over the limit; refused", "remote", ctx.RemoteAddr().String(), "fingerprint", fp)
		return false
	}
	_, ok, err := s.findKey(ctx, fp)
	done(err == nil && !ok) // a failed lookup is nobody's attempt
	if err != nil {
		s.log.Warn("ssh: key lookup failed; refused", "fingerprint", fp, "err", err)
		return false
	}
	if ok {
		s.known.note(fp)
	}
	return ok
}

// findKey looks fp up in the registry, a few lookups at once (keyLookups),
// waiting for a slot and the answer at most AuthTimeout: while the
// database hangs, lookups give up rather than hold the slots for ever.
func (s *Server) findKey(ctx context.Context, fp string) (Identity, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AuthTimeout)
	defer cancel()
	return s.lookups.find(ctx, func() (Identity, bool, error) { return s.keys.Find(ctx, fp) }, fp)
}

// gatedConnKey is where a connection's *gatedConn sits in its context.
type gatedConnKey struct{}

// admitConn lets a new connection in within the gate's bounds, or closes
// it at once.
func (s *Server) admitConn(ctx ssh.Context, c net.Conn) net.Conn {
	gc := s.gate.admit(c)
	if gc == nil {
		s.log.Warn("ssh: too many connections not yet in a session; closed a new one", "remote", c.RemoteAddr().String())
		return nil
	}
	ctx.SetValue(gatedConnKey{}, gc)
	return gc
}

// handle runs one session: the console, for the person whose key the
// session authenticated with.
func (s *Server) handle(sess ssh.Session) {
	// The terminal as the pty request gave it (its window changes come
	// through drain.resized), nil without one. Never sess.Pty() here: it
	// copies the library's pty while its request loop writes the window
	// of a window-change into it (a data race).
	var drain *windowDrain
	if d, ok := s.windows.Load(sess); ok {
		drain = d.(*windowDrain)
	}
	fatal := func(sess ssh.Session, err error) { fatal(sess, drain != nil, err) }
	defer func() {
		if p := recover(); p != nil {
			fatal(sess, errors.New("the session failed; ctrld logged why"))
			panic(p) // for recover's log, with the stack
		}
	}()
	if gc, ok := sess.Context().Value(gatedConnKey{}).(*gatedConn); ok {
		gc.sessionStarted()
		defer gc.sessionEnded()
	}
	key := sess.PublicKey()
	if key == nil {
		fatal(sess, errors.New("no public key"))
		return
	}
	fp := gossh.FingerprintSHA256(key)
	remote := sess.RemoteAddr().String()
	// (The session bounds were counted when its channel opened:
	// sessionChannel.) Who the session is for, from the key it proved (authenticate saw
	// every key offered, proved or not).
	who, ok, err := s.findKey(sess.Context(), fp)
	if err != nil {
		s.log.Warn("ssh: key lookup for a session failed", "fingerprint", fp, "err", err)
		fatal(sess, errors.New("could not look your key up just now: try again"))
		return
	}
	if !ok {
		fatal(sess, fmt.Errorf("key %s is not registered (any more)", fp))
		return
	}
	ctx, end := context.WithCancelCause(sess.Context())
	defer end(nil)
	ls := &liveSession{fingerprint: fp, who: who, end: end}
	s.mu.Lock()
	s.live[ls] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.live, ls)
		s.mu.Unlock()
	}()
	op, reconnect, closeConsole, err := s.console.Open(who, fp, remote)
	if err != nil {
		fatal(sess, err)
		return
	}
	defer closeConsole()
	log := s.log.With("operator", who.Name, "fingerprint", fp, "remote", remote, "read_only", who.ReadOnly)
	log.Info("ssh: session opened")
	defer log.Info("ssh: session closed", "cause", context.Cause(ctx))

	if cmd := sess.Command(); len(cmd) > 0 {
		// A one-shot command: the scripting CLI, as this person.
		// Only the command's name, as the app names it: arguments and
		// flags may hold secrets (--env DB_PASSWORD=…), given first too.
		app := cmdline.SessionApp(op, sess, sess.Stderr())
		log.Info("ssh: command", "command", cmp.Or(cmdline.CommandName(app, cmd), "(none)"), "args", len(cmd))
		// The session's context: a key removed while its command runs
		// ends the command (recheck), as it ends a console.
		if err := cmdline.RunContext(ctx, app, append([]string{"ssh"}, cmd...)); err != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				err = cause
			}
			fatal(sess, err)
			return
		}
		sess.Exit(0)
		return
	}
	if drain == nil {
		fatal(sess, errors.New("the console needs a terminal: run ssh with -t, or from a terminal"))
		return
	}
	pty, resized := drain.pty, drain.resized
	env := append(sess.Environ(), "TERM="+pty.Term)
	_, noColor := lookupEnv(sess.Environ(), "NO_COLOR")
	m := tui.New(op, tui.Options{Refresh: s.cfg.Refresh, NoColor: noColor, Reconnect: reconnect, ReadOnly: who.ReadOnly})
	in := &activity{r: sess}
	in.touch()
	keys := rate.NewLimiter(rate.Limit(s.cfg.KeysPerSecond), s.cfg.KeyBurst)
	dropped := false
	p := tea.NewProgram(m,
		tea.WithContext(ctx),
		tea.WithInput(in),
		tea.WithOutput(sess),
		tea.WithEnvironment(env),
		tea.WithColorProfile(colorprofile.Env(env)),
		tea.WithWindowSize(clampWindow(pty.Window)),
		// No job control over SSH: a suspend would leave the session
		// hanging.
		tea.WithFilter(func(_ tea.Model, msg tea.Msg) tea.Msg {
			if _, ok := msg.(tea.SuspendMsg); ok {
				return tea.ResumeMsg{}
			}
			// Input beyond the session's rate is dropped: each event
			// is an update and a redraw of the whole console (1-2 ms
			// of ctrld's CPU), and a paste of raw keystrokes is
			// thousands of them. ctrl+c always passes.
			switch msg := msg.(type) {
			case tea.KeyMsg, tea.MouseMsg, tea.PasteMsg:
				s.input.seen.Add(1)
				if k, ok := msg.(tea.KeyPressMsg); ok && k.String() == "ctrl+c" {
					break
				}
				if !keys.Allow() {
					if !dropped { // once a session
						log.Warn("ssh: input faster than the console takes it; dropping what is beyond", "keys_per_second", s.cfg.KeysPerSecond, "burst", s.cfg.KeyBurst)
						dropped = true
					}
					return nil
				}
				s.input.passed.Add(1)
			}
			return msg
		}))
	go func() {
		idle := time.NewTicker(idleCheckEvery(s.cfg.IdleTimeout))
		defer idle.Stop()
		deadline := time.NewTimer(s.cfg.MaxSessionTime)
		defer deadline.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case w := <-resized:
				width, height := clampWindow(w)
				p.Send(tea.WindowSizeMsg{Width: width, Height: height})
			case <-idle.C:
				if in.idleFor() >= s.cfg.IdleTimeout {
					end(errIdle)
				}
			case <-deadline.C:
				end(errMaxTime)
			}
		}
	}()
	_, runErr := p.Run()
	p.Kill()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		// The screen is the console's: start the message on a clean line.
		fmt.Fprint(sess.Stderr(), "\r\n")
		fatal(sess, cause)
		return
	}
	if runErr != nil && !errors.Is(runErr, tea.ErrProgramKilled) {
		log.Warn("ssh: console ended with an error", "err", runErr)
	}
	sess.Exit(0)
}

// idleCheckEvery is how often a session checks whether it has been idle
// for idleTimeout: a quarter of it, at most a second, and at least a
// millisecond (a ticker of no interval panics, and a tiny timeout from a
// caller that did not validate it must not end ctrld).
func idleCheckEvery(idleTimeout time.Duration) time.Duration {
	return max(min(idleTimeout/4, time.Second), time.Millisecond)
}

// windowDrain reads a session's window changes from the moment it has a
// terminal until the session's requests end. The SSH library delivers them
// on a channel of one that its request loop blocks on when full: a client
// sending a pty-req then window-changes before the shell (or after the
// console ended, or during a one-shot command) would otherwise block the
// loop, and leak it and the session for as long as the connection lives.
// The console gets the latest size on resized; sizes it has not taken yet
// are replaced.
type windowDrain struct {
	pty     ssh.Pty // as requested: its Term and first Window
	resized chan ssh.Window
}

// drainWindows is the server's pty handler (next, the SSH library's
// emulation) plus a windowDrain per session.
func (s *Server) drainWindows(next ssh.PtyHandler) ssh.PtyHandler {
	return func(ctx ssh.Context, sess ssh.Session, pty ssh.Pty) (func() error, error) {
		closer, err := next(ctx, sess, pty)
		if err != nil {
			return closer, err
		}
		// The library made the channel (with the first size in it)
		// before calling here, and closes it when the session's
		// requests end. (Here, on the request loop itself, sess.Pty()
		// races with nothing.) Stored before the shell request, which
		// the same loop handles after this one, starts the session.
		_, winch, _ := sess.Pty()
		d := &windowDrain{pty: pty, resized: make(chan ssh.Window, 1)}
		s.windows.Store(sess, d)
		go func() {
			defer s.windows.Delete(sess)
			for w := range winch {
				select { // keep only the latest
				case <-d.resized:
				default:
				}
				d.resized <- w
			}
		}()
		return closer, nil
	}
}

// The largest window drawn. The renderer keeps a cell buffer of the
// window's size: a client claiming 10,000×10,000 would have ctrld allocate
// and redraw 10⁸ cells a frame. A real terminal larger than this (a 4K
// screen in a tiny font has about 480×135) sees the console in its
// top-left corner.
const maxWidth, maxHeight = 512, 256

// clampWindow is w's size within maxWidth×maxHeight.
func clampWindow(w ssh.Window) (width, height int) {
	return min(max(w.Width, 0), maxWidth), min(max(w.Height, 0), maxHeight)
}

// recheck ends the sessions of keys removed (or whose owner or role
// changed) since they opened, every Config.Recheck: one query for all of
// this server's sessions.
func (s *Server) recheck(ctx context.Context) {
	t := time.NewTicker(s.cfg.Recheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.recheckOnce(ctx)
	}
}

// recheckOnce ends the sessions of keys removed or changed.
func (s *Server) recheckOnce(ctx context.Context) {
	s.mu.Lock()
	sessions := make([]*liveSession, 0, len(s.live))
	var fps []string
	for ls := range s.live {
		sessions = append(sessions, ls)
		fps = append(fps, ls.fingerprint)
	}
	s.mu.Unlock()
	if len(sessions) == 0 {
		return
	}
	// At most one interval: a hanging database must not stop the
	// re-checks for good.
	liveCtx, cancel := context.WithTimeout(ctx, s.cfg.Recheck)
	live, err := s.keys.Live(liveCtx, fps)
	cancel()
	if err != nil {
		// The consoles need the database too; they show it down.
		s.log.Warn("ssh: re-checking the sessions' keys failed", "err", err)
		return
	}
	for _, ls := range sessions {
		if who, ok := live[ls.fingerprint]; !ok || who != ls.who {
			s.log.Info("ssh: key removed or changed; ending its session", "operator", ls.who.Name, "fingerprint", ls.fingerprint)
			ls.end(errKeyRemoved)
		}
	}
}

// fatal tells the person why the session ends and ends it with status 1.
func fatal(sess ssh.Session, terminal bool, err error) {
	end := "\n"
	if terminal {
		end = "\r\n" // the terminal is raw: the console's
	}
	fmt.Fprintf(sess.Stderr(), "deploysync: %v%s", err, end)
	sess.Exit(1)
}

func lookupEnv(env []string, name string) (string, bool) {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// activity is the session's input, noting when the person last typed.
type activity struct {
	r    interface{ Read([]byte) (int, error) }
	last atomic.Int64
}

func (a *activity) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.touch()
	}
	return n, err
}

func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

func (a *activity) idleFor() time.Duration { return time.Since(time.Unix(0, a.last.Load())) }

// panicLog is recover's logger on ours.
type panicLog struct{ log *slog.Logger }

func (l panicLog) Printf(format string, v ...any) {
	l.log.Error("ssh: a session panicked; it ended, nothing else did", "panic", fmt.Sprintf(format, v...))
}
