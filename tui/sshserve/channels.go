package sshserve

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"charm.land/ssh"
	gossh "golang.org/x/crypto/ssh"
)

// What a session channel may hold before its shell, like OpenSSH's sshd:
// at most maxChannelsPerConn channels on a connection (MaxSessions), each
// counted against its key's and the server's session bounds from the
// moment it opens (sessionCounts), each closed when it has not started a
// session (a shell or a command) within AuthTimeout, and each keeping
// only the variables the console reads (AcceptEnv), a few, each short.
// Without them one connection opened 2,000 idle channels, and 200
// channels that never became sessions kept 363 MB of env requests.

// acceptedEnv are the variables a session keeps, as OpenSSH's AcceptEnv
// names them: those the console reads for its colours. TERM comes with
// the terminal request; LANG, LC_* and anything else is refused.
var acceptedEnv = []string{"NO_COLOR", "COLORTERM", "CLICOLOR", "CLICOLOR_FORCE", "TERM_PROGRAM"}

// maxEnvValue bounds a variable's value, in bytes.
const maxEnvValue = 256

// sessionChannel is the server's handler of "session" channels: it admits
// a channel within the bounds above, or refuses it at once, and hands it
// to the SSH library's own session handler with its requests filtered.
func (s *Server) sessionChannel(srv *ssh.Server, conn *gossh.ServerConn, newChan gossh.NewChannel, ctx ssh.Context) {
	gc, _ := ctx.Value(gatedConnKey{}).(*gatedConn)
	key, _ := ctx.Value(ssh.ContextKeyPublicKey).(ssh.PublicKey)
	if gc == nil || key == nil {
		_ = newChan.Reject(gossh.Prohibited, "no session without a public key")
		return
	}
	if !gc.openChannel(maxChannelsPerConn) {
		_ = newChan.Reject(gossh.ResourceShortage, fmt.Sprintf("%d sessions open on this connection, its limit", maxChannelsPerConn))
		return
	}
	release, err := s.counts.admit(gossh.FingerprintSHA256(key))
	if err != nil {
		gc.closeChannel()
		_ = newChan.Reject(gossh.ResourceShortage, err.Error())
		return
	}
	// Held by the request loop below and, once it starts, by the
	// session's handler, which may outlive the loop by a little.
	hold := &channelHold{n: 1, release: func() {
		release()
		gc.closeChannel()
	}}
	// The library's session handler, on a server of one channel: its
	// handler lets go of the hold when the session ends. (It reads only
	// these fields of the server it is given.)
	one := &ssh.Server{
		Handler: func(sess ssh.Session) {
			defer hold.done()
			srv.Handler(sess)
		},
		PtyCallback:            srv.PtyCallback,
		PtyHandler:             srv.PtyHandler,
		SessionRequestCallback: srv.SessionRequestCallback,
		SubsystemHandlers:      srv.SubsystemHandlers,
	}
	defer hold.done()
	ssh.DefaultSessionHandler(one, conn, &boundedChannel{NewChannel: newChan, hold: hold, deadline: s.cfg.AuthTimeout}, ctx)
}

// channelHold counts what holds a channel's place in the bounds; the last
// to let go releases it.
type channelHold struct {
	mu      sync.Mutex
	n       int
	release func()
}

func (h *channelHold) add() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
}

func (h *channelHold) done() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n--; h.n == 0 {
		h.release()
	}
}

// boundedChannel is a new session channel whose requests, once accepted,
// pass through filterRequests.
type boundedChannel struct {
	gossh.NewChannel
	hold     *channelHold
	deadline time.Duration
}

func (c *boundedChannel) Accept() (gossh.Channel, <-chan *gossh.Request, error) {
	ch, reqs, err := c.NewChannel.Accept()
	if err != nil {
		return ch, reqs, err
	}
	out := make(chan *gossh.Request)
	go filterRequests(ch, reqs, out, c.hold, c.deadline)
	return ch, out, nil
}

// filterRequests passes a session's requests from in to out, the library's
// request loop, but for those it answers itself: env requests beyond what
// a session keeps, a second shell or command, and subsystems (there are
// none). The first shell or command holds the channel for its handler; a
// channel with none by the deadline is closed.
func filterRequests(ch gossh.Channel, in <-chan *gossh.Request, out chan<- *gossh.Request, hold *channelHold, deadline time.Duration) {
	defer close(out)
	timer := time.AfterFunc(deadline, func() { ch.Close() })
	defer timer.Stop()
	started, env := false, 0
	for req := range in {
		switch req.Type {
		case "env":
			var kv struct{ Name, Value string }
			ok := !started && env < maxEnv && gossh.Unmarshal(req.Payload, &kv) == nil &&
				slices.Contains(acceptedEnv, kv.Name) && len(kv.Value) <= maxEnvValue
			if !ok {
				_ = req.Reply(false, nil)
				continue
			}
			env++
		case "shell", "exec":
			if started {
				_ = req.Reply(false, nil)
				continue
			}
			// The library starts the handler for the first one it
			// gets: hold the channel for it before it can.
			started = true
			timer.Stop()
			hold.add()
		case "subsystem":
			_ = req.Reply(false, nil)
			continue
		}
		out <- req
	}
}
