package bearer

import (
	"context"
	"strings"

	"google.golang.org/grpc/metadata"
)

// header is the metadata key the token travels in.
const header = "authorization"

// Credentials attaches Token to every call (client side); it implements
// credentials.PerRPCCredentials.
type Credentials struct {
	Token string
	// Insecure allows sending the token without TLS (loopback, tests).
	Insecure bool
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (c Credentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{header: "Bearer " + c.Token}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (c Credentials) RequireTransportSecurity() bool { return !c.Insecure }

// FromMetadata returns the token of an "authorization: Bearer <token>"
// header in md, or "" (server side). The scheme is case-insensitive (RFC
// 7235 section 2.1, on which RFC 6750 builds), and one or more spaces may
// follow it. Of several such headers, the last counts.
func FromMetadata(md metadata.MD) string {
	var token string
	for _, v := range md.Get(header) {
		if scheme, t, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Bearer") {
			token = strings.TrimSpace(t)
		}
	}
	return token
}
