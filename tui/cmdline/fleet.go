package cmdline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	// --from and --until are read in --time-zone as ctrld reads windows:
	// from the binary's own zone data, whatever the machine has.
	_ "time/tzdata"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
)

// fleetHelp explains what the fleet's controls hold, for `fleet --help`.
const fleetHelp = `The fleet's controls hold rollouts across deployments. A hold applies where a wave starts:
a rollout's first (it then waits, queued: no region promoted yet) and each next one (its
current wave stays where it is, its gate still watching). Scale, start and stop are not
rollouts and are never held.

  halt     pauses every rollout progressing in a scope (everywhere, an environment, or those
           whose current or next wave has a region) and holds every wave there until resumed;
           rollouts made meanwhile wait, queued. resume lifts it and resumes exactly the
           rollouts it paused (not those an operator paused).
  freeze   a window in which no rollout in its scope starts a wave: recurring (a cron schedule
           in a time zone, each firing closing it for a duration) or one-off (from .. until).
  pace     at most N rollouts in flight at once in an environment, or at most N first waves
           (canaries) in progress in a region; those beyond wait, queued, first come first
           served, each showing its place.

To take one deployment through every hold: unkey-tui rollout break-glass DEPLOYMENT --reason R
(or --break-glass REASON on deploy, update or rollback). Every change here is audited.`

// scopeFlags are the flags that say where a fleet control applies: an
// environment (--workspace and --environment, as deploy takes them), a
// region (when region), or everywhere (when everywhere; it must be said).
func scopeFlags(region, everywhere bool) []cli.Flag {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "workspace", Usage: "with --environment: the environment's workspace `ID`"},
		&cli.StringFlag{Name: "environment", Usage: "with --workspace: only this environment `ID` of the workspace"},
	}
	if region {
		flags = append(flags, &cli.StringFlag{Name: "region", Usage: "only what touches this `REGION`"})
	}
	if everywhere {
		flags = append(flags, &cli.BoolFlag{Name: "everywhere", Usage: "every environment and region (said on purpose: no scope flag is not taken for everywhere)"})
	}
	return flags
}

// fleetScope is the scope the flags of scopeFlags give, and its name for
// people; a scope must be given (everywhere only with --everywhere).
func fleetScope(c *cli.Context) (*ctrlv1.FleetScope, string, error) {
	ws, env, region, everywhere := c.String("workspace"), c.String("environment"), c.String("region"), c.Bool("everywhere")
	given := []string{}
	if ws != "" || env != "" {
		given = append(given, "--workspace/--environment")
	}
	if region != "" {
		given = append(given, "--region")
	}
	if everywhere {
		given = append(given, "--everywhere")
	}
	var want []string
	for _, name := range []string{"environment", "region", "everywhere"} {
		if slices.ContainsFunc(c.Command.Flags, func(f cli.Flag) bool { return slices.Contains(f.Names(), name) }) {
			want = append(want, map[string]string{"environment": "--workspace W --environment E", "region": "--region R", "everywhere": "--everywhere"}[name])
		}
	}
	switch {
	case len(given) > 1:
		return nil, "", fmt.Errorf("%s: give one scope, not several", strings.Join(given, " and "))
	case len(given) == 0:
		return nil, "", fmt.Errorf("say where: %s", strings.Join(want, ", or "))
	case (ws == "") != (env == ""):
		return nil, "", errors.New("--workspace and --environment: give both (an environment is a workspace's)")
	case everywhere:
		return &ctrlv1.FleetScope{}, "every environment", nil
	case region != "":
		return &ctrlv1.FleetScope{Region: region}, "region " + region, nil
	}
	return &ctrlv1.FleetScope{WorkspaceId: ws, EnvironmentId: env}, "environment " + ws + "/" + env, nil
}

// fleetCommand is `fleet`: the fleet's controls and what they hold.
func fleetCommand() *cli.Command {
	status := withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
		r, err := op.GetFleet(ctx, &ctrlv1.GetFleetRequest{})
		if err != nil {
			return err
		}
		return printList(c, r, func(out io.Writer) error { return fleetText(out, r) })
	})
	return &cli.Command{
		Name:        "fleet",
		Usage:       "steer rollouts across deployments: halt and resume in bulk, freeze windows, pacing bounds (no command: status)",
		Description: fleetHelp,
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return noSubcommand(c)
			}
			return status(c)
		},
		Subcommands: []*cli.Command{
			{
				Name: "status",
				Usage: "print the halts that stand, the freeze windows (closed now until when, or when they close next), the pacing bounds " +
					"(in use, queued), and every rollout in flight by environment, region of its current wave and state, with what holds it",
				Action: status,
			},
			{
				Name:  "halt",
				Usage: "pause every rollout progressing in a scope, and hold every wave there from starting until resumed",
				Description: "A halt pauses the rollouts progressing in its scope: everywhere (--everywhere), one environment\n" +
					"(--workspace W --environment E), or every rollout whose current or next wave has a region (--region R).\n" +
					"Each is marked with the halt; until it is lifted no wave in its scope starts, and rollouts made\n" +
					"meanwhile wait, queued. A paused rollout does nothing, rollbacks included. It prints the halt's\n" +
					"number, which `fleet resume` takes. The reason is required, audited and shown on every rollout it holds.\n\n" +
					"Example: unkey-tui fleet halt --everywhere --reason 'incident 4711: eu-west latency'",
				Flags: append([]cli.Flag{&cli.StringFlag{Name: "reason", Usage: "why (required; audited and shown to the others)"}}, scopeFlags(true, true)...),
				Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
					scope, where, err := fleetScope(c)
					if err != nil {
						return err
					}
					reason, err := requiredReason(c, "reason")
					if err != nil {
						return err
					}
					r, err := op.HaltRollouts(ctx, &ctrlv1.HaltRolloutsRequest{Scope: scope, Reason: reason})
					if err != nil {
						return err
					}
					return printList(c, r, func(out io.Writer) error {
						h := r.GetHalt()
						_, err := fmt.Fprintf(out, "halted %s: halt %d paused %d %s; new waves there wait until it is lifted (unkey-tui fleet resume %d)\n",
							tui.Clean(where), h.GetId(), h.GetPaused(), plural(int(h.GetPaused()), "rollout"), h.GetId())
						return err
					})
				}),
			},
			{
				Name:      "resume",
				Usage:     "lift a halt: resume exactly the rollouts it paused (not those an operator paused)",
				ArgsUsage: "HALT_ID",
				Description: "HALT_ID is the number `fleet halt` printed (`fleet status` lists the halts that stand). The\n" +
					"rollouts it paused go on, each wave's clock starting again; one that another standing halt covers\n" +
					"stays paused, now by that halt; one an operator paused stays paused.",
				Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
					if c.NArg() != 1 {
						return fmt.Errorf("want exactly one HALT_ID")
					}
					id, err := strconv.ParseInt(c.Args().First(), 10, 64)
					if err != nil || id < 1 {
						return fmt.Errorf("HALT_ID %q: want a halt's number, 1 or more (fleet status lists them)", c.Args().First())
					}
					r, err := op.ResumeRollouts(ctx, &ctrlv1.ResumeRolloutsRequest{HaltId: id})
					if err != nil {
						return err
					}
					return printList(c, r, func(out io.Writer) error {
						line := fmt.Sprintf("lifted halt %d: resumed %d %s", id, r.GetResumed(), plural(int(r.GetResumed()), "rollout"))
						if r.GetStillHeld() > 0 {
							line += fmt.Sprintf("; %d still held by another halt that stands", r.GetStillHeld())
						}
						_, err := fmt.Fprintln(out, line)
						return err
					})
				}),
			},
			{
				Name:   "freeze",
				Usage:  "set or delete freeze windows: while one is closed, no rollout in its scope starts a wave",
				Action: noSubcommand,
				Subcommands: []*cli.Command{
					{
						Name:        "set",
						Usage:       "create or replace the freeze window NAME",
						ArgsUsage:   "NAME",
						Description: freezeHelp,
						Flags: append([]cli.Flag{
							&cli.StringFlag{Name: "schedule", Usage: "recurring: five cron fields (minute hour day-of-month month day-of-week) read in --time-zone; each firing closes the window for --duration"},
							&cli.DurationFlag{Name: "duration", Usage: "with --schedule: how long each firing closes it (1m to 744h)"},
							&cli.StringFlag{Name: "from", Usage: "one-off: closed from `TIME` (2006-01-02T15:04 in --time-zone, or RFC 3339)"},
							&cli.StringFlag{Name: "until", Usage: "one-off: until `TIME` (as --from)"},
							&cli.StringFlag{Name: "time-zone", Usage: "IANA time `ZONE` the schedule (and --from/--until without an offset) is read in, e.g. Europe/Berlin (default UTC)"},
							&cli.StringFlag{Name: "reason", Usage: "why, shown with the window (optional)"},
						}, scopeFlags(false, true)...),
						Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
							if c.NArg() != 1 {
								return fmt.Errorf("want exactly one NAME")
							}
							w, err := freezeWindow(c)
							if err != nil {
								return err
							}
							r, err := op.SetFreezeWindow(ctx, &ctrlv1.SetFreezeWindowRequest{Window: w})
							if err != nil {
								return err
							}
							return printList(c, r, func(out io.Writer) error {
								got := r.GetWindow()
								_, err := fmt.Fprintf(out, "set freeze window %s (%s): %s; %s\n", tui.Clean(got.GetName()), tui.ScopeText(got.GetScope()),
									tui.WindowWhen(got), tui.WindowState(got))
								return err
							})
						}),
					},
					{
						Name:      "delete",
						Usage:     "remove the freeze window NAME",
						ArgsUsage: "NAME",
						Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
							if c.NArg() != 1 {
								return fmt.Errorf("want exactly one NAME")
							}
							name := c.Args().First()
							if _, err := op.DeleteFreezeWindow(ctx, &ctrlv1.DeleteFreezeWindowRequest{Name: name}); err != nil {
								return err
							}
							return printResult(c, result{Action: "fleet freeze delete", Regions: []string{}, Message: "deleted freeze window " + name})
						}),
					},
				},
			},
			{
				Name:  "pace",
				Usage: "bound the rollouts in flight at once in an environment, or the first waves (canaries) in progress in a region",
				Description: "In an environment (--workspace W --environment E): at most --max rollouts started and in flight\n" +
					"at once. In a region (--region R): at most --max first waves (canaries) with it in progress. The\n" +
					"rollouts beyond wait, queued, in the order they were made; each shows its place and what it waits\n" +
					"for (`fleet status`, `rollout status`). --remove removes the bound.\n\n" +
					"Example: unkey-tui fleet pace --region eu-west --max 2",
				Flags: append([]cli.Flag{
					&cli.IntFlag{Name: "max", Usage: "at most `N` at once (1 or more)"},
					&cli.BoolFlag{Name: "remove", Usage: "remove the scope's bound instead"},
				}, scopeFlags(true, false)...),
				Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
					scope, where, err := fleetScope(c)
					if err != nil {
						return err
					}
					req := &ctrlv1.SetPacingBoundRequest{Scope: scope, Remove: c.Bool("remove")}
					switch {
					case req.Remove && c.IsSet("max"):
						return errors.New("--max and --remove: give one of them")
					case !req.Remove && !c.IsSet("max"):
						return errors.New("--max is required (or --remove, to remove the bound)")
					case !req.Remove:
						if req.Max, err = int32Flag(c, "max", 1, math.MaxInt32); err != nil {
							return err
						}
					}
					if _, err := op.SetPacingBound(ctx, req); err != nil {
						return err
					}
					message := "removed the pacing bound of " + where
					switch {
					case req.Remove:
					case scope.Region != "":
						message = fmt.Sprintf("%s: at most %d first %s (canaries) in progress at once", where, req.Max, plural(int(req.Max), "wave"))
					default:
						message = fmt.Sprintf("%s: at most %d %s in flight at once", where, req.Max, plural(int(req.Max), "rollout"))
					}
					return printResult(c, result{Action: "fleet pace", Regions: []string{}, Message: message})
				}),
			},
		},
	}
}

// freezeHelp explains `fleet freeze set`.
const freezeHelp = `A window is recurring or one-off, for one environment (--workspace W --environment E) or for
every one (--everywhere). While it is closed no rollout in its scope starts a wave; scale, start
and stop stay immediate. Setting a NAME that exists replaces that window.

Recurring: --schedule 'CRON' --duration D. Each firing of the schedule (five fields: minute hour
day-of-month month day-of-week, or @daily and the like), read in --time-zone, closes the window
for D (wall time: a 16h window from 17:00 reopens at 10:00 the night clocks move forward).
Windows that close as another reopens read as one freeze.

One-off: --from TIME --until TIME, each 2006-01-02T15:04 read in --time-zone, or RFC 3339 with
its own offset (2026-12-24T00:00:00+01:00).

ctrld checks the window (a schedule or zone it cannot read, a duration out of bounds, an end
before its start) and refuses it naming the field, writing nothing.

Examples:
   weekday evenings and nights, Berlin time:
     unkey-tui fleet freeze set evenings --schedule '0 17 * * 1-5' --duration 16h --time-zone Europe/Berlin --everywhere
   the weekend, for one environment:
     unkey-tui fleet freeze set weekend --schedule '0 17 * * 5' --duration 64h --time-zone Europe/Berlin --workspace acme --environment prod
   once:
     unkey-tui fleet freeze set holidays --from 2026-12-24T00:00 --until 2026-12-27T00:00 --time-zone Europe/Berlin --everywhere`

// localTime is how --from and --until are written without an offset.
const localTime = "2006-01-02T15:04"

// freezeWindow is `fleet freeze set`'s window from its flags. It refuses
// what cannot be read here (naming the flag); ctrld checks the rest.
func freezeWindow(c *cli.Context) (*ctrlv1.FreezeWindow, error) {
	scope, _, err := fleetScope(c)
	if err != nil {
		return nil, err
	}
	w := &ctrlv1.FreezeWindow{Name: c.Args().First(), Scope: scope, Schedule: c.String("schedule"), TimeZone: c.String("time-zone"),
		Reason: c.String("reason")}
	oneOff := c.IsSet("from") || c.IsSet("until")
	switch {
	case w.Schedule != "" && oneOff:
		return nil, errors.New("--schedule and --from/--until: a window is recurring (--schedule, --duration) or once (--from, --until), not both")
	case c.IsSet("duration") && oneOff:
		return nil, errors.New("--duration: a one-off window ends at --until; --duration is for --schedule")
	case w.Schedule != "":
		if !c.IsSet("duration") {
			return nil, errors.New("--duration is required with --schedule: how long each firing closes the window, e.g. 16h")
		}
		w.Duration = durationpb.New(c.Duration("duration"))
		return w, nil // the schedule and the zone are ctrld's to read
	case !oneOff:
		return nil, errors.New("give --schedule and --duration (recurring), or --from and --until (once)")
	case !c.IsSet("from") || !c.IsSet("until"):
		return nil, errors.New("--from and --until: a one-off window has both")
	}
	for _, f := range []struct {
		name string
		to   **timestamppb.Timestamp
	}{{"from", &w.StartsAt}, {"until", &w.EndsAt}} {
		t, err := windowTime(c.String(f.name), w.TimeZone)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", f.name, err)
		}
		*f.to = timestamppb.New(t)
	}
	return w, nil
}

// windowTime reads a --from or --until: RFC 3339, or localTime in zone.
func windowTime(text, zone string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, text); err == nil {
		return t, nil
	}
	if _, err := time.Parse(localTime, text); err != nil {
		return time.Time{}, fmt.Errorf("%q: want %s (read in --time-zone) or RFC 3339 (2006-01-02T15:04:05+01:00)", text, localTime)
	}
	loc, err := zoneOf(zone)
	if err != nil {
		return time.Time{}, err
	}
	t, _ := time.ParseInLocation(localTime, text, loc)
	return t, nil
}

// zoneOf loads an IANA zone as ctrld does ("" is UTC).
func zoneOf(zone string) (*time.Location, error) {
	if zone == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(zone)
	if err != nil || strings.HasPrefix(zone, "/") || zone == "Local" {
		return nil, fmt.Errorf("--time-zone %q: not an IANA time zone (like Europe/Berlin, or UTC)", zone)
	}
	return loc, nil
}

// requiredReason is the reason flag name, which must be given and not
// blank: ctrld audits it and shows it to the others.
func requiredReason(c *cli.Context, name string) (string, error) {
	reason := c.String(name)
	if strings.TrimSpace(reason) == "" {
		return "", fmt.Errorf("--%s: give a reason (it is audited, and shown to the others)", name)
	}
	return reason, nil
}

// fleetReasons are --break-glass and --retry-failed of deploy, update and
// rollback: "" when not given; refused when given blank.
func fleetReasons(c *cli.Context) (breakGlass, retryFailed string, err error) {
	for _, f := range []struct {
		name string
		to   *string
	}{{"break-glass", &breakGlass}, {"retry-failed", &retryFailed}} {
		if !c.IsSet(f.name) {
			continue
		}
		if *f.to, err = requiredReason(c, f.name); err != nil {
			return "", "", err
		}
	}
	return breakGlass, retryFailed, nil
}

// breakGlassFlag is deploy's, update's and rollback's --break-glass.
func breakGlassFlag() cli.Flag {
	return &cli.StringFlag{Name: "break-glass", Usage: "take this change's rollout through the fleet's holds (halts, freeze windows, pacing), for `REASON` (audited, shown on the rollout); with --immediate, every region at once now"}
}

// retryFailedFlag is update's and rollback's --retry-failed.
func retryFailedFlag() cli.Flag {
	return &cli.StringFlag{Name: "retry-failed", Usage: "roll out a spec that a rollout rolled back for a failed gate, on purpose, for `REASON` (audited); without it that is refused"}
}

// breakGlassCommand is `rollout break-glass DEPLOYMENT_ID --reason R`.
func breakGlassCommand() *cli.Command {
	return &cli.Command{
		Name:      "break-glass",
		Usage:     "take a deployment's rollout through the fleet's holds: a queued one starts now, one a halt paused goes on, no hold stops its later waves",
		ArgsUsage: "DEPLOYMENT_ID",
		Description: "For the fix that ends an incident during a halt or a freeze. The reason is required, audited and\n" +
			"shown on the rollout (`rollout status`). The rollout's own gates still hold it: a failing wave\n" +
			"still rolls back.\n\n" + fenceHelp,
		Flags: append([]cli.Flag{&cli.StringFlag{Name: "reason", Usage: "why (required; audited and shown on the rollout)"}}, fenceFlags()...),
		Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
			if c.NArg() != 1 {
				return fmt.Errorf("want exactly one DEPLOYMENT_ID")
			}
			reason, err := requiredReason(c, "reason")
			if err != nil {
				return err
			}
			f, err := fence(c)
			if err != nil {
				return err
			}
			id := c.Args().First()
			r, err := op.ControlRollout(ctx, &ctrlv1.ControlRolloutRequest{DeploymentId: id, Action: ctrlv1.RolloutAction_ROLLOUT_ACTION_BREAK_GLASS,
				Fence: f, Reason: reason})
			if err != nil {
				return err
			}
			return printList(c, r, func(out io.Writer) error {
				fmt.Fprintf(out, "broke glass for the rollout of %s\n", tui.Clean(id))
				return rolloutText(out, r.Rollout)
			})
		}),
	}
}

// holdText is the lines rolloutText adds for the fleet's holds: what
// holds the rollout, the halt that paused it, a break-glass.
func holdText(out io.Writer, r *ctrlv1.Rollout) {
	if r.GetHeld() != "" && r.GetHeld() != r.GetReason() { // a halt's pause says it as the reason
		fmt.Fprintf(out, "held: %s\n", tui.Clean(r.GetHeld()))
	}
	if r.GetHaltId() != 0 {
		fmt.Fprintf(out, "halt: %d paused it; unkey-tui fleet resume %d lifts it (rollout resume is refused while it stands; rollout break-glass takes this one through)\n",
			r.GetHaltId(), r.GetHaltId())
	}
	if r.GetBreakGlassBy() != "" {
		fmt.Fprintf(out, "break-glass: by %s: %s\n", tui.Clean(r.GetBreakGlassBy()), tui.Clean(r.GetBreakGlassReason()))
	}
}

// fleetText writes GetFleet for people: the halts, the windows, the
// bounds, then the rollouts in flight by environment, region and state.
func fleetText(out io.Writer, f *ctrlv1.GetFleetResponse) error {
	now := f.GetNow().AsTime()
	// Each section is a table of its own, its columns its own.
	section := func(title string, n int, header string, rows func(w io.Writer)) error {
		fmt.Fprintln(out, title)
		if n == 0 {
			_, err := fmt.Fprint(out, "  none\n\n")
			return err
		}
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, header)
		rows(w)
		if err := w.Flush(); err != nil {
			return err
		}
		_, err := fmt.Fprintln(out)
		return err
	}
	err := section("HALTS", len(f.GetHalts()), "  ID\tSCOPE\tBY\tSINCE\tHOLDING\tREASON", func(w io.Writer) {
		for _, h := range f.GetHalts() {
			fmt.Fprintf(w, "  %d\t%s\t%s\t%s\t%d\t%s\n", h.GetId(), tui.ScopeText(h.GetScope()), tui.Clean(h.GetActor()),
				h.GetCreatedAt().AsTime().UTC().Format(time.RFC3339), h.GetHolding(), tui.Clean(h.GetReason()))
		}
	})
	if err != nil {
		return err
	}
	err = section("FREEZE WINDOWS", len(f.GetWindows()), "  NAME\tSCOPE\tWHEN\tNOW\tREASON", func(w io.Writer) {
		for _, win := range f.GetWindows() {
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", tui.Clean(win.GetName()), tui.ScopeText(win.GetScope()), tui.WindowWhen(win), tui.WindowState(win),
				orDash(tui.Clean(win.GetReason())))
		}
	})
	if err != nil {
		return err
	}
	err = section("PACING BOUNDS", len(f.GetBounds()), "  SCOPE\tBOUNDS\tIN USE\tQUEUED", func(w io.Writer) {
		for _, b := range f.GetBounds() {
			what := "rollouts in flight"
			if b.GetScope().GetRegion() != "" {
				what = "first waves in progress"
			}
			fmt.Fprintf(w, "  %s\t%s\t%d/%d\t%d\n", tui.ScopeText(b.GetScope()), what, b.GetInUse(), b.GetMax(), b.GetQueued())
		}
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "ROLLOUTS IN FLIGHT (%d, as of %s)\n", len(f.GetRollouts()), now.UTC().Format(time.RFC3339))
	if len(f.GetRollouts()) == 0 {
		_, err := fmt.Fprintln(out, "  none")
		return err
	}
	for _, env := range tui.FleetEnvironments(f.GetRollouts()) {
		fmt.Fprintf(out, "  %s: %s\n", tui.Clean(env.Name), env.Counts())
	}
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  ENVIRONMENT\tREGION\tSTATE\tDEPLOYMENT\tWAVE\tHELD")
	for _, row := range tui.FleetRows(f.GetRollouts()) {
		r := row.Rollout
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%d/%d\t%s\n", tui.Clean(row.Environment), tui.Clean(row.Region), tui.Clean(r.GetState()),
			tui.Clean(r.GetDeploymentId()), r.GetWave(), len(r.GetStrategy().GetWaves()), orDash(tui.Clean(tui.HoldOf(r))))
	}
	return w.Flush()
}

// plural is word, with an s unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
