package cmdline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
)

// waveSyntax is how a --wave is written, for help and errors.
const waveSyntax = "REGION[,REGION...] [bake=DURATION] [max-failures=N] [deadline=DURATION]"

// strategyHelp explains a strategy's flags, for the commands that take them.
const strategyHelp = `A rollout strategy is ordered waves of regions; each wave must pass its health gate (every
instance on the new spec and ready, no failed apply, no crash loop) for its bake time before
the next wave starts. Give one --wave per wave, in order, each one argument (quote it):

   --wave '` + waveSyntax + `'

   REGION    region names, comma-separated, no spaces; '*' is every region no other wave names
             (regions no wave names join the last wave)
   bake      how long the wave must stay healthy before the next starts (default 0s)
   max-failures  how many of the wave's regions may fail (default 0: a canary's)
   deadline  how long a region may take to turn healthy before it fails (default 10m)

DURATION is whole seconds written like 45s, 2m, 1h30m. --on-failure says what a failed wave
does: rollback (the default: every region it reached returns to the spec before) or pause
(everything holds for an operator: unkey-tui rollout resume|abort).

Example: --wave 'eu-west bake=60s' --wave 'us-east,ap-south bake=2m max-failures=1 deadline=10m' --wave '*'`

// overrideFlags are deploy's, update's and rollback's: a strategy of the
// call's own instead of the environment's.
func overrideFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "wave", Usage: "roll this change out in waves, instead of as the environment's strategy says: one --wave `WAVE` per wave, in order; WAVE is '" +
			waveSyntax + "' (more: unkey-tui rollout strategy set --help)"},
		&cli.StringFlag{Name: "on-failure", Usage: "with --wave: what a failed wave does, rollback (default) or pause"},
		&cli.StringFlag{Name: "checks", Usage: "with --wave: the metric, baseline and alert checks each promoted region must pass, from a YAML `FILE` (more: unkey-tui rollout strategy set --help)"},
		&cli.BoolFlag{Name: "immediate", Usage: "change every region at once, whatever the environment's strategy"},
	}
}

// overrideStrategy is the call's own strategy from overrideFlags: nil when
// none of them is given (the environment's applies), no waves for
// --immediate.
func overrideStrategy(c *cli.Context) (*ctrlv1.RolloutStrategy, error) {
	waves, onFailure, immediate := c.StringSlice("wave"), c.String("on-failure"), c.Bool("immediate")
	switch {
	case len(waves) == 0 && c.IsSet("checks"):
		return nil, errChecksWithoutWaves
	case immediate && (len(waves) > 0 || c.IsSet("on-failure")):
		return nil, errors.New("--immediate: give it alone, or --wave (with --on-failure), not both")
	case immediate:
		return &ctrlv1.RolloutStrategy{}, nil
	case len(waves) == 0 && c.IsSet("on-failure"):
		return nil, errors.New("--on-failure: give it with the --wave flags it is for")
	case len(waves) == 0:
		return nil, nil
	}
	s, err := parseStrategy(waves, onFailure)
	if err != nil {
		return nil, err
	}
	if c.IsSet("checks") {
		if s.Checks, err = readChecks(c.String("checks")); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// parseStrategy is --wave texts and --on-failure as a strategy.
func parseStrategy(waves []string, onFailure string) (*ctrlv1.RolloutStrategy, error) {
	switch onFailure {
	case "", "rollback", "pause":
	default:
		return nil, fmt.Errorf("--on-failure %q: want rollback or pause", onFailure)
	}
	s := &ctrlv1.RolloutStrategy{OnFailure: onFailure}
	for _, text := range waves {
		w, err := parseWave(text)
		if err != nil {
			return nil, fmt.Errorf("--wave %q: %w", text, err)
		}
		s.Waves = append(s.Waves, w)
	}
	return s, nil
}

// parseWave reads one wave as written after --wave: its regions, then
// KEY=VALUE settings (waveSyntax). Region names and the bounds of values
// are ctrld's to check; this refuses only what cannot be read.
func parseWave(text string) (*ctrlv1.RolloutWave, error) {
	fields := strings.Fields(text)
	if len(fields) == 0 {
		return nil, fmt.Errorf("empty; want %s", waveSyntax)
	}
	if strings.Contains(fields[0], "=") {
		return nil, fmt.Errorf("a wave starts with its regions (e.g. eu-west or us-east,ap-south), got %q", fields[0])
	}
	w := &ctrlv1.RolloutWave{Regions: strings.Split(fields[0], ",")}
	for _, r := range w.Regions {
		if r == "" {
			return nil, fmt.Errorf("regions %q: an empty region name (a stray comma? regions are one comma-separated word, no spaces)", fields[0])
		}
	}
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		key, value, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("%q: regions are one comma-separated word with no spaces (us-east,ap-south); settings are bake=, max-failures=, deadline=", f)
		}
		if seen[key] {
			return nil, fmt.Errorf("%s given twice", key)
		}
		seen[key] = true
		var err error
		switch key {
		case "bake":
			w.Bake, err = waveDuration(key, value)
		case "deadline":
			w.Deadline, err = waveDuration(key, value)
		case "max-failures":
			n, perr := strconv.Atoi(value)
			if perr != nil || n < 0 || n > math.MaxInt32 {
				return nil, fmt.Errorf("max-failures %q: want a whole number, 0 or more", value)
			}
			w.MaxFailures = int32(n)
		default:
			return nil, fmt.Errorf("unknown setting %q; want bake, max-failures or deadline", key)
		}
		if err != nil {
			return nil, err
		}
	}
	return w, nil
}

// waveDuration is a bake or deadline as written: whole seconds, not
// negative.
func waveDuration(key, value string) (*durationpb.Duration, error) {
	d, err := time.ParseDuration(value)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s %q: want a duration like 45s, 2m or 1h30m", key, value)
	case d < 0:
		return nil, fmt.Errorf("%s %q: must not be negative", key, value)
	case d%time.Second != 0:
		return nil, fmt.Errorf("%s %q: whole seconds only", key, value)
	}
	return durationpb.New(d), nil
}

// rolloutCommand is `rollout`: a deployment's rollout, what operators do
// with it, and environments' strategies.
func rolloutCommand() *cli.Command {
	return &cli.Command{
		Name:  "rollout",
		Usage: "show and control rollouts (changes that reach regions wave by wave) and environments' strategies",
		Description: "A deploy, update or rollback rolls out under its environment's strategy (see `rollout strategy`),\n" +
			"or its own (--wave, --immediate). A deployment has at most one rollout in flight; an update or\n" +
			"rollback meanwhile is refused (FailedPrecondition): promote, resume or abort it first.\n" +
			"None of these commands asks for confirmation (the console does).",
		Action: noSubcommand,
		Subcommands: []*cli.Command{
			{
				Name:      "status",
				Usage:     "print a deployment's rollout in flight (else its newest): waves, each region's state and time left, what comes next",
				ArgsUsage: "DEPLOYMENT_ID",
				Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
					if c.NArg() != 1 {
						return fmt.Errorf("want exactly one DEPLOYMENT_ID")
					}
					r, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: c.Args().First()})
					if err != nil {
						return err
					}
					return printList(c, r, func(out io.Writer) error { return rolloutText(out, r.Rollout) })
				}),
			},
			{
				Name:  "list",
				Usage: "print rollouts, those in flight first, then the newest",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "in-flight", Usage: "only those in flight (queued, progressing, paused or halted)"},
					&cli.IntFlag{Name: "limit", Usage: "at most this many (0: ctrld's default, 50; at most 500)"},
				},
				Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
					limit, err := int32Flag(c, "limit", 0, math.MaxInt32)
					if err != nil {
						return err
					}
					r, err := op.ListRollouts(ctx, &ctrlv1.ListRolloutsRequest{Limit: limit, InFlightOnly: c.Bool("in-flight")})
					if err != nil {
						return err
					}
					return printList(c, r, func(out io.Writer) error { return rolloutsTable(out, r.Rollouts) })
				}),
			},
			controlCommand("promote", "promoted", ctrlv1.RolloutAction_ROLLOUT_ACTION_PROMOTE,
				"pass the current wave now, skipping what is left of its bake, and start the next"),
			controlCommand("pause", "paused", ctrlv1.RolloutAction_ROLLOUT_ACTION_PAUSE,
				"hold a progressing rollout where it is (regions keep what they run)"),
			controlCommand("resume", "resumed", ctrlv1.RolloutAction_ROLLOUT_ACTION_RESUME,
				"let a paused or halted rollout go on (a halted one's failed regions get a new deadline)"),
			controlCommand("abort", "aborted", ctrlv1.RolloutAction_ROLLOUT_ACTION_ABORT,
				"roll back every region the rollout reached to the spec before, and end it"),
			breakGlassCommand(),
			{
				Name:   "strategy",
				Usage:  "show or set how an environment's changes roll out",
				Action: noSubcommand,
				Subcommands: []*cli.Command{
					{
						Name:      "show",
						Usage:     "print an environment's rollout strategy",
						ArgsUsage: "WORKSPACE_ID ENVIRONMENT_ID",
						Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
							if c.NArg() != 2 {
								return fmt.Errorf("want WORKSPACE_ID ENVIRONMENT_ID")
							}
							r, err := op.GetRolloutStrategy(ctx, &ctrlv1.GetRolloutStrategyRequest{WorkspaceId: c.Args().Get(0), EnvironmentId: c.Args().Get(1)})
							if err != nil {
								return err
							}
							return printList(c, r, func(out io.Writer) error { return strategyText(out, r.Strategy) })
						}),
					},
					{
						Name:        "set",
						Usage:       "set how an environment's deploys, updates and rollbacks roll out (--wave ..., or --immediate)",
						ArgsUsage:   "WORKSPACE_ID ENVIRONMENT_ID",
						Description: strategyHelp + "\n\n" + checksHelp + "\n\n--immediate sets no waves: every region at once, as before rollouts (the default).",
						Flags: []cli.Flag{
							&cli.StringSliceFlag{Name: "wave", Usage: "one `WAVE`, in order (repeat): '" + waveSyntax + "'"},
							&cli.StringFlag{Name: "on-failure", Usage: "what a failed wave does: rollback (default) or pause"},
							&cli.StringFlag{Name: "checks", Usage: "the metric, baseline and alert checks each promoted region must pass, from a YAML `FILE` (below)"},
							&cli.BoolFlag{Name: "immediate", Usage: "no waves: every region at once"},
						},
						Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
							if c.NArg() != 2 {
								return fmt.Errorf("want WORKSPACE_ID ENVIRONMENT_ID")
							}
							strategy, err := overrideStrategy(c)
							if err != nil {
								return err
							}
							if strategy == nil {
								return errors.New("give the waves (--wave, repeated), or --immediate for every region at once")
							}
							r, err := op.SetRolloutStrategy(ctx, &ctrlv1.SetRolloutStrategyRequest{
								WorkspaceId: c.Args().Get(0), EnvironmentId: c.Args().Get(1), Strategy: strategy})
							if err != nil {
								return err
							}
							return printList(c, r, func(out io.Writer) error {
								fmt.Fprintf(out, "set the rollout strategy of %s/%s:\n", tui.Clean(c.Args().Get(0)), tui.Clean(c.Args().Get(1)))
								return strategyText(out, r.Strategy)
							})
						}),
					},
				},
			},
		},
	}
}

// noSubcommand is the action of a command that only has subcommands: a
// missing or mistyped one fails (on stderr, with the usage), rather than
// printing help and succeeding.
func noSubcommand(c *cli.Context) error {
	cli.HelpPrinter(c.App.ErrWriter, cli.SubcommandHelpTemplate, c.Command)
	if !c.Args().Present() {
		return fmt.Errorf("%s: give a command (listed above)", c.Command.FullName())
	}
	return fmt.Errorf("%s: unknown command %q (the commands are listed above)", c.Command.FullName(), c.Args().First())
}

// fenceHelp explains the --expect-* flags of the commands that act on a
// rollout.
const fenceHelp = `--expect-rollout, --expect-revision, --expect-wave and --expect-version make the action
conditional on the rollout you looked at: 'rollout status' prints them (its "fence:" line; as
JSON, the rollout's id, revision, wave and version). Each one given must still match the rollout
in flight when ctrld acts: if the driver passed a wave meanwhile, another operator acted, or
another rollout started, nothing is done and ctrld answers FailedPrecondition saying what
changed ("the rollout you confirmed is progressing at wave 2 of 2 now (was 1), version 4 (was
2); nothing was done"). The version counts the steps of one rollout (a new rollout starts at
1 again), so give --expect-rollout with it; give all four to act on exactly what you saw.

Without them the action is on whatever rollout is in flight at the time, on purpose, for
scripts that mean that.

Example: unkey-tui rollout promote api --expect-rollout 12 --expect-revision 5 --expect-wave 1 --expect-version 3`

// fenceFlags are promote's, pause's, resume's and abort's: the rollout as
// the caller saw it (fenceHelp).
func fenceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.Int64Flag{Name: "expect-rollout", DefaultText: "not checked", Usage: "act only if the rollout in flight is rollout `ID` (its id in `rollout status --output json`)"},
		&cli.Int64Flag{Name: "expect-revision", DefaultText: "not checked", Usage: "act only if the rollout in flight moves to revision `N`"},
		&cli.Int64Flag{Name: "expect-wave", DefaultText: "not checked", Usage: "act only if the rollout in flight is at wave `N` (from 1, as status shows it)"},
		&cli.Int64Flag{Name: "expect-version", DefaultText: "not checked", Usage: "act only if the rollout in flight is at version `N` (every step increments it)"},
	}
}

// fence is the request's fence from fenceFlags: nil when none is given.
func fence(c *cli.Context) (*ctrlv1.RolloutFence, error) {
	var f ctrlv1.RolloutFence
	given := false
	for _, flag := range []struct {
		name string
		max  int64
		set  func(int64)
	}{
		{"expect-rollout", math.MaxInt64, func(n int64) { f.RolloutId = n }},
		{"expect-revision", math.MaxInt32, func(n int64) { f.Revision = int32(n) }},
		{"expect-wave", math.MaxInt32, func(n int64) { f.Wave = int32(n) }},
		{"expect-version", math.MaxInt64, func(n int64) { f.Version = n }},
	} {
		if !c.IsSet(flag.name) {
			continue
		}
		n := c.Int64(flag.name)
		if n < 1 || n > flag.max {
			return nil, fmt.Errorf("--%s %d: want %d..%d, as 'rollout status' shows it", flag.name, n, 1, flag.max)
		}
		flag.set(n)
		given = true
	}
	if !given {
		return nil, nil
	}
	return &f, nil
}

// controlCommand is `rollout promote|pause|resume|abort DEPLOYMENT_ID`.
func controlCommand(name, done string, action ctrlv1.RolloutAction, usage string) *cli.Command {
	return &cli.Command{
		Name:        name,
		Usage:       usage,
		ArgsUsage:   "DEPLOYMENT_ID",
		Description: fenceHelp,
		Flags:       fenceFlags(),
		Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
			if c.NArg() != 1 {
				return fmt.Errorf("want exactly one DEPLOYMENT_ID")
			}
			f, err := fence(c)
			if err != nil {
				return err
			}
			id := c.Args().First()
			r, err := op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: id, Action: action, Fence: f})
			if err != nil {
				return err
			}
			return printList(c, r, func(out io.Writer) error {
				fmt.Fprintf(out, "%s the rollout of %s\n", done, tui.Clean(id))
				return rolloutText(out, r.Rollout)
			})
		}),
	}
}

// rolloutText writes a rollout for people: what it moves, its state, a
// row per region in wave order, and what comes next.
func rolloutText(out io.Writer, r *ctrlv1.Rollout) error {
	move := fmt.Sprintf("revision %d -> %d", r.FromRevision, r.Revision)
	if r.FromRevision == 0 {
		move = fmt.Sprintf("revision %d (the first)", r.Revision)
	}
	image := tui.Clean(r.ToImage)
	if r.FromImage != "" && r.FromImage != r.ToImage {
		image = tui.Clean(r.FromImage) + " -> " + image
	}
	fmt.Fprintf(out, "%s: %s, image %s, by %s at %s\n", tui.Clean(r.DeploymentId), move, image, tui.Clean(r.Actor),
		r.CreatedAt.AsTime().UTC().Format(time.RFC3339))
	fmt.Fprintf(out, "state: %s, wave %d of %d (on failure: %s)\n", tui.Clean(r.State), r.Wave, len(r.GetStrategy().GetWaves()),
		tui.Clean(r.GetStrategy().GetOnFailure()))
	if r.Reason != "" {
		fmt.Fprintf(out, "reason: %s\n", tui.Clean(r.Reason))
	}
	holdText(out, r)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "WAVE\tREGION\tSTATE\tTIME LEFT\tWHY")
	for _, reg := range r.Regions {
		left := "-"
		switch {
		case reg.BakeLeft != nil:
			left = "bakes " + short(reg.BakeLeft.AsDuration()) + " more"
		case reg.DeadlineLeft != nil:
			left = "deadline in " + short(reg.DeadlineLeft.AsDuration())
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", reg.Wave, tui.Clean(reg.Region), tui.Clean(reg.State), left, tui.Clean(reg.Why))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := regionChecksText(out, r); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(out, "next: %s\n", tui.Clean(r.Next)); err != nil {
		return err
	}
	if r.FinishedAt != nil {
		return nil
	}
	// What to give promote, pause, resume or abort to act on this
	// rollout as shown, and on nothing else.
	_, err := fmt.Fprintf(out, "fence: --expect-rollout %d --expect-revision %d --expect-wave %d --expect-version %d\n",
		r.Id, r.Revision, r.Wave, r.Version)
	return err
}

// rolloutsTable writes one row per rollout.
func rolloutsTable(out io.Writer, rollouts []*ctrlv1.Rollout) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "DEPLOYMENT\tREV\tSTATE\tWAVE\tIMAGE\tSTARTED\tNEXT")
	for _, r := range rollouts {
		fmt.Fprintf(w, "%s\t%d -> %d\t%s\t%d/%d\t%s\t%s\t%s\n", tui.Clean(r.DeploymentId), r.FromRevision, r.Revision, tui.Clean(r.State),
			r.Wave, len(r.GetStrategy().GetWaves()), tui.Clean(r.ToImage), r.CreatedAt.AsTime().UTC().Format(time.RFC3339), tui.Clean(r.Next))
	}
	return w.Flush()
}

// strategyText writes a strategy for people, a line per wave.
func strategyText(out io.Writer, s *ctrlv1.RolloutStrategy) error {
	if len(s.GetWaves()) == 0 {
		_, err := fmt.Fprintln(out, "immediate: every region at once, no gate")
		return err
	}
	for i, w := range s.GetWaves() {
		regions := tui.Clean(strings.Join(w.Regions, ", "))
		if regions == "*" {
			regions = "every other region (*)"
		}
		fmt.Fprintf(out, "wave %d: %s; bake %s, max failures %d, deadline %s\n", i+1, regions, short(w.GetBake().AsDuration()),
			w.MaxFailures, short(w.GetDeadline().AsDuration()))
	}
	checksText(out, s.GetChecks())
	_, err := fmt.Fprintf(out, "on failure: %s\n", tui.Clean(s.OnFailure))
	return err
}

// short writes d in whole seconds as people read it: 45s, 1m, 1m30s, 2h.
func short(d time.Duration) string {
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// rolloutNote is what a deploy, update or rollback that started a rollout
// adds to its message: the wave it began with and where to follow it, or
// what holds it queued;
// "" when it started none (or the read fails: the action is done either
// way). revision is the revision the action made, 0 for a deploy.
func rolloutNote(ctx context.Context, op ctrlv1.OperatorServiceClient, id string, revision int32) string {
	got, err := op.GetRollout(ctx, &ctrlv1.GetRolloutRequest{DeploymentId: id})
	r := got.GetRollout()
	if err != nil || r.GetFinishedAt() != nil || (revision != 0 && r.GetRevision() != revision) || len(r.GetStrategy().GetWaves()) == 0 {
		return ""
	}
	first := r.GetStrategy().GetWaves()[0].GetRegions()
	if r.GetState() == "queued" {
		return fmt.Sprintf("; queued, no region changed yet: %s (unkey-tui rollout status %s)", tui.Clean(r.GetHeld()), id)
	}
	return fmt.Sprintf("; rolling out in %d waves, %s first (unkey-tui rollout status %s)", len(r.GetStrategy().GetWaves()),
		strings.Join(first, ", "), id)
}
