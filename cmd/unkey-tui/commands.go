package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/deploysync/deploysync/internal/validate"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
)

// The script commands: the same operator API as the console, one call each,
// the server's error text on failure (exit status 1).

// withOperator runs fn with an operator client built from the global flags.
func withOperator(fn func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		// A command that takes no arguments says so rather than
		// ignoring them: "regions eu" does not filter by region.
		if c.Command.ArgsUsage == "" && c.NArg() > 0 {
			return cli.Exit(fmt.Sprintf("%s takes no arguments, got %q", c.Command.Name, c.Args().Slice()), 1)
		}
		conn, err := connect(c)
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
		defer cancel()
		if err := fn(ctx, c, ctrlv1.NewOperatorServiceClient(conn)); err != nil {
			return cli.Exit(tui.ErrorText(err), 1)
		}
		return nil
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
				w := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
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
			}),
		},
		{
			Name:      "deploy",
			Usage:     "create a deployment in one or more regions",
			ArgsUsage: "DEPLOYMENT_ID",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "image", Required: true, Usage: "container image, e.g. ghcr.io/acme/api:v1"},
				&cli.StringSliceFlag{Name: "region", Required: true, Usage: "target region (repeat for several)"},
				&cli.StringFlag{Name: "workspace", Required: true, Usage: "workspace ID"},
				&cli.StringFlag{Name: "environment", Required: true, Usage: "environment ID"},
				&cli.IntFlag{Name: "replicas", Value: 1},
				&cli.IntFlag{Name: "cpu", Value: 250, Usage: "CPU millicores (requests = limits)"},
				&cli.IntFlag{Name: "memory", Value: 256, Usage: "memory MiB (requests = limits)"},
				&cli.IntFlag{Name: "port", Value: 8080},
				&cli.StringSliceFlag{Name: "env", Usage: "NAME=VALUE (repeat)"},
			},
			Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
				if c.NArg() != 1 {
					return fmt.Errorf("want exactly one DEPLOYMENT_ID")
				}
				env := map[string]string{}
				for _, kv := range c.StringSlice("env") {
					k, v, ok := strings.Cut(kv, "=")
					if !ok {
						return fmt.Errorf("--env %q: want NAME=VALUE", kv)
					}
					env[k] = v
				}
				req := &ctrlv1.DeployRequest{
					DeploymentId: c.Args().First(), WorkspaceId: c.String("workspace"), EnvironmentId: c.String("environment"),
					Image: c.String("image"), Regions: c.StringSlice("region"), Env: env,
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
					// Checked here: past int32 the value would wrap silently
					// into one the server accepts.
					n := c.Int(f.name)
					if n < f.min || n > f.max {
						return fmt.Errorf("--%s %d: want %d..%d", f.name, n, f.min, f.max)
					}
					*f.to = int32(n)
				}
				_, err := op.Deploy(ctx, req)
				if err == nil {
					fmt.Fprintln(c.App.Writer, "deployed", c.Args().First())
				}
				return err
			}),
		},
		desiredStatusCommand("stop", ctrlv1.DesiredStatus_DESIRED_STATUS_STOPPED, regionFlags),
		desiredStatusCommand("start", ctrlv1.DesiredStatus_DESIRED_STATUS_RUNNING, regionFlags),
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
				replicas, err := strconv.Atoi(c.Args().Get(1))
				if err != nil || validate.Replicas(replicas) != nil {
					return fmt.Errorf("REPLICAS %q: want a whole number 0..%d", c.Args().Get(1), validate.MaxReplicas)
				}
				region, err := targetRegion(c)
				if err != nil {
					return err
				}
				_, err = op.Scale(ctx, &ctrlv1.ScaleRequest{DeploymentId: c.Args().First(), Region: region, Replicas: int32(replicas)})
				return done(c, err, "scaled %s to %d", c.Args().First(), replicas)
			}),
		},
		regionCommand("resync", "force a full resync of a region", func(ctx context.Context, op ctrlv1.OperatorServiceClient, r string) error {
			_, err := op.ForceResync(ctx, &ctrlv1.ForceResyncRequest{Region: r, Reason: "unkey-tui resync"})
			return err
		}),
		regionCommand("pause", "stop streaming changes to a region (nothing is lost)", func(ctx context.Context, op ctrlv1.OperatorServiceClient, r string) error {
			_, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: r, Paused: true})
			return err
		}),
		regionCommand("resume", "resume streaming changes to a region", func(ctx context.Context, op ctrlv1.OperatorServiceClient, r string) error {
			_, err := op.SetRegionPaused(ctx, &ctrlv1.SetRegionPausedRequest{Region: r, Paused: false})
			return err
		}),
	}
}

func desiredStatusCommand(name string, want ctrlv1.DesiredStatus, regionFlags []cli.Flag) *cli.Command {
	return &cli.Command{
		Name:      name,
		Usage:     name + " a deployment in a region (or, with --all-regions, in all of its regions)",
		ArgsUsage: "DEPLOYMENT_ID",
		Flags:     regionFlags,
		Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
			if c.NArg() != 1 {
				return fmt.Errorf("want exactly one DEPLOYMENT_ID")
			}
			region, err := targetRegion(c)
			if err != nil {
				return err
			}
			_, err = op.SetDesiredStatus(ctx, &ctrlv1.SetDesiredStatusRequest{DeploymentId: c.Args().First(), Region: region, Status: want})
			return done(c, err, "%s %s", name, c.Args().First())
		}),
	}
}

// targetRegion is the region a command acts in: --region, or "" (every
// region of the deployment, to the server) only when --all-regions says so:
// a forgotten --region must not stop a deployment everywhere.
func targetRegion(c *cli.Context) (string, error) {
	region, all := c.String("region"), c.Bool("all-regions")
	switch {
	case region != "" && all:
		return "", errors.New("--region and --all-regions: give one of them")
	case region == "" && !all:
		return "", errors.New("--region is required (or --all-regions, to act in every region of the deployment)")
	}
	return region, nil
}

func regionCommand(name, usage string, call func(ctx context.Context, op ctrlv1.OperatorServiceClient, region string) error) *cli.Command {
	return &cli.Command{
		Name:      name,
		Usage:     usage,
		ArgsUsage: "REGION",
		Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
			if c.NArg() != 1 {
				return fmt.Errorf("want exactly one REGION")
			}
			return done(c, call(ctx, op, c.Args().First()), "%s %s", name, c.Args().First())
		}),
	}
}

func done(c *cli.Context, err error, format string, args ...any) error {
	if err == nil {
		fmt.Fprintf(c.App.Writer, "done: "+format+"\n", args...)
	}
	return err
}
