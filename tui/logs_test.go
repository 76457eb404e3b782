package tui

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"
)

// held is the bytes of text the array under l.lines still holds, shown
// or not: what the garbage collector cannot take.
func held(l logLines) int {
	n := 0
	for _, s := range l.lines[:cap(l.lines)] {
		n += len(s)
	}
	return n + len(l.partial)
}

// A log keeps its newest lines within maxLogLines and maxLogBytes
// whatever comes: many short lines, fewer long ones, one line of many
// megabytes with no line break; it counts what it dropped, and holds no
// dropped text in memory.
func TestALogKeepsItsNewestLinesWithinItsBounds(t *testing.T) {
	for name, c := range map[string]struct {
		pieces    func(yield func(string))
		newest    string
		wantLines int
	}{
		"100,000 short lines": {
			pieces: func(yield func(string)) {
				var b strings.Builder
				for i := range 100_000 {
					fmt.Fprintf(&b, "line %d\n", i)
					if b.Len() > 60<<10 { // the agent's pieces are at most 64 KiB
						yield(b.String())
						b.Reset()
					}
				}
				yield(b.String())
			},
			newest: "line 99999", wantLines: maxLogLines,
		},
		"600 lines of 10 KiB": {
			pieces: func(yield func(string)) {
				for i := range 600 {
					yield(fmt.Sprintf("%05d %s\n", i, strings.Repeat("x", 10<<10)))
				}
			},
			newest: "00599 x", wantLines: maxLogBytes / (10<<10 + 6),
		},
		"one line of 6 MiB": {
			pieces: func(yield func(string)) {
				for range 6 << 4 {
					yield(strings.Repeat("é", 32<<10)) // 64 KiB, no line break
				}
			},
			newest: "éé", wantLines: maxLogBytes / maxLineBytes,
		},
	} {
		t.Run(name, func(t *testing.T) {
			var l logLines
			total := 0
			c.pieces(func(s string) {
				l.add(s)
				total += len(s)
				if len(l.lines) > maxLogLines || l.bytes > maxLogBytes+maxLineBytes {
					t.Fatalf("after %d bytes: %d lines, %d bytes kept", total, len(l.lines), l.bytes)
				}
				if h := held(l); h > maxLogBytes+maxLineBytes {
					t.Fatalf("after %d bytes: %d bytes held under the lines, %d kept", total, h, l.bytes)
				}
			})
			shown := l.shown()
			if n := len(l.lines); n < c.wantLines-1 || n > c.wantLines {
				t.Errorf("%d lines kept, want %d", n, c.wantLines)
			}
			if last := shown[len(shown)-1]; !strings.HasPrefix(last, c.newest) {
				t.Errorf("the newest line kept starts %.20q, want %q", last, c.newest)
			}
			if l.dropped == 0 {
				t.Error("nothing counted as dropped")
			}
			for _, line := range shown {
				if len(line) > maxLineBytes || !utf8.ValidString(line) {
					t.Fatalf("a line of %d bytes, valid UTF-8 %v", len(line), utf8.ValidString(line))
				}
			}
		})
	}
}

// A piece may end in the middle of a line: the next one continues it.
func TestALogLineSplitAcrossPiecesIsOneLine(t *testing.T) {
	var l logLines
	for _, piece := range []string{"star", "ting\r\npanic: DATA", "BASE_URL is not set\n", "\tat main.go:12"} {
		l.add(piece)
	}
	got := strings.Join(l.shown(), "|")
	if want := "starting|panic: DATABASE_URL is not set|    at main.go:12"; got != want {
		t.Errorf("lines %q, want %q", got, want)
	}
}

// A log page that took 8 MiB of log holds about its bound in memory,
// its viewport's lines included, after a collection.
func TestALogPageHoldsAboutItsBoundInMemory(t *testing.T) {
	heap := func() uint64 {
		var s runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&s)
		return s.HeapAlloc
	}
	before := heap()
	p := newLogsPage("api", "eu-west", "api-0", false, nil)
	pc := pageContext{keys: DefaultKeyMap(), styles: NewStyles(true), width: 80, height: 19}
	line := strings.Repeat("x", 1<<10)
	for i := range 8 << 10 { // 8 MiB in lines of 1 KiB, in pieces of 64
		if i%64 == 0 {
			var b strings.Builder
			for j := range 64 {
				fmt.Fprintf(&b, "%08d %s\n", i+j, line)
			}
			next, _ := p.receive(logsMsg{stream: p.stream, text: b.String()}, pc)
			p = next.(logsPage)
		}
	}
	after := heap()
	if grown := int64(after) - int64(before); grown > 4*maxLogBytes {
		t.Errorf("the page holds %d MiB after 8 MiB of log, keeping %d lines of %d bytes", grown>>20, p.log.count(), p.log.bytes)
	}
	if !strings.Contains(p.view(pc), "older lines dropped (the console keeps 5000 lines, 2 MiB)") {
		t.Errorf("the page does not say it dropped lines:\n%s", p.view(pc))
	}
	runtime.KeepAlive(p)
}
