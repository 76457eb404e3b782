package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/deploysync/deploysync/daemon/auth"
	"github.com/deploysync/deploysync/internal/testdb"
)

// ctrld runs the ctrld command line with args and returns what it printed
// to stdout and stderr. The database is CTRLD_DATABASE_DSN's.
func ctrld(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	a := app()
	a.Writer, a.ErrWriter = &out, &errOut
	err = a.Run(append([]string{"ctrld"}, args...))
	return out.String(), errOut.String(), err
}

// The token commands as an operator rotating a leaked agent token uses
// them: create prints the token alone on stdout and its ID on stderr; list
// shows the IDs; revoking the name both tokens share is refused, naming
// both IDs, and revokes nothing; revoking the old ID leaves the new token.
func TestTokenCommandsRotateAnAgentToken(t *testing.T) {
	t.Setenv("CTRLD_DATABASE_DSN", testdb.New(t).DSN)
	if _, _, err := ctrld(t, "migrate"); err != nil {
		t.Fatal(err)
	}
	idPattern := regexp.MustCompile(`tok_[0-9a-f]{12}`)
	create := func() (token, id string) {
		out, errOut, err := ctrld(t, "token", "create", "--region", "eu")
		if err != nil {
			t.Fatal(err)
		}
		token = strings.TrimSpace(out)
		if strings.Contains(token, "\n") || !strings.HasPrefix(token, "dsa_") {
			t.Fatalf("token create printed %q on stdout, want the token alone", out)
		}
		id = auth.TokenID(token)
		if idPattern.FindString(errOut) != id {
			t.Fatalf("token create said %q on stderr, want its ID %s", errOut, id)
		}
		return token, id
	}
	_, oldID := create()
	_, newID := create()
	listed := func() []string {
		out, _, err := ctrld(t, "token", "list")
		if err != nil {
			t.Fatal(err)
		}
		return idPattern.FindAllString(out, -1)
	}
	if got := listed(); len(got) != 2 || got[0] != oldID || got[1] != newID {
		t.Fatalf("token list shows %v, want %s and %s", got, oldID, newID)
	}

	_, _, err := ctrld(t, "token", "revoke", "agent-eu")
	if err == nil || !strings.Contains(err.Error(), oldID) || !strings.Contains(err.Error(), newID) || !strings.Contains(err.Error(), "nothing was revoked") {
		t.Fatalf("token revoke agent-eu, a name two live tokens share: got %v, want a refusal listing %s and %s", err, oldID, newID)
	}
	if got := listed(); len(got) != 2 {
		t.Fatalf("after the refused revoke, token list shows %v, want both tokens", got)
	}
	out, _, err := ctrld(t, "token", "revoke", oldID)
	if err != nil || !strings.Contains(out, oldID) {
		t.Fatalf("token revoke %s: %q, %v", oldID, out, err)
	}
	if got := listed(); len(got) != 1 || got[0] != newID {
		t.Fatalf("after revoking %s, token list shows %v, want only %s", oldID, got, newID)
	}
	out, _, err = ctrld(t, "token", "list", "--all")
	if err != nil || !strings.Contains(out, oldID) {
		t.Fatalf("token list --all: %q, %v; want the revoked %s too", out, err, oldID)
	}
}

// An operator token reads logs only when created with --logs, and `token
// list` says which do; an agent token takes no such grant.
func TestTokenCreateLogsGrant(t *testing.T) {
	t.Setenv("CTRLD_DATABASE_DSN", testdb.New(t).DSN)
	if _, _, err := ctrld(t, "migrate"); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for name, args := range map[string][]string{"carol": {"--operator", "carol"}, "dora": {"--operator", "dora", "--logs"}} {
		out, errOut, err := ctrld(t, append([]string{"token", "create"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = auth.TokenID(strings.TrimSpace(out))
		if granted := strings.Contains(errOut, "may read logs"); granted != (name == "dora") {
			t.Errorf("token create %v said %q", args, errOut)
		}
	}
	if _, _, err := ctrld(t, "token", "create", "--region", "eu", "--logs"); err == nil || !strings.Contains(err.Error(), "--operator NAME --logs") {
		t.Errorf("an agent token with --logs: %v, want a refusal", err)
	}
	out, _, err := ctrld(t, "token", "list")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "LOGS") {
		t.Errorf("token list has no LOGS column:\n%s", out)
	}
	for name, want := range map[string]string{"carol": "no", "dora": "yes"} {
		line := regexp.MustCompile(ids[name] + `.*`).FindString(out)
		if fields := strings.Fields(line); len(fields) < 5 || fields[4] != want {
			t.Errorf("token list shows %s as %q, want LOGS %s:\n%s", name, line, want, out)
		}
	}
}
