package validate

import (
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

func TestReplicasAndPositive(t *testing.T) {
	for n, ok := range map[int]bool{-1: false, 0: true, 1000: true, 1001: false} {
		if (Replicas(n) == nil) != ok {
			t.Errorf("Replicas(%d) ok=%v, want %v", n, Replicas(n) == nil, ok)
		}
	}
	if Positive(0) == nil || Positive(-5) == nil || Positive(1) != nil {
		t.Error("Positive must accept only n > 0")
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
