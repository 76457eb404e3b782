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

	"github.com/urfave/cli/v2"

	"github.com/deploysync/deploysync/internal/validate"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
)

// The script commands: the same operator API as the console, one call each
// (and a read, to name the regions an action reached: before stop, start
// and scale with --all-regions, after update and rollback), the result or
// the server's error text on failure (exit status 1).

// withOperator runs fn with an operator client built from the global flags.
func withOperator(fn func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		// A command that takes no arguments says so rather than
		// ignoring them: "regions eu" does not filter by region.
		if c.Command.ArgsUsage == "" && c.NArg() > 0 {
			return fmt.Errorf("%s takes no arguments, got %q", c.Command.Name, c.Args().Slice())
		}
		ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
		defer cancel()
		if op, ok := c.App.Metadata[sessionOperator].(ctrlv1.OperatorServiceClient); ok {
			return asCallError(fn(ctx, c, op)) // over SSH (SessionApp)
		}
		conn, err := connect(c)
		if err != nil {
			return err
		}
		defer conn.Close()
		return asCallError(fn(ctx, c, ctrlv1.NewOperatorServiceClient(conn)))
	}
}

func scriptCommands() []*cli.Command {
	regionFlags := []cli.Flag{
		&cli.StringFlag{Name: "region", Usage: "the region to act in"},
		&cli.BoolFlag{Name: "all-regions", Usage: "act in every region of the deployment (instead of --region)"},
	}
	return []*cli.Command{
		{
			Name:  "regions",
			Usage: "print every region's sync health, worst lag first",
			Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
				r, err := op.ListRegions(ctx, &ctrlv1.ListRegionsRequest{})
				if err != nil {
					return err
				}
				return printList(c, r, func(out io.Writer) error {
					w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
					fmt.Fprintln(w, "REGION\tAGENT\tHEAD\tACKED\tLAG\tLAG(s)\tPAUSED\tLAST ERROR")
					for _, o := range r.Regions {
						agent := "down"
						if o.AgentConnected {
							agent = "up"
						}
						fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%.1f\t%v\t%s\n", tui.Clean(o.Region), agent, o.HeadVersion, o.AckedVersion,
							o.LagChanges, o.LagSeconds, o.Paused, tui.Clean(o.LastError))
					}
					return w.Flush()
				})
			}),
		},
		{
			Name:  "deployments",
			Usage: "print every deployment with its desired and actual state per region, newest first",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "region", Usage: "only this region (filtered here: the API lists all)"},
				&cli.StringFlag{Name: "workspace", Usage: "only this workspace ID (filtered here: the API lists all)"},
			},
			Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
				r, err := op.ListDeployments(ctx, &ctrlv1.ListDeploymentsRequest{})
				if err != nil {
					return err
				}
				r.Deployments = filterDeployments(r.Deployments, c.String("region"), c.String("workspace"))
				return printList(c, r, func(out io.Writer) error { return deploymentsTable(out, r.Deployments) })
			}),
		},
		{
			Name:      "deploy",
			Usage:     "create a deployment in one or more regions",
			ArgsUsage: "DEPLOYMENT_ID",
			Flags: append([]cli.Flag{
				&cli.StringFlag{Name: "image", Required: true, Usage: "container image, e.g. ghcr.io/acme/api:v1"},
				&cli.StringSliceFlag{Name: "region", Required: true, Usage: "target region (repeat for several)"},
				&cli.StringFlag{Name: "workspace", Required: true, Usage: "workspace ID"},
				&cli.StringFlag{Name: "environment", Required: true, Usage: "environment ID"},
				&cli.IntFlag{Name: "replicas", Value: 1},
				&cli.IntFlag{Name: "cpu", Value: 250, Usage: "CPU millicores (requests = limits)"},
				&cli.IntFlag{Name: "memory", Value: 256, Usage: "memory MiB (requests = limits)"},
				&cli.IntFlag{Name: "port", Value: 8080},
				&cli.StringSliceFlag{Name: "env", Usage: "NAME=VALUE (repeat)"},
				breakGlassFlag(),
			}, overrideFlags()...),
			Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
				if c.NArg() != 1 {
					return fmt.Errorf("want exactly one DEPLOYMENT_ID")
				}
				env, err := envFlag(c)
				if err != nil {
					return err
				}
				rollout, err := overrideStrategy(c)
				if err != nil {
					return err
				}
				breakGlass, _, err := fleetReasons(c)
				if err != nil {
					return err
				}
				req := &ctrlv1.DeployRequest{
					DeploymentId: c.Args().First(), WorkspaceId: c.String("workspace"), EnvironmentId: c.String("environment"),
					Image: c.String("image"), Regions: c.StringSlice("region"), Env: env, Rollout: rollout, BreakGlassReason: breakGlass,
				}
				for _, f := range []struct {
					name     string
					min, max int
					to       *int32
				}{
					{"replicas", 0, validate.MaxReplicas, &req.Replicas},
					{"cpu", 1, math.MaxInt32, &req.CpuMillicores},
					{"memory", 1, math.MaxInt32, &req.MemoryMib},
					{"port", 1, 65535, &req.Port},
				} {
					if *f.to, err = int32Flag(c, f.name, f.min, f.max); err != nil {
						return err
					}
				}
				if _, err := op.Deploy(ctx, req); err != nil {
					return err
				}
				return printResult(c, result{Action: "deploy", DeploymentID: req.DeploymentId, Regions: req.Regions, Replicas: &req.Replicas,
					Message: fmt.Sprintf("deployed %s in %s%s", req.DeploymentId, where(req.Regions, false), rolloutNote(ctx, op, req.DeploymentId, 0))})
			}),
		},
		{
			Name:      "update",
			Usage:     "change a deployment's image, resources or env in every region it runs in (in waves, as its environment's strategy or --wave says)",
			ArgsUsage: "DEPLOYMENT_ID",
			Flags: append([]cli.Flag{
				&cli.StringFlag{Name: "image", Usage: "container image"},
				&cli.IntFlag{Name: "cpu", Usage: "CPU millicores (requests = limits)"},
				&cli.IntFlag{Name: "memory", Usage: "memory MiB (requests = limits)"},
				&cli.StringSliceFlag{Name: "env", Usage: "NAME=VALUE to add or replace (repeat)"},
				&cli.BoolFlag{Name: "replace-env", Usage: "the --env variables become the whole environment (none given: no variables)"},
				breakGlassFlag(), retryFailedFlag(),
			}, overrideFlags()...),
			Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
				if c.NArg() != 1 {
					return fmt.Errorf("want exactly one DEPLOYMENT_ID")
				}
				env, err := envFlag(c)
				if err != nil {
					return err
				}
				rollout, err := overrideStrategy(c)
				if err != nil {
					return err
				}
				breakGlass, retryFailed, err := fleetReasons(c)
				if err != nil {
					return err
				}
				id := c.Args().First()
				req := &ctrlv1.UpdateDeploymentRequest{DeploymentId: id, Env: env, ReplaceEnv: c.Bool("replace-env"), Rollout: rollout,
					BreakGlassReason: breakGlass, RetryFailedReason: retryFailed}
				if c.IsSet("image") {
					req.Image = ptr(c.String("image"))
				}
				for _, f := range []struct {
					name string
					to   **int32
				}{{"cpu", &req.CpuMillicores}, {"memory", &req.MemoryMib}} {
					if !c.IsSet(f.name) {
						continue
					}
					n, err := int32Flag(c, f.name, 1, math.MaxInt32)
					if err != nil {
						return err
					}
					*f.to = &n
				}
				r, err := op.UpdateDeployment(ctx, req)
				if err != nil {
					return err
				}
				regions := revisionRegions(ctx, op, id, r.Revision)
				message := fmt.Sprintf("updated %s in %s; now revision %d", id, where(regions, true), r.Revision)
				if note := rolloutNote(ctx, op, id, r.Revision); note != "" {
					message = fmt.Sprintf("updated %s; now revision %d%s", id, r.Revision, note)
				}
				return printResult(c, result{Action: "update", DeploymentID: id, Regions: regions, AllRegions: true, Revision: &r.Revision,
					Message: message})
			}),
		},
		{
			Name:      "rollback",
			Usage:     "restore a deployment's spec and replicas of an earlier revision (default: the newest earlier one that differs); start/stop stays",
			ArgsUsage: "DEPLOYMENT_ID",
			Description: "The replicas change in every region at once, as `scale` does; the spec rolls out under the\n" +
				"environment's strategy (or --wave ...), wave by wave if it has waves. Aborting that rollout\n" +
				"returns the spec, not the replicas.",
			Flags: append([]cli.Flag{&cli.IntFlag{Name: "to", Usage: "the revision to restore (see history); 0: the newest earlier one with another spec or other replicas"},
				breakGlassFlag(), retryFailedFlag()}, overrideFlags()...),
			Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
				if c.NArg() != 1 {
					return fmt.Errorf("want exactly one DEPLOYMENT_ID")
				}
				to, err := int32Flag(c, "to", 0, math.MaxInt32)
				if err != nil {
					return err
				}
				rollout, err := overrideStrategy(c)
				if err != nil {
					return err
				}
				breakGlass, retryFailed, err := fleetReasons(c)
				if err != nil {
					return err
				}
				id := c.Args().First()
				r, err := op.RollbackDeployment(ctx, &ctrlv1.RollbackDeploymentRequest{DeploymentId: id, ToRevision: to, Rollout: rollout,
					BreakGlassReason: breakGlass, RetryFailedReason: retryFailed})
				if err != nil {
					return err
				}
				regions := revisionRegions(ctx, op, id, r.Revision)
				message := fmt.Sprintf("rolled back %s to revision %d in %s; now revision %d", id, r.Restored, where(regions, true), r.Revision)
				if note := rolloutNote(ctx, op, id, r.Revision); note != "" {
					message = fmt.Sprintf("rolled back %s to revision %d; now revision %d%s", id, r.Restored, r.Revision, note)
				}
				return printResult(c, result{Action: "rollback", DeploymentID: id, Regions: regions, AllRegions: true,
					Revision: &r.Revision, Restored: &r.Restored, Message: message})
			}),
		},
		{
			Name:      "history",
			Usage:     "print a deployment's revisions, newest first: what changed, who, when, and the stream versions",
			ArgsUsage: "DEPLOYMENT_ID",
			Flags:     []cli.Flag{&cli.IntFlag{Name: "limit", Usage: "at most this many revisions (0: ctrld's default, 50; at most 500)"}},
			Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
				if c.NArg() != 1 {
					return fmt.Errorf("want exactly one DEPLOYMENT_ID")
				}
				limit, err := int32Flag(c, "limit", 0, math.MaxInt32)
				if err != nil {
					return err
				}
				r, err := op.GetDeploymentHistory(ctx, &ctrlv1.GetDeploymentHistoryRequest{DeploymentId: c.Args().First(), Limit: limit})
				if err != nil {
					return err
				}
				return printList(c, r, func(out io.Writer) error { return historyTable(out, r.Revisions) })
			}),
		},
		desiredStatusCommand("stop", "stopped", ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED, regionFlags),
		desiredStatusCommand("start", "started", ctrlv1.DesiredStatus_DESIRED_STATUS_RUNNING, regionFlags),
		{
			Name:      "scale",
			Usage:     "set a deployment's replicas in a region (or, with --all-regions, in all of its regions)",
			ArgsUsage: "DEPLOYMENT_ID REPLICAS",
			Flags:     regionFlags,
			Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
				if c.NArg() != 2 {
					return fmt.Errorf("want DEPLOYMENT_ID REPLICAS")
				}
				// The whole argument or nothing: "5x" is not 5, "3.9" not 3.
				n, err := strconv.Atoi(c.Args().Get(1))
				if err != nil || validate.Replicas(n) != nil {
					return fmt.Errorf("REPLICAS %q: want a whole number 0..%d", c.Args().Get(1), validate.MaxReplicas)
				}
				replicas := int32(n)
				id := c.Args().First()
				t, err := target(ctx, c, op, id)
				if err != nil {
					return err
				}
				if _, err := op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: id, Region: t.region, Replicas: replicas}); err != nil {
					return err
				}
				return printResult(c, result{Action: "scale", DeploymentID: id, Regions: t.regions, AllRegions: t.all, Replicas: &replicas,
					Message: fmt.Sprintf("scaled %s to %d in %s", id, replicas, where(t.regions, t.all))})
			}),
		},
		rolloutCommand(),
		fleetCommand(),
		podsCommand(), eventsCommand(), logsCommand(),
		regionCommand("resync", "force a full resync of a region", "requested a full resync of %s", func(ctx context.Context, op ctrlv1.OperatorServiceClient, r string) error {
			_, err := op.ForceResync(ctx, &ctrlv1.ForceResyncRequest{Region: r, Reason: "unkey-tui resync"})
			return err
		}),
		regionCommand("pause", "stop streaming changes to a region (nothing is lost)", "paused %s", func(ctx context.Context, op ctrlv1.OperatorServiceClient, r string) error {
			_, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: r, Paused: true})
			return err
		}),
		regionCommand("resume", "resume streaming changes to a region", "resumed %s", func(ctx context.Context, op ctrlv1.OperatorServiceClient, r string) error {
			_, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: r, Paused: false})
			return err
		}),
	}
}

// filterDeployments keeps the deployments of workspace (any when empty)
// and, when region is set, only their rows in that region (and only the
// deployments that have one).
func filterDeployments(deps []*ctrlv1.DeploymentSummary, region, workspace string) []*ctrlv1.DeploymentSummary {
	var kept []*ctrlv1.DeploymentSummary
	for _, d := range deps {
		if workspace != "" && d.WorkspaceId != workspace {
			continue
		}
		if region != "" {
			d.Regions = slices.DeleteFunc(d.Regions, func(r *ctrlv1.DeploymentInRegion) bool { return r.Region != region })
			if len(d.Regions) == 0 {
				continue
			}
		}
		kept = append(kept, d)
	}
	return kept
}

// deploymentsTable writes one row per deployment and region, as the
// console's deployments page does (a deployment in no region gets one row
// of dashes, so that it is not hidden).
func deploymentsTable(out io.Writer, deps []*ctrlv1.DeploymentSummary) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "DEPLOYMENT\tWORKSPACE/ENV\tIMAGE\tREGION\tDESIRED\tREPLICAS\tREADY\tACTUAL\tWORKFLOW\tNOT READY")
	for _, d := range deps {
		head := fmt.Sprintf("%s\t%s/%s\t%s", tui.Clean(d.DeploymentId), tui.Clean(d.WorkspaceId), tui.Clean(d.EnvironmentId), tui.Clean(d.Image))
		if len(d.Regions) == 0 {
			fmt.Fprintf(w, "%s\t-\t-\t-\t-\t-\t%s\t-\n", head, tui.Clean(d.WorkflowStatus))
		}
		for _, r := range d.Regions {
			// Why its instances are not ready, as the console's note says
			// it: "3 of 3 instances CrashLoopBackOff (restarts 5)".
			notReady := strings.Join(tui.NotReady(r), "; ")
			if notReady == "" {
				notReady = "-"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d/%d\t%s\t%s\t%s\n", head, tui.Clean(r.Region), tui.Clean(r.DesiredStatus), r.Replicas,
				r.ReadyInstances, r.Instances, tui.Clean(r.ActualStatus), tui.Clean(d.WorkflowStatus), notReady)
		}
	}
	return w.Flush()
}

func desiredStatusCommand(name, done string, want ctrlv1.DesiredStatus, regionFlags []cli.Flag) *cli.Command {
	return &cli.Command{
		Name:      name,
		Usage:     name + " a deployment in a region (or, with --all-regions, in all of its regions)",
		ArgsUsage: "DEPLOYMENT_ID",
		Flags:     regionFlags,
		Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
			if c.NArg() != 1 {
				return fmt.Errorf("want exactly one DEPLOYMENT_ID")
			}
			id := c.Args().First()
			t, err := target(ctx, c, op, id)
			if err != nil {
				return err
			}
			if _, err := op.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: id, Region: t.region, Status: want}); err != nil {
				return err
			}
			return printResult(c, result{Action: name, DeploymentID: id, Regions: t.regions, AllRegions: t.all,
				Message: fmt.Sprintf("%s %s in %s", done, id, where(t.regions, t.all))})
		}),
	}
}

// targetRegions is where a command acts: region for the request ("" means
// every region of the deployment, to the server) and the regions to name
// in the result.
type targetRegions struct {
	region  string
	regions []string
	all     bool
}

// target is where a command on deployment id acts: --region, or every
// region of the deployment only when --all-regions says so: a forgotten
// --region must not stop a deployment everywhere. For --all-regions it
// reads the deployment's regions first, so that the result names them
// (none when the deployment is not among the newest ListDeployments gives).
func target(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient, id string) (targetRegions, error) {
	region, all := c.String("region"), c.Bool("all-regions")
	switch {
	case region != "" && all:
		return targetRegions{}, errors.New("--region and --all-regions: give one of them")
	case region == "" && !all:
		return targetRegions{}, errors.New("--region is required (or --all-regions, to act in every region of the deployment)")
	case !all:
		return targetRegions{region: region, regions: []string{region}}, nil
	}
	regions, err := deploymentRegions(ctx, op, id)
	return targetRegions{all: true, regions: regions}, err
}

// deploymentRegions names the regions of deployment id, as ListDeployments
// gives them (none when it is not among the newest it lists).
func deploymentRegions(ctx context.Context, op ctrlv1.OperatorServiceClient, id string) ([]string, error) {
	r, err := op.ListDeployments(ctx, &ctrlv1.ListDeploymentsRequest{})
	if err != nil {
		return nil, err
	}
	regions := []string{}
	for _, d := range r.Deployments {
		if d.DeploymentId == id {
			for _, in := range d.Regions {
				regions = append(regions, in.Region)
			}
		}
	}
	return regions, nil
}

// revisionRegions names the regions of revision, the one an update or
// rollback just made, read after the action so that a slow or failing view
// cannot hold the action up. Unknown (empty) when the read fails, or when
// another action made a newer revision meanwhile (its regions are not
// this one's); the message then says "every region".
func revisionRegions(ctx context.Context, op ctrlv1.OperatorServiceClient, id string, revision int32) []string {
	regions := []string{}
	r, err := op.GetDeploymentHistory(ctx, &ctrlv1.GetDeploymentHistoryRequest{DeploymentId: id, Limit: 1})
	if err != nil || len(r.GetRevisions()) == 0 || r.GetRevisions()[0].GetRevision() != revision {
		return regions
	}
	for _, rs := range r.GetRevisions()[0].GetRegions() {
		regions = append(regions, rs.GetRegion())
	}
	return regions
}

// envFlag is --env NAME=VALUE ... as a map.
func envFlag(c *cli.Context) (map[string]string, error) {
	env := map[string]string{}
	for _, kv := range c.StringSlice("env") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--env %q: want NAME=VALUE", kv)
		}
		env[k] = v
	}
	return env, nil
}

// int32Flag is the int flag name, checked against min..max here: past
// int32 the value would wrap silently into one the server accepts.
func int32Flag(c *cli.Context, name string, min, max int) (int32, error) {
	n := c.Int(name)
	if n < min || n > max {
		return 0, fmt.Errorf("--%s %d: want %d..%d", name, n, min, max)
	}
	return int32(n), nil
}

func ptr[T any](v T) *T { return &v }

// historyTable writes one row per revision, newest first.
func historyTable(out io.Writer, revisions []*ctrlv1.DeploymentRevision) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "REV\tACTION\tBY\tAT\tVERSIONS\tWHAT CHANGED")
	for _, r := range revisions {
		what := tui.Clean(r.Summary)
		if mark := tui.FailedMark(r); mark != "" {
			// Its spec failed a gate: updating or rolling back to it
			// again takes --retry-failed.
			what += "  " + mark
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d..%d\t%s\n", r.Revision, tui.Clean(r.Action), tui.Clean(r.Actor),
			r.CreatedAt.AsTime().UTC().Format(time.RFC3339), r.FirstVersion, r.LastVersion, what)
	}
	return w.Flush()
}

func regionCommand(name, usage, done string, call func(ctx context.Context, op ctrlv1.OperatorServiceClient, region string) error) *cli.Command {
	return &cli.Command{
		Name:      name,
		Usage:     usage,
		ArgsUsage: "REGION",
		Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
			if c.NArg() != 1 {
				return fmt.Errorf("want exactly one REGION")
			}
			region := c.Args().First()
			if err := call(ctx, op, region); err != nil {
				return err
			}
			return printResult(c, result{Action: name, Regions: []string{region}, Message: fmt.Sprintf(done, region)})
		}),
	}
}
