package textclean_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/deploysync/deploysync/internal/textclean"
)

func TestClean(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain text and its lines stay", "panic: DATABASE_URL is not set\n\tat main.go:12\n", "panic: DATABASE_URL is not set\n\tat main.go:12\n"},
		{"colours", "\x1b[31mred\x1b[0m \x1b[1;38;5;196mbold\x1b[m", "red bold"},
		{"a line of escapes", "\x1b[2J\x1b[H\x1b[?1049h\x1b[10;20H\x1b[K\x1b7\x1b8\x1bc\x1b(0\x1b)B\x1b=\x1b>\x1bM", ""},
		{"OSC title, BEL-terminated", "a\x1b]0;pwned\x07b", "ab"},
		{"OSC hyperlink, ST-terminated", "\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\", "click"},
		{"OSC 52 clipboard write", "x\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07y", "xy"},
		{"DCS, APC, PM, SOS", "\x1bPq#0;2;0;0;0\x1b\\1\x1b_app\x1b\\2\x1b^pm\x07" + "3\x1bXsos\x1b\\4", "1234"},
		{"an unterminated OSC ends at the line's end", "ok\x1b]0;title\nnext line\n", "ok\nnext line\n"},
		{"C1 introducers", "a\u009b31mb\u009d0;t\u009cc\u0085d", "abcd"},
		{"C0 controls but line feed and tab", "a\rb\bc\x00d\x07e\x7ff\x0bg\x0ch\ti\n", "abcdefgh\ti\n"},
		{"format characters", "admin\u202e\u2066gnp.exe\u200b\ufeff", "admingnp.exe"},
		{"invalid UTF-8", "a\xffb\xc3c\x9bd", "a\uFFFDb\uFFFDc\uFFFDd"},
		{"ESC at the end", "end\x1b", "end"},
		{"CSI cut short", "end\x1b[12;", "end"},
		{"unicode stays", "héllo wörld ✓ 日本", "héllo wörld ✓ 日本"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := textclean.Clean(tc.in, -1)
			if got != tc.want {
				t.Errorf("Clean(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("Clean(%q) = %q: not valid UTF-8", tc.in, got)
			}
		})
	}
}

// Whatever the input, nothing a terminal acts on is left, the result is
// valid UTF-8, and the limit holds without cutting a character.
func TestCleanHostileBytes(t *testing.T) {
	var b strings.Builder
	for i := range 1 << 16 {
		b.WriteByte(byte(i*7919 + i>>3)) // every byte value, in many orders
	}
	for _, limit := range []int{-1, 0, 1, 2, 3, 100, 4096} {
		got := textclean.Clean(b.String(), limit)
		if !utf8.ValidString(got) {
			t.Fatalf("limit %d: not valid UTF-8", limit)
		}
		if limit >= 0 && len(got) > limit {
			t.Fatalf("limit %d: %d bytes", limit, len(got))
		}
		for _, r := range got {
			if r == 0x1b || (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f) {
				t.Fatalf("limit %d: control %U left in %q", limit, r, got)
			}
		}
	}
	if got := textclean.Clean("ab✓", 4); got != "ab" {
		t.Errorf("a limit inside a character cut it: %q", got)
	}
}

func TestAppend(t *testing.T) {
	dst := []byte("kept:")
	dst = textclean.Append(dst, []byte("\x1b[31mred\x1b[0m"), 2)
	if string(dst) != "kept:re" {
		t.Errorf("Append = %q", dst)
	}
}
