package sshserve

import (
	"bytes"
	"context"
	"crypto/dsa" //nolint:staticcheck // a DSA key, to be refused
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"google.golang.org/grpc"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// What the SSH door keeps for a client, and what it speaks (issue 29,
// item 8), with x/crypto's own client. The registry is everyKey: what is
// refused here is refused whatever the table holds.

// door is a server on a fake registry and console, for these tests.
type door struct {
	*Server
	logs *logBuffer
}

// logBuffer is what the server logged.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func startDoor(t *testing.T, cfg Config, keys Keys, console Console) *door {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	if cfg.HostKeyFile == "" {
		cfg.HostKeyFile, cfg.GenerateHostKey = filepath.Join(t.TempDir(), "host"), true
	}
	logs := &logBuffer{}
	s, err := Start(context.Background(), cfg, keys, console, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return &door{Server: s, logs: logs}
}

func ed25519Signer(t *testing.T) gossh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return signer
}

// dialWith logs in with signer, the client configured by tune.
func (d *door) dialWith(signer gossh.Signer, tune func(*gossh.ClientConfig)) (*gossh.Client, error) {
	cfg := &gossh.ClientConfig{User: "alice", Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second}
	if tune != nil {
		tune(cfg)
	}
	return gossh.Dial("tcp", d.Addr(), cfg)
}

func (d *door) dial(t *testing.T, signer gossh.Signer) *gossh.Client {
	t.Helper()
	c, err := d.dialWith(signer, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// emptyOperator is a ctrld with no region, deployment or rollout (narrow
// fake: the console's reads answer, nothing else is called here).
type emptyOperator struct{ ctrlv1.OperatorServiceClient }

func (emptyOperator) ListRegions(context.Context, *ctrlv1.ListRegionsRequest, ...grpc.CallOption) (*ctrlv1.ListRegionsResponse, error) {
	return &ctrlv1.ListRegionsResponse{}, nil
}

func (emptyOperator) ListDeployments(context.Context, *ctrlv1.ListDeploymentsRequest, ...grpc.CallOption) (*ctrlv1.ListDeploymentsResponse, error) {
	return &ctrlv1.ListDeploymentsResponse{}, nil
}

func (emptyOperator) ListRollouts(context.Context, *ctrlv1.ListRolloutsRequest, ...grpc.CallOption) (*ctrlv1.ListRolloutsResponse, error) {
	return &ctrlv1.ListRolloutsResponse{}, nil
}

type emptyConsole struct{}

func (emptyConsole) Open(Identity, string, string) (ctrlv1.OperatorServiceClient, func(), func(), error) {
	return emptyOperator{}, func() {}, func() {}, nil
}

// setenv sends an env request on ch and returns whether the server took it.
func setenv(t *testing.T, ch gossh.Channel, name, value string) bool {
	t.Helper()
	ok, err := ch.SendRequest("env", true, gossh.Marshal(struct{ Name, Value string }{name, value}))
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// Before its shell a session keeps only the variables the console reads
// (like OpenSSH's AcceptEnv), a few, each of a bounded size: the others
// are refused, not stored. Many channels each sending thousands of large
// variables grow ctrld's heap by nothing they sent.
func TestEnvRequestsBeforeTheShellAreBounded(t *testing.T) {
	d := startDoor(t, Config{MaxSessionsPerKey: 1000}, everyKey{}, emptyConsole{})
	c := d.dial(t, ed25519Signer(t))
	ch, reqs, err := c.OpenChannel("session", nil)
	if err != nil {
		t.Fatal(err)
	}
	go gossh.DiscardRequests(reqs)
	if !setenv(t, ch, "NO_COLOR", "1") || !setenv(t, ch, "COLORTERM", "truecolor") {
		t.Error("a variable the console reads was refused")
	}
	for _, name := range []string{"LANG", "LD_PRELOAD", "PATH", "HOME", "TERM", "X"} {
		if setenv(t, ch, name, "v") {
			t.Errorf("%s, which the console does not read, was taken", name)
		}
	}
	if setenv(t, ch, "CLICOLOR", strings.Repeat("1", 8<<10)) {
		t.Error("an 8 KiB value was taken")
	}
	taken := 0
	for range 1000 {
		if setenv(t, ch, "NO_COLOR", "1") {
			taken++
		}
	}
	if taken+2 > maxEnv {
		t.Errorf("%d variables taken for one session; bound %d", taken+2, maxEnv)
	}

	// The heap: as many channels as the server lets one connection open,
	// each sent 400 variables of 8 KiB (3 MiB a channel) that the old
	// server kept, all of them.
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	opened := 0
	for range 40 {
		ch, reqs, err := c.OpenChannel("session", nil)
		if err != nil {
			continue // refused: over the bound of channels
		}
		opened++
		go gossh.DiscardRequests(reqs)
		wg.Go(func() {
			for i := range 400 {
				ch.SendRequest("env", i%50 == 0, gossh.Marshal(struct{ Name, Value string }{fmt.Sprintf("V%d", i), strings.Repeat("x", 8<<10)}))
			}
			ch.SendRequest("env", true, gossh.Marshal(struct{ Name, Value string }{"NO_COLOR", "1"})) // all read
		})
	}
	wg.Wait()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("%d channels opened; live heap %d MiB before, %d MiB after the variables", opened, before.HeapAlloc>>20, after.HeapAlloc>>20)
	if after.HeapAlloc > before.HeapAlloc+32<<20 {
		t.Errorf("the live heap grew from %d MiB to %d MiB with env requests of sessions that never started", before.HeapAlloc>>20, after.HeapAlloc>>20)
	}
}

// One connection opening 2,000 session channels gets the bound, like
// OpenSSH's MaxSessions (10); the rest are refused at once, and cost no
// goroutine.
func TestSessionChannelsPerConnectionAreBounded(t *testing.T) {
	d := startDoor(t, Config{MaxSessionsPerKey: 5000, MaxSessions: 5000}, everyKey{}, emptyConsole{})
	c := d.dial(t, ed25519Signer(t))
	g0 := runtime.NumGoroutine()
	accepted := 0
	for range 2000 {
		_, reqs, err := c.OpenChannel("session", nil)
		if err != nil {
			continue
		}
		accepted++
		go gossh.DiscardRequests(reqs)
	}
	// Each accepted channel costs this (client) side a goroutine too.
	g := runtime.NumGoroutine() - accepted
	t.Logf("%d of 2,000 channels accepted; goroutines %d before, %d after (less the client's)", accepted, g0, g)
	if accepted != maxChannelsPerConn {
		t.Errorf("%d session channels accepted on one connection; want the bound %d", accepted, maxChannelsPerConn)
	}
	if g > g0+100 {
		t.Errorf("goroutines grew from %d to %d with 2,000 session channels", g0, g)
	}
}

// A channel counts against its key's bound from the moment it opens, not
// from its shell: idle channels on one connection leave the key no
// session on another.
func TestSessionChannelsCountAgainstTheKeyFromTheStart(t *testing.T) {
	d := startDoor(t, Config{MaxSessionsPerKey: 2}, everyKey{}, emptyConsole{})
	alice := ed25519Signer(t)
	first := d.dial(t, alice)
	for range 2 {
		_, reqs, err := first.OpenChannel("session", nil)
		if err != nil {
			t.Fatal(err)
		}
		go gossh.DiscardRequests(reqs)
	}
	second := d.dial(t, alice)
	_, _, err := second.OpenChannel("session", nil)
	if err == nil || !strings.Contains(err.Error(), "too many console sessions") {
		t.Fatalf("a third channel of a key bound to 2, with 2 idle ones open: %v; want it refused, saying why", err)
	}
}

// A channel that starts no session within AuthTimeout is closed, though
// another session keeps its connection open.
func TestAChannelWithoutASessionIsClosed(t *testing.T) {
	d := startDoor(t, Config{AuthTimeout: 300 * time.Millisecond}, everyKey{}, emptyConsole{})
	c := d.dial(t, ed25519Signer(t))
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if err := sess.RequestPty("xterm", 24, 80, gossh.TerminalModes{}); err != nil {
		t.Fatal(err)
	}
	out := &logBuffer{}
	sess.Stdout = out
	if err := sess.Shell(); err != nil {
		t.Fatal(err)
	}
	_, reqs, err := c.OpenChannel("session", nil)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		gossh.DiscardRequests(reqs) // returns when the channel closes
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("a channel that started no session is still open after 10s, its deadline 300ms")
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "REGION"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the console beside it does not run: %q", out.String())
		}
	}
}

func rsaSigner(t *testing.T, bits int) gossh.Signer {
	t.Helper()
	priv, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return signer
}

// The server offers what current OpenSSH offers by default, without
// SHA-1: a client that speaks only diffie-hellman-group14-sha1, an
// hmac-sha1 MAC or ssh-rsa (SHA-1) signatures does not get in, nor does a
// DSA key or an RSA key under 2048 bits, though the registry (everyKey
// here) would take any key.
func TestTheDoorSpeaksNoSHA1AndRefusesWeakKeys(t *testing.T) {
	d := startDoor(t, Config{AuthBurst: 100}, everyKey{}, emptyConsole{})
	ed := ed25519Signer(t)
	rsa2048 := rsaSigner(t, 2048)
	rsaSHA1, err := gossh.NewSignerWithAlgorithms(rsa2048.(gossh.AlgorithmSigner), []string{gossh.KeyAlgoRSA})
	if err != nil {
		t.Fatal(err)
	}
	dsaKey := new(dsa.PrivateKey)
	if err := dsa.GenerateParameters(&dsaKey.Parameters, rand.Reader, dsa.L1024N160); err != nil {
		t.Fatal(err)
	}
	if err := dsa.GenerateKey(dsaKey, rand.Reader); err != nil {
		t.Fatal(err)
	}
	dss, err := gossh.NewSignerFromKey(dsaKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		signer gossh.Signer
		tune   func(*gossh.ClientConfig)
		in     bool
	}{
		{"ed25519, the defaults", ed, nil, true},
		{"rsa 2048 (rsa-sha2-*)", rsa2048, nil, true},
		{"aes128-ctr with hmac-sha2-256", ed, func(c *gossh.ClientConfig) {
			c.Ciphers, c.MACs = []string{gossh.CipherAES128CTR}, []string{gossh.HMACSHA256}
		}, true},
		{"diffie-hellman-group14-sha1", ed, func(c *gossh.ClientConfig) { c.KeyExchanges = []string{gossh.InsecureKeyExchangeDH14SHA1} }, false},
		{"diffie-hellman-group1-sha1", ed, func(c *gossh.ClientConfig) { c.KeyExchanges = []string{gossh.InsecureKeyExchangeDH1SHA1} }, false},
		{"hmac-sha1-96", ed, func(c *gossh.ClientConfig) {
			c.Ciphers, c.MACs = []string{gossh.CipherAES128CTR}, []string{gossh.InsecureHMACSHA196}
		}, false},
		{"hmac-sha1", ed, func(c *gossh.ClientConfig) {
			c.Ciphers, c.MACs = []string{gossh.CipherAES128CTR}, []string{gossh.HMACSHA1}
		}, false},
		{"ssh-rsa (SHA-1) signatures", rsaSHA1, nil, false},
		{"ssh-dss", dss, nil, false},
		{"rsa 1024", rsaSigner(t, 1024), nil, false},
	} {
		cl, err := d.dialWith(c.signer, c.tune)
		if err == nil {
			cl.Close()
		}
		if (err == nil) != c.in {
			t.Errorf("%s: let in %v (%v), want %v", c.name, err == nil, err, c.in)
		}
	}
}

// An RSA host key signs with rsa-sha2-* only: a client that takes only
// ssh-rsa (SHA-1) host signatures does not get in.
func TestAnRSAHostKeySignsWithoutSHA1(t *testing.T) {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	block, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "host_rsa")
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDoor(t, Config{HostKeyFile: file}, everyKey{}, emptyConsole{})
	ed := ed25519Signer(t)
	for _, c := range []struct {
		algo string
		in   bool
	}{{gossh.KeyAlgoRSASHA256, true}, {gossh.KeyAlgoRSASHA512, true}, {gossh.KeyAlgoRSA, false}} {
		cl, err := d.dialWith(ed, func(cfg *gossh.ClientConfig) { cfg.HostKeyAlgorithms = []string{c.algo} })
		if err == nil {
			cl.Close()
		}
		if (err == nil) != c.in {
			t.Errorf("host key algorithm %s: let in %v (%v), want %v", c.algo, err == nil, err, c.in)
		}
	}
}

// One-shot commands run concurrently share no state of the command-line
// library: under -race, help and usage errors of many sessions at once
// (which set up urfave/cli's global help flag) race on nothing.
func TestConcurrentCommandsShareNoCLIState(t *testing.T) {
	d := startDoor(t, Config{MaxSessionsPerKey: 100}, everyKey{}, emptyConsole{})
	c := d.dial(t, ed25519Signer(t))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			sess, err := c.NewSession()
			if err != nil {
				t.Error(err)
				return
			}
			defer sess.Close()
			out := &logBuffer{}
			sess.Stdout, sess.Stderr = out, out
			line := []string{"regions --help", "--help", "help", "deploy --region"}[i%4]
			sess.Run(line)
			if !strings.Contains(out.String(), "USAGE") && !strings.Contains(out.String(), "Usage") && !strings.Contains(out.String(), "usage") {
				t.Errorf("%s: no help shown: %q", line, out.String())
			}
		})
	}
	wg.Wait()
}

// The command log names the command, known names only, never an argument
// or a flag: `--env=DB_PASSWORD=hunter2` given first is not "the command".
func TestTheCommandLogNamesOnlyTheCommand(t *testing.T) {
	d := startDoor(t, Config{}, everyKey{}, emptyConsole{})
	c := d.dial(t, ed25519Signer(t))
	for _, line := range []string{"--env=DB_PASSWORD=hunter2 regions", "--output json regions", "hunter2 --output json"} {
		sess, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		sess.Run(line)
		sess.Close()
	}
	for deadline := time.Now().Add(10 * time.Second); strings.Count(d.logs.String(), "session closed") < 3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("three sessions' ends were never logged:\n%s", d.logs)
		}
	}
	logs := d.logs.String()
	if strings.Contains(logs, "hunter2") {
		t.Errorf("the log holds an argument:\n%s", logs)
	}
	if n := strings.Count(logs, "command=regions"); n != 2 {
		t.Errorf("the log names regions %d times, want 2:\n%s", n, logs)
	}
}

// A 32 KB paste into the filter, as raw keystrokes over a real session,
// costs the console a bounded number of updates (the input is
// rate-limited per session: KeyBurst here, and no refill to speak of),
// not 32,768 redraws.
func TestAPasteIntoTheFilterIsBoundedWork(t *testing.T) {
	d := startDoor(t, Config{KeyBurst: 100, KeysPerSecond: 0.001}, everyKey{}, emptyConsole{})
	c := d.dial(t, ed25519Signer(t))
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if err := sess.RequestPty("xterm", 24, 80, gossh.TerminalModes{}); err != nil {
		t.Fatal(err)
	}
	out := &logBuffer{}
	sess.Stdout = out
	stdin, err := sess.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Shell(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "REGION"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the console never drew: %q", out.String())
		}
	}
	const paste = 32 << 10
	go stdin.Write([]byte("/" + strings.Repeat("x", paste)))
	// Every key read, whether it reached the console or not.
	for deadline := time.Now().Add(5 * time.Minute); d.input.seen.Load() < paste+1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d keys of %d read in 5 minutes, %d of them given to the console", d.input.seen.Load(), paste+1, d.input.passed.Load())
		}
	}
	passed := d.input.passed.Load()
	t.Logf("%d keys read, %d given to the console", d.input.seen.Load(), passed)
	if passed > 101 {
		t.Errorf("%d of %d pasted keys reached the console (each an update and a redraw); want at most the burst, 100", passed, paste+1)
	}
}

// A session's place in the bounds is given back when it ends: one after
// the other, sessions of a key bound to one each get in.
func TestEndedSessionsGiveTheirPlaceBack(t *testing.T) {
	d := startDoor(t, Config{MaxSessionsPerKey: 1}, everyKey{}, emptyConsole{})
	c := d.dial(t, ed25519Signer(t))
	for i := range 20 {
		var sess *gossh.Session
		var err error
		// The server counts a channel out once its close is through,
		// a moment after the client saw the command end.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if sess, err = c.NewSession(); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatalf("session %d of a key bound to 1, the others ended: %v", i+1, err)
		}
		out := &logBuffer{}
		sess.Stdout = out
		if err := sess.Run("regions"); err != nil {
			t.Fatalf("session %d: %v", i+1, err)
		}
		sess.Close()
	}
}
