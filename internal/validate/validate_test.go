package validate

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestImage(t *testing.T) {
	good := []string{
		"nginx", "nginx:1.27", "library/nginx:latest", "ghcr.io/acme/api:v1.2.3",
		"localhost:5000/app", "registry.example.com:443/team/app_x-y:tag_1",
		"nginx@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
	}
	bad := []string{"", "Nginx", "nginx:", ":tag", "nginx:-bad", "a b", "nginx@sha256:xyz", "http://ghcr.io/app", "/app"}
	for _, s := range good {
		if err := Image(s); err != nil {
			t.Errorf("Image(%q) = %v, want ok", s, err)
		}
	}
	for _, s := range bad {
		if Image(s) == nil {
			t.Errorf("Image(%q) accepted, want error", s)
		}
	}
}

func TestIDAndRegion(t *testing.T) {
	for _, s := range []string{"a", "dep-1", "us-east-1", "0abc"} {
		if err := ID(s); err != nil {
			t.Errorf("ID(%q) = %v", s, err)
		}
		if err := Region(s); err != nil {
			t.Errorf("Region(%q) = %v", s, err)
		}
	}
	for _, s := range []string{"", "-a", "a-", "A", "dep_1", "a.b", string(make([]byte, 49))} {
		if ID(s) == nil {
			t.Errorf("ID(%q) accepted", s)
		}
	}
}

func TestReplicasAndResources(t *testing.T) {
	for _, c := range []struct {
		name  string
		check func(int) error
		ok    map[int]bool
	}{
		{"Replicas", Replicas, map[int]bool{-1: false, 0: true, 1000: true, 1001: false}},
		{"CPUMillicores", CPUMillicores, map[int]bool{-5: false, 0: false, 1: true, 1_000_000: true, 1_000_001: false, 1<<31 - 1: false}},
		{"MemoryMiB", MemoryMiB, map[int]bool{0: false, 1: true, 16 << 20: true, 16<<20 + 1: false, 1<<31 - 1: false}},
	} {
		for n, ok := range c.ok {
			if err := c.check(n); (err == nil) != ok {
				t.Errorf("%s(%d) = %v, want ok=%v", c.name, n, err, ok)
			}
		}
	}
}

// What a process receives: no NUL (C strings end there), valid UTF-8, and
// no longer than Linux lets one argument or NAME=value string be.
func TestArgAndEnvValue(t *testing.T) {
	long := strings.Repeat("x", MaxArgBytes)
	for _, ok := range []string{"", "serve", "line1\nline2\ttab", "\x1b[0m", "€", long} {
		if err := Arg(ok); err != nil {
			t.Errorf("Arg(%.20q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"a\x00b", "\xff", long + "x"} {
		if Arg(bad) == nil {
			t.Errorf("Arg(%.20q) accepted", bad)
		}
	}
	if err := EnvValue("CERT", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"); err != nil {
		t.Errorf("EnvValue with newlines = %v", err)
	}
	if err := EnvValue("AB", long[:MaxArgBytes-3]); err != nil { // "AB=" + value is exactly MaxArgBytes
		t.Errorf("EnvValue at the limit = %v", err)
	}
	for _, bad := range []string{"a\x00", "\xc3", long[:MaxArgBytes-2]} {
		if EnvValue("AB", bad) == nil {
			t.Errorf("EnvValue(AB, %.20q) accepted", bad)
		}
	}
}

func TestEnvName(t *testing.T) {
	for _, ok := range []string{"A", "LOG_LEVEL", "my.var", "_x"} {
		if err := EnvName(ok); err != nil {
			t.Errorf("EnvName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "1ABC", "A=B", "A B"} {
		if EnvName(bad) == nil {
			t.Errorf("EnvName(%q) accepted", bad)
		}
	}
}

// Clip never splits a character, so a clipped text is still valid UTF-8.
func TestClipKeepsWholeCharacters(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abcdef", 3, "abc"},
		{"ab€", 3, "ab"}, // € is 3 bytes: cutting at 3 would split it
		{"ab€", 5, "ab€"},
		{"€€", 4, "€"},
		{"€", 0, ""},
	} {
		got := Clip(tc.in, tc.n)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("Clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestRefusedValuesAreQuotedShort(t *testing.T) {
	long := strings.Repeat("A", 1<<20)
	for name, err := range map[string]error{
		"ID":      ID(long),
		"Region":  Region(long),
		"EnvName": EnvName(long),
		"Image":   Image(long + ":"),
	} {
		if err == nil {
			t.Fatalf("%s accepted a 1 MiB value", name)
		}
		if len(err.Error()) > 512 {
			t.Errorf("%s: the error repeats the value: %d bytes", name, len(err.Error()))
		}
	}
	if got := Quote("api"); got != `"api"` {
		t.Errorf(`Quote("api") = %s`, got)
	}
}

// Text turns any bytes into UTF-8 no longer than asked, so that an error's
// text never stops a report from encoding.
func TestTextIsValidUTF8WithinItsLength(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"apply failed", 100, "apply failed"},
		{"bad \xff\xfe byte", 100, "bad \uFFFD byte"},
		{"é" + strings.Repeat("x", 10), 1, ""}, // never half a character
		{"xé", 2, "x"},
	} {
		got := Text(c.in, c.n)
		if got != c.want || !utf8.ValidString(got) || len(got) > c.n {
			t.Errorf("Text(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
