package bearer_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/deploysync/deploysync/internal/bearer"
)

// What a client attaches is what ctrld reads back.
func TestCredentialsRoundTrip(t *testing.T) {
	for _, insecure := range []bool{false, true} {
		c := bearer.Credentials{Token: "dso_abc", Insecure: insecure}
		h, err := c.GetRequestMetadata(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := bearer.FromMetadata(metadata.New(h)); got != "dso_abc" {
			t.Errorf("insecure=%v: read back %q from %v", insecure, got, h)
		}
		if c.RequireTransportSecurity() == insecure {
			t.Errorf("insecure=%v: RequireTransportSecurity() = %v", insecure, !insecure)
		}
	}
}

// The scheme is case-insensitive and may be followed by several spaces;
// anything else yields no token.
func TestFromMetadata(t *testing.T) {
	for header, want := range map[string]string{
		"Bearer t":    "t",
		"bearer t":    "t",
		"BEARER t":    "t",
		"bEaReR   t ": "t",
		"t":           "",
		"Bearert":     "",
		"Basic t":     "",
		"Bearer ":     "",
		"bearer":      "",
	} {
		if got := bearer.FromMetadata(metadata.Pairs("authorization", header)); got != want {
			t.Errorf("%q: got %q, want %q", header, got, want)
		}
	}
	if got := bearer.FromMetadata(metadata.MD{}); got != "" {
		t.Errorf("no header: got %q", got)
	}
}
