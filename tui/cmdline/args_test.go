package cmdline

import (
	"slices"
	"strings"
	"testing"
)

func TestFlagsFirst(t *testing.T) {
	for in, want := range map[string]string{
		// Nothing to move.
		"unkey-tui":                              "unkey-tui",
		"unkey-tui --insecure":                   "unkey-tui --insecure",
		"unkey-tui --insecure regions":           "unkey-tui --insecure regions",
		"unkey-tui stop --region eu -- api":      "unkey-tui stop --region eu -- api",
		"unkey-tui --token t stop --all-regions": "unkey-tui --token t stop --all-regions",
		// Command flags after arguments, with and without "=".
		"unkey-tui stop api --region eu":           "unkey-tui stop --region eu -- api",
		"unkey-tui scale api --region=eu 3":        "unkey-tui scale --region=eu -- api 3",
		"unkey-tui stop api --all-regions":         "unkey-tui stop --all-regions -- api",
		"unkey-tui deploy api --env A=1 --image x": "unkey-tui deploy --env A=1 --image x -- api",
		// Global flags after the command go in front of it.
		"unkey-tui stop api --ctrld-address h:1 --insecure --region eu": "unkey-tui --ctrld-address h:1 --insecure stop --region eu -- api",
		// A negative number is an argument; "--" keeps what follows.
		"unkey-tui scale api -1 --region eu":     "unkey-tui scale --region eu -- api -1",
		"unkey-tui scale --region eu -- api --x": "unkey-tui scale --region eu -- api --x",
		// Unknown flags stay with the command, whose parser names them.
		"unkey-tui stop api --regoin eu": "unkey-tui stop --regoin -- api eu",
		// Subcommands are followed down; their flags go after the last.
		"unkey-tui rollout strategy set ws prod --wave eu --on-failure pause": "unkey-tui rollout strategy set --wave eu --on-failure pause -- ws prod",
		"unkey-tui rollout status api --output json":                          "unkey-tui --output json rollout status -- api",
		"unkey-tui rollout --output json list --in-flight":                    "unkey-tui --output json rollout list --in-flight",
		"unkey-tui rollout promote api":                                       "unkey-tui rollout promote -- api",
		"unkey-tui rollout nosuch api":                                        "unkey-tui rollout -- nosuch api",
		// An unknown command is left for the app to refuse.
		"unkey-tui stpo api --region eu": "unkey-tui stpo api --region eu",
	} {
		got := strings.Join(flagsFirst(App(), strings.Fields(in)), " ")
		if got != want {
			t.Errorf("flagsFirst(%s)\n got %s\nwant %s", in, got, want)
		}
	}
	args := []string{"unkey-tui", "stop", "api", "--region", "eu"}
	flagsFirst(App(), args)
	if !slices.Equal(args, []string{"unkey-tui", "stop", "api", "--region", "eu"}) {
		t.Fatalf("flagsFirst changed its input: %v", args)
	}
}

// The command a line names, for the SSH door's log: command names only,
// never an argument or a flag's value.
func TestCommandName(t *testing.T) {
	for in, want := range map[string]string{
		"regions --output json":                  "regions",
		"--output json regions":                  "regions",
		"--env=DB_PASSWORD=hunter2 regions":      "regions",
		"--env=DB_PASSWORD=hunter2":              "",
		"--output regions":                       "",
		"hunter2 --output json":                  "",
		"deploy api --env DB_PASSWORD=hunter2":   "deploy",
		"rollout --output json promote api":      "rollout promote",
		"rollout strategy set ws prod --wave eu": "rollout strategy set",
		"rollout hunter2 promote":                "rollout",
		"stop -- --region":                       "stop",
		"":                                       "",
	} {
		if got := CommandName(SessionApp(nil, nil, nil), strings.Fields(in)); got != want {
			t.Errorf("CommandName(%q) = %q, want %q", in, got, want)
		}
	}
}
