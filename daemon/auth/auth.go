package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/daemon/desired"
	"github.com/deploysync/deploysync/daemon/store"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/apitoken"
	"github.com/deploysync/deploysync/internal/bearer"
	"github.com/deploysync/deploysync/internal/validate"
)

// Kinds of token.
const (
	Agent    = apitoken.KindAgent
	Operator = apitoken.KindOperator
)

// Token prefixes make a leaked token recognisable.
const (
	agentPrefix    = "dsa_"
	operatorPrefix = "dso_"
)

// ErrNameTaken is returned by Create for an operator token named like one
// that is live: the audit log could not tell their holders apart.
var ErrNameTaken = errors.New("taken by a live operator token")

// Principal is who a request comes from.
type Principal struct {
	Kind   apitoken.Kind
	Name   string
	Region string // agents only
	// ID is the token's (TokenID); empty for a console session.
	ID string
	// Session is the person an SSH console session acts for; nil for a
	// token's caller.
	Session *SessionIdentity

	tokenHash string
}

// Create issues a token and returns it; only its hash is stored, with the
// token's ID (TokenID), which names it to people. Agent
// tokens need a region, which is registered if new. An operator token's
// name must not be taken by a live operator token (ErrNameTaken): the audit
// log names operators by it. Agent tokens may share a name, in a region or
// across regions: the audit log does not name them, and a cluster's agent
// replicas, or an old and a new token during a rotation, may well carry the
// same one ("agent-<region>" is the CLI's default); their IDs tell them
// apart. A name may not look like an ID (IDPrefix).
//
// The database decides who gets a name: an operator token stores it in
// live_operator_name, which has a unique index. Of concurrent creators of
// one name, the first insert wins and the others wait for it, then fail on
// the index; creators of different names never wait for each other. (A
// locking read checking the name first locked the gap the name falls in,
// which on a sparse table is the gap of every new name, and concurrent
// creators deadlocked inserting into each other's locked gap.)
func Create(ctx context.Context, client *ent.Client, kind apitoken.Kind, name, region string) (string, error) {
	return CreateWith(ctx, client, kind, name, region, Grants{})
}

// Grants are what an operator token may do beyond the operator service's
// calls, each given on purpose; agent tokens get none.
type Grants struct {
	// Logs: the token may read pods' logs (StreamLogs). Logs may carry
	// secrets, so it is a grant of its own, as a console key's is
	// (operator_keys.logs).
	Logs bool
}

// CreateWith is Create, with what an operator token is granted besides.
// A grant is for the token's life: a token that should read logs is a
// new one.
func CreateWith(ctx context.Context, client *ent.Client, kind apitoken.Kind, name, region string, grants Grants) (string, error) {
	if name == "" {
		return "", fmt.Errorf("name: must not be empty")
	}
	if strings.HasPrefix(name, IDPrefix) {
		return "", fmt.Errorf("name %q: must not begin with %q, which marks token IDs", name, IDPrefix)
	}
	prefix := operatorPrefix
	if kind == Agent {
		if err := validate.Region(region); err != nil {
			return "", fmt.Errorf("region: %w", err)
		}
		prefix = agentPrefix
	} else {
		region = ""
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", err
	}
	token := prefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(secret))
	err := store.WithTx(ctx, client, func(tx *ent.Tx) error {
		if kind == Agent {
			if err := desired.RegisterRegion(ctx, tx.Client(), region); err != nil {
				return fmt.Errorf("register region: %w", err)
			}
		}
		create := tx.APIToken.Create().SetKind(kind).SetName(name).SetRegion(region).SetHash(hash(token)).SetPublicID(TokenID(token))
		if kind == Operator {
			create.SetLiveOperatorName(name).SetLogs(grants.Logs)
		}
		err := create.Exec(ctx)
		if kind == Operator && ent.IsConstraintError(err) {
			return fmt.Errorf("name %q: %w; revoke it first (ctrld token revoke --operator %s) or pick another name", name, ErrNameTaken, name)
		}
		if err != nil {
			return fmt.Errorf("store token: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return token, nil
}

func hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Authenticator checks bearer tokens on gRPC calls, and again on streams
// while they run (see Run).
type Authenticator struct {
	client  *ent.Client
	lookups *tokenLookups
	// services maps a full gRPC service name to the token kind it admits.
	services map[string]apitoken.Kind
	streams  liveStreams
	// selfChecked are the full methods that take no token and check their
	// callers themselves (see SelfChecked).
	selfChecked map[string]bool
	// OnOperatorRefusal, if set, hears of every operator call refused
	// here (the operator service audits them). It is called on the
	// call's path, once the token is checked, and must not wait on
	// anything shared: a leaked token can send any number of such calls.
	OnOperatorRefusal func(context.Context, Refusal)
	// Sessions, if set, admits the credentials of this process's SSH
	// console sessions (see Sessions).
	Sessions *Sessions
}

// NewAuthenticator admits agent tokens to agentService and operator tokens
// to operatorService; other services (health, reflection) need none.
func NewAuthenticator(client *ent.Client, agentService, operatorService string) *Authenticator {
	return &Authenticator{client: client, lookups: newTokenLookups(client), services: map[string]apitoken.Kind{
		agentService:    Agent,
		operatorService: Operator,
	}, streams: liveStreams{byHash: map[string]map[*streamEnd]struct{}{}}, selfChecked: map[string]bool{}}
}

// selfCheckedService is the kind of a service that has SelfChecked methods:
// no token admits any of its methods.
const selfCheckedService apitoken.Kind = ""

// SelfChecked lets fullMethod ("/pkg.Service/Method") through without a
// bearer token, to a handler that checks its caller itself (ctrld replicas'
// Poke, which checks the secret its target registered in the database).
// Every other method of that service is refused, whatever token it
// carries. Call it before the server serves, and never for a method of a
// service that tokens admit: their holders would lose it.
func (a *Authenticator) SelfChecked(fullMethod string) {
	if kind, ok := a.services[serviceOf(fullMethod)]; ok && kind != selfCheckedService {
		panic(fmt.Sprintf("auth: %s belongs to the service %s tokens admit", fullMethod, kind))
	}
	a.selfChecked[fullMethod] = true
	a.services[serviceOf(fullMethod)] = selfCheckedService
}

type principalKey struct{}

// Token identifies the caller's token (its hash): calls made with one
// token share its limits.
func (p Principal) Token() string { return p.tokenHash }

// FromContext returns the authenticated caller.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// WithPrincipal returns ctx carrying p (for tests of handlers).
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// authenticate admits the caller of fullMethod, or refuses it; a known
// caller it refuses (a token of the wrong kind, or without the grant the
// method needs) is returned with its refusal. Tokens are looked
// up a bounded number at once, and unknown ones are remembered for a
// while (tokenLookups): no number of calls with bad tokens takes more of
// the main pool than that.
func (a *Authenticator) authenticate(ctx context.Context, fullMethod string) (_ context.Context, refused *Principal, _ error) {
	service := serviceOf(fullMethod)
	kind, guarded := a.services[service]
	if !guarded || a.selfChecked[fullMethod] {
		return ctx, nil, nil
	}
	if kind == selfCheckedService {
		return nil, nil, status.Errorf(codes.PermissionDenied, "%s is not open to callers", fullMethod)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	token := bearer.FromMetadata(md)
	if token == "" {
		return nil, nil, status.Error(codes.Unauthenticated, "missing bearer token (authorization: Bearer <token>)")
	}
	if strings.HasPrefix(token, sessionPrefix) {
		return a.authenticateSession(ctx, fullMethod, kind, token)
	}
	t, err := a.lookups.live(ctx, token)
	if err != nil {
		return nil, nil, err
	}
	p := Principal{Kind: t.Kind, Name: t.Name, Region: t.Region, ID: t.PublicID, tokenHash: t.Hash}
	if t.Kind != kind {
		return nil, &p, status.Errorf(codes.PermissionDenied, "a %s token cannot call %s", t.Kind, service)
	}
	if logMethods[fullMethod] && !t.Logs {
		return nil, &p, status.Errorf(codes.PermissionDenied, "operator token %q (%s) may not read logs, which may carry secrets: "+
			"reading them is a grant of its own, given when a token is created (ctrld token create --operator NAME --logs, a new token)", t.Name, t.PublicID)
	}
	return WithPrincipal(ctx, p), nil, nil
}

// serviceOf returns the service of a full gRPC method name
// ("/pkg.Service/Method").
func serviceOf(fullMethod string) string {
	if i := strings.LastIndex(fullMethod, "/"); i > 0 {
		return strings.TrimPrefix(fullMethod[:i], "/")
	}
	return fullMethod
}

// Refusal is an operator call refused before it reached the operator
// service: for a known caller (TokenName and TokenID: a token of another
// kind, a read-only key's write, a token or key without the logs grant
// reading logs) or for no valid token at all.
type Refusal struct {
	Method    string // the full gRPC method
	TokenName string // the token's name when the token is known, else ""
	TokenID   string // the token's ID (TokenID), or a console session's "ssh key FINGERPRINT from HOST", when the caller is known: what identical refusals are gathered under
	Request   any
	Err       error
}

// Unary is the unary-call interceptor. An operator call it refuses is
// handed to OnOperatorRefusal, if set, so that the attempt is on record.
func (a *Authenticator) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	authed, refused, err := a.authenticate(ctx, info.FullMethod)
	if err != nil {
		a.refused(ctx, info.FullMethod, req, refused, err)
		return nil, err
	}
	return handler(authed, req)
}

// refused hands an operator call refused with err to OnOperatorRefusal,
// if set; who is the known caller it refused, or nil.
func (a *Authenticator) refused(ctx context.Context, fullMethod string, req any, who *Principal, err error) {
	if a.services[serviceOf(fullMethod)] != Operator || a.OnOperatorRefusal == nil {
		return
	}
	r := Refusal{Method: fullMethod, Request: req, Err: err}
	if who != nil {
		r.TokenName, r.TokenID = who.Actor(), who.credentialID()
	}
	a.OnOperatorRefusal(ctx, r)
}

// Stream is the streaming-call interceptor. An operator call it refuses
// (a log stream without the logs grant) is handed to OnOperatorRefusal,
// as Unary's are; its request is not read yet, so the record has none.
func (a *Authenticator) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, refused, err := a.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		a.refused(ss.Context(), info.FullMethod, nil, refused, err)
		return err
	}
	p, guarded := FromContext(ctx)
	if !guarded {
		return handler(srv, ss)
	}
	ctx, end := a.streams.add(ctx, p.tokenHash)
	defer a.streams.remove(p.tokenHash, end)
	err = handler(srv, &contextStream{ServerStream: ss, ctx: ctx})
	if revoked := context.Cause(ctx); errors.Is(revoked, errRevoked) {
		return status.Error(codes.Unauthenticated, "token revoked while streaming")
	}
	return err
}

type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }

// RequireRegion fails with PermissionDenied unless the caller is an agent
// of region.
func RequireRegion(ctx context.Context, region string) error {
	p, ok := FromContext(ctx)
	if !ok || p.Kind != Agent {
		return status.Error(codes.PermissionDenied, "an agent token is required")
	}
	if p.Region != region {
		return status.Errorf(codes.PermissionDenied, "token is bound to region %q, not %q", p.Region, region)
	}
	return nil
}
