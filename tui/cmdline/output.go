package cmdline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/deploysync/deploysync/tui"
)

// What the one-shot commands print: a table (or one line) for people, or,
// with --output json, one JSON document for scripts. docs/cli-json.md is
// the contract for the JSON; keep it in step.

const (
	outputTable = "table"
	outputJSON  = "json"
)

func outputFlag() cli.Flag {
	return &cli.StringFlag{Name: "output", Value: outputTable, EnvVars: env("output"),
		Usage: "what the one-shot commands print: table (for people) or json (one document on stdout, fields in docs/cli-json.md)"}
}

// checkOutput is the app's Before: it refuses an unknown --output and
// records the mode for run, which prints a failed command's error document.
func checkOutput(c *cli.Context) error {
	switch o := c.String("output"); o {
	case outputTable, outputJSON:
		c.App.Metadata["output"] = o
		return nil
	default:
		return fmt.Errorf("--output %q: want %s or %s", o, outputTable, outputJSON)
	}
}

func jsonOutput(c *cli.Context) bool { return c.String("output") == outputJSON }

// printList prints a list call's response: as JSON, the message itself with
// its proto field names (protojson); otherwise table writes the rows, which
// must pass server text through tui.Clean.
func printList(c *cli.Context, m proto.Message, table func(w io.Writer) error) error {
	if !jsonOutput(c) {
		return table(c.App.Writer)
	}
	// Every field, zero or not, so that a script finds each documented
	// name in every document.
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	return writeJSON(c.App.Writer, json.RawMessage(b))
}

// result is what a command that changes something prints: Message as a
// line, or the whole of it as JSON.
type result struct {
	// Action is the command's name: deploy, update, rollback, stop,
	// start, scale, pause, resume or resync.
	Action       string `json:"action"`
	DeploymentID string `json:"deployment_id,omitempty"`
	// Regions are the regions acted in, named even when AllRegions.
	Regions    []string `json:"regions"`
	AllRegions bool     `json:"all_regions"`
	Replicas   *int32   `json:"replicas,omitempty"`
	// Revision is the revision an update or rollback made; Restored the
	// one a rollback restored.
	Revision *int32 `json:"revision,omitempty"`
	Restored *int32 `json:"restored,omitempty"`
	Message  string `json:"message"`
}

// where names the regions a result acted in: "eu-west", "eu-west, us-east",
// or "every region (eu-west, us-east)"; just "every region" when ctrld did
// not list the deployment's regions (see target).
func where(regions []string, all bool) string {
	list := strings.Join(regions, ", ")
	switch {
	case !all:
		return list
	case list == "":
		return "every region"
	}
	return "every region (" + list + ")"
}

func printResult(c *cli.Context, r result) error {
	if jsonOutput(c) {
		return writeJSON(c.App.Writer, r)
	}
	_, err := fmt.Fprintln(c.App.Writer, tui.Clean(r.Message))
	return err
}

// writeJSON writes v as one indented JSON document and a newline, with
// every character tui.Clean would keep from a terminal escaped.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, escapeUnsafe(b), "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = out.WriteTo(w)
	return err
}

// escapeUnsafe returns the compact JSON document b with every character
// tui.Unsafe names written as a \uXXXX escape (a surrogate pair outside
// the Basic Multilingual Plane), and any byte that is not UTF-8 as \ufffd.
// encoding/json and protojson escape only what JSON requires (below
// U+0020), so agent-written text would reach a terminal with its C1
// controls (0x9b is CSI: "\x1b[" in one character), DEL, bidi overrides
// and zero-width characters intact. A script decodes the same text either
// way.
//
// Outside strings a compact document holds only ASCII punctuation, digits
// and letters, so every character escaped here is inside a string, where
// an escape means the character itself.
func escapeUnsafe(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n == 1:
			out = append(out, `\ufffd`...)
		case r < ' ' || !tui.Unsafe(r): // below ' ', already escaped
			out = append(out, b[:n]...)
		case r > 0xffff:
			hi, lo := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, hi, lo)
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		b = b[n:]
	}
	return out
}

// usageOnStderr is the OnUsageError of the app (template and data: its
// help) and of each command: urfave/cli would print a refused command
// line's usage on stdout, where a script reads the result (with --output
// json, the error document), so it goes to stderr, after the reason.
func usageOnStderr(template string, data any) cli.OnUsageErrorFunc {
	return func(c *cli.Context, err error, _ bool) error {
		fmt.Fprintf(c.App.ErrWriter, "Incorrect Usage: %v\n\n", err)
		cli.HelpPrinter(c.App.ErrWriter, template, data)
		return err
	}
}

// onUsageErrorOnStderr sets usageOnStderr on each of cmds and on their
// subcommands, all the way down.
func onUsageErrorOnStderr(cmds []*cli.Command) {
	for _, cmd := range cmds {
		template := cli.CommandHelpTemplate
		if len(cmd.Subcommands) > 0 {
			template = cli.SubcommandHelpTemplate
		}
		cmd.OnUsageError = usageOnStderr(template, cmd)
		onUsageErrorOnStderr(cmd.Subcommands)
	}
}

// callError is ctrld's answer to a failed call. Its text is what the
// console shows (the code and ctrld's message, cleaned for a terminal);
// the JSON error document carries the code and the raw message.
type callError struct{ *status.Status }

func (e callError) Error() string { return tui.ErrorText(e.Err()) }

// asCallError turns an error with a gRPC status into a callError, and
// leaves the others (refused before any call) as they are.
func asCallError(err error) error {
	if s, ok := status.FromError(err); ok && err != nil {
		return callError{s}
	}
	return err
}

// errorDocument is what a failed command prints on stdout with --output
// json: ctrld's code and message, or InvalidArgument and the reason when
// unkey-tui refused the command line before calling ctrld.
func errorDocument(err error) any {
	type detail struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	d := detail{Code: "InvalidArgument", Message: err.Error()}
	var ce callError
	if errors.As(err, &ce) {
		d = detail{Code: ce.Code().String(), Message: ce.Message()}
	}
	return struct {
		Error detail `json:"error"`
	}{d}
}
