package auth

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"net"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/deploysync/deploysync/ent/apitoken"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// sessionPrefix marks a session credential (see Sessions).
const sessionPrefix = "dss_"

// InProcessNetwork is the network of the listener ctrld serves its own
// SSH console on (net.Addr.Network of its connections): session
// credentials are taken on connections of this network only.
const InProcessNetwork = "bufconn"

// SessionIdentity is the person an SSH console session acts for: the
// registered key they proved they hold, its operator's name and role, and
// where the session came in from.
type SessionIdentity struct {
	Name        string
	Fingerprint string // the key's, "SHA256:…"
	RemoteAddr  string
	ReadOnly    bool
	// Logs: the key was granted reading pods' logs (a permission of its
	// own: logs may carry secrets), whatever its role.
	Logs bool
}

// Sessions are the credentials of the live SSH console sessions of this
// process. A credential is minted when a session starts, lives in memory
// only (never written, never sent off the process: only connections to
// the in-process listener may present one) and dies when the session ends.
// So no credential exists that could act for someone without a live
// session of theirs, and none outlives it.
type Sessions struct {
	mu     sync.Mutex
	byHash map[string]SessionIdentity
}

// NewSessions returns an empty set.
func NewSessions() *Sessions { return &Sessions{byHash: map[string]SessionIdentity{}} }

// Mint returns a new credential acting for id, and the function that
// revokes it (call it when the session ends; calling it again is a no-op).
func (s *Sessions) Mint(id SessionIdentity) (credential string, revoke func()) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		panic(fmt.Sprintf("auth: no randomness for a session credential: %v", err))
	}
	credential = sessionPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(secret))
	h := hash(credential)
	s.mu.Lock()
	s.byHash[h] = id
	s.mu.Unlock()
	return credential, func() {
		s.mu.Lock()
		delete(s.byHash, h)
		s.mu.Unlock()
	}
}

// Live is how many credentials are live (for tests and metrics).
func (s *Sessions) Live() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byHash)
}

// live reports whether hash is a live credential's; a nil s has none.
func (s *Sessions) live(hash string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.byHash[hash]
	return ok
}

func (s *Sessions) lookup(credential string) (SessionIdentity, string, bool) {
	h := hash(credential)
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.byHash[h]
	return id, h, ok
}

// IsRead reports whether fullMethod only reads: one of readMethods.
// Everything else is a write, which a read-only session may not call
// (deny by default: a new method is a write until named a read here).
func IsRead(fullMethod string) bool { return readMethods[fullMethod] }

// readMethods are the operator service's methods that change nothing,
// named one by one (a name prefix would make a new "GetOrCreate…" a
// read). writeMethods are the others; a test fails while a method of the
// service is in neither, so each new one is classified on purpose.
var (
	readMethods = map[string]bool{
		ctrlv1.OperatorService_ListRegions_FullMethodName:          true,
		ctrlv1.OperatorService_GetRegion_FullMethodName:            true,
		ctrlv1.OperatorService_ListPendingChanges_FullMethodName:   true,
		ctrlv1.OperatorService_ListDeployments_FullMethodName:      true,
		ctrlv1.OperatorService_GetDeploymentHistory_FullMethodName: true,
		ctrlv1.OperatorService_GetRollout_FullMethodName:           true,
		ctrlv1.OperatorService_ListRollouts_FullMethodName:         true,
		ctrlv1.OperatorService_GetRolloutStrategy_FullMethodName:   true,
		ctrlv1.OperatorService_GetDesiredState_FullMethodName:      true,
		ctrlv1.OperatorService_ListPods_FullMethodName:             true,
		ctrlv1.OperatorService_ListEvents_FullMethodName:           true,
		ctrlv1.OperatorService_GetFleet_FullMethodName:             true,
	}
	// logMethods change nothing, but show what only a key granted logs
	// may see (logs may carry secrets), whatever its role.
	logMethods = map[string]bool{
		ctrlv1.OperatorService_StreamLogs_FullMethodName: true,
	}
	writeMethods = map[string]bool{
		ctrlv1.OperatorService_Deploy_FullMethodName:                    true,
		ctrlv1.OperatorService_SetDesiredStatus_FullMethodName:          true,
		ctrlv1.OperatorService_Scale_FullMethodName:                     true,
		ctrlv1.OperatorService_UpdateDeployment_FullMethodName:          true,
		ctrlv1.OperatorService_RollbackDeployment_FullMethodName:        true,
		ctrlv1.OperatorService_DeleteDeployment_FullMethodName:          true,
		ctrlv1.OperatorService_PutSentinel_FullMethodName:               true,
		ctrlv1.OperatorService_DeleteSentinel_FullMethodName:            true,
		ctrlv1.OperatorService_PutCiliumNetworkPolicy_FullMethodName:    true,
		ctrlv1.OperatorService_DeleteCiliumNetworkPolicy_FullMethodName: true,
		ctrlv1.OperatorService_ForceResync_FullMethodName:               true,
		ctrlv1.OperatorService_SetRegionPaused_FullMethodName:           true,
		ctrlv1.OperatorService_ControlRollout_FullMethodName:            true,
		ctrlv1.OperatorService_SetRolloutStrategy_FullMethodName:        true,
		ctrlv1.OperatorService_HaltRollouts_FullMethodName:              true,
		ctrlv1.OperatorService_ResumeRollouts_FullMethodName:            true,
		ctrlv1.OperatorService_SetFreezeWindow_FullMethodName:           true,
		ctrlv1.OperatorService_DeleteFreezeWindow_FullMethodName:        true,
		ctrlv1.OperatorService_SetPacingBound_FullMethodName:            true,
	}
)

// Actor names the caller in the audit log: an operator token's name, or a
// console session's person with their key and where they came from.
func (p Principal) Actor() string {
	if p.Session == nil {
		return p.Name
	}
	return fmt.Sprintf("%s (ssh key %s from %s)", p.Name, p.Session.Fingerprint, p.Session.RemoteAddr)
}

// credentialID names the credential p called with, stable across its
// calls: the token's ID, or a console session's key and the address it
// came from. Refusals are gathered under it, one audit row each: a key
// used from a second address (stolen, say) gets a row of its own, not a
// count in its owner's. (Actor also names a session's source port, which
// changes with every connection: refusals gathered under it would take a
// new place per reconnect.)
func (p Principal) credentialID() string {
	if p.Session != nil {
		host, _, err := net.SplitHostPort(p.Session.RemoteAddr)
		if err != nil {
			host = p.Session.RemoteAddr
		}
		return "ssh key " + p.Session.Fingerprint + " from " + host
	}
	return p.ID
}

// authenticateSession admits a call carrying a session credential, or
// refuses it. On a refusal by role, the session's principal names it for the audit.
func (a *Authenticator) authenticateSession(ctx context.Context, fullMethod string, kind apitoken.Kind, credential string) (context.Context, *Principal, error) {
	if a.Sessions == nil {
		return nil, nil, status.Error(codes.Unauthenticated, "unknown or revoked token")
	}
	if p, ok := peer.FromContext(ctx); !ok || p.Addr == nil || p.Addr.Network() != InProcessNetwork {
		// A session credential never leaves the process; one arriving
		// over the network was stolen from memory or guessed.
		return nil, nil, status.Error(codes.Unauthenticated, "unknown or revoked token")
	}
	id, h, ok := a.Sessions.lookup(credential)
	if !ok {
		return nil, nil, status.Error(codes.Unauthenticated, "console session ended")
	}
	p := Principal{Kind: Operator, Name: id.Name, Session: &id, tokenHash: h}
	if kind != Operator {
		return nil, &p, status.Errorf(codes.PermissionDenied, "a console session cannot call %s", serviceOf(fullMethod))
	}
	switch {
	case logMethods[fullMethod] && !id.Logs && id.ReadOnly:
		return nil, &p, status.Errorf(codes.PermissionDenied, "%s's key %s is read-only: it may see pods and events, not logs, which may carry secrets (reading them is a grant of its own: ctrld operator add-key --logs)", id.Name, id.Fingerprint)
	case logMethods[fullMethod] && !id.Logs:
		return nil, &p, status.Errorf(codes.PermissionDenied, "%s's key %s may act, not read logs, which may carry secrets (reading them is a grant of its own: ctrld operator add-key --logs)", id.Name, id.Fingerprint)
	case logMethods[fullMethod]:
		return WithPrincipal(ctx, p), nil, nil
	}
	if id.ReadOnly && !IsRead(fullMethod) {
		return nil, &p, status.Errorf(codes.PermissionDenied, "%s's key %s is read-only: it may look, not change anything (ask for the operator role: ctrld operator add-key --role operator)", id.Name, id.Fingerprint)
	}
	return WithPrincipal(ctx, p), nil, nil
}
