package cmdline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
	"github.com/deploysync/deploysync/tui"
)

// liveHelp says where live views come from, for the commands that show
// them.
const liveHelp = `Live views come from the region's agent, over the connection it opened to ctrld: no cluster
credentials are needed, and ctrld never dials into a cluster. The agent shows only what it
manages (the deployment's own objects in its namespace) and what its owner allows
(agentd --live-views=off|pods|logs). Pods and events are reads; logs may carry secrets, so only
console keys and operator tokens granted them may read them (ctrld operator add-key --logs,
ctrld token create --operator NAME --logs), and every read of logs is audited.`

func liveRegionFlag() cli.Flag {
	return &cli.StringFlag{Name: "region", Required: true, Usage: "the region to look in"}
}

// podsCommand is `pods DEPLOYMENT_ID --region R`.
func podsCommand() *cli.Command {
	return liveListCommand("pods", "show a deployment's pods in a region, live from its agent: phase, ready, restarts, why not ready, spec hash, node, age",
		func(ctx context.Context, op ctrlv1.OperatorServiceClient, id, region string) (proto.Message, func(io.Writer) error, error) {
			r, err := op.ListPods(ctx, &ctrlv1.ListPodsRequest{DeploymentId: id, Region: region})
			return r, func(out io.Writer) error { return podsTable(out, r.GetPods(), time.Now()) }, err
		})
}

// eventsCommand is `events DEPLOYMENT_ID --region R`.
func eventsCommand() *cli.Command {
	return liveListCommand("events", "show the recent Kubernetes events of a deployment's objects in a region, live from its agent",
		func(ctx context.Context, op ctrlv1.OperatorServiceClient, id, region string) (proto.Message, func(io.Writer) error, error) {
			r, err := op.ListEvents(ctx, &ctrlv1.ListEventsRequest{DeploymentId: id, Region: region})
			return r, func(out io.Writer) error { return eventsTable(out, r.GetEvents(), time.Now()) }, err
		})
}

// liveListCommand is a command that prints one live list of a deployment
// in a region: list asks for it and says how to print it as a table.
func liveListCommand(name, usage string, list func(ctx context.Context, op ctrlv1.OperatorServiceClient, id, region string) (proto.Message, func(io.Writer) error, error)) *cli.Command {
	return &cli.Command{
		Name:        name,
		Usage:       usage,
		ArgsUsage:   "DEPLOYMENT_ID",
		Description: liveHelp,
		Flags:       []cli.Flag{liveRegionFlag()},
		Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
			if c.NArg() != 1 {
				return errors.New("want exactly one DEPLOYMENT_ID")
			}
			r, table, err := list(ctx, op, c.Args().First(), c.String("region"))
			if err != nil {
				return err
			}
			return printList(c, r, table)
		}),
	}
}

// logsCommand is `logs DEPLOYMENT_ID POD --region R`.
func logsCommand() *cli.Command {
	region := liveRegionFlag()
	return &cli.Command{
		Name:        "logs",
		Usage:       "print a pod's container logs in a region, live from its agent (--previous: the run that crashed; --follow: keep printing)",
		ArgsUsage:   "DEPLOYMENT_ID POD",
		Description: liveHelp + "\n\nWith --output json each piece of text is a line {\"log\": TEXT, \"truncated\": BOOL}.",
		Flags: []cli.Flag{region,
			&cli.StringFlag{Name: "container", Usage: "the container (default: the app's)"},
			&cli.IntFlag{Name: "tail", Value: 100, Usage: "start with the last `N` lines (at most 10000)"},
			&cli.BoolFlag{Name: "previous", Usage: "the container's run before the current one: the one that crashed"},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new lines until interrupted"},
		},
		Action: withOperator(func(ctx context.Context, c *cli.Context, op ctrlv1.OperatorServiceClient) error {
			if c.NArg() != 2 {
				return errors.New("want DEPLOYMENT_ID POD (the pods: unkey-tui pods DEPLOYMENT_ID --region R)")
			}
			tail, err := int32Flag(c, "tail", 0, math.MaxInt32)
			if err != nil {
				return err
			}
			s, err := op.StreamLogs(ctx, &ctrlv1.StreamLogsRequest{DeploymentId: c.Args().Get(0), Region: c.String("region"), Pod: c.Args().Get(1),
				Container: c.String("container"), TailLines: tail, Previous: c.Bool("previous"), Follow: c.Bool("follow")})
			if err != nil {
				return err
			}
			for {
				m, err := s.Recv()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				if jsonOutput(c) {
					b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "%s\n", b)
					continue
				}
				io.WriteString(c.App.Writer, tui.CleanLog(m.Log))
				if m.Truncated {
					fmt.Fprintln(c.App.ErrWriter, "(the rest was cut: the answer reached its size cap; --tail fewer lines, or --follow)")
				}
			}
		}),
	}
}

// podsTable writes a row per pod.
func podsTable(out io.Writer, pods []*ctrlv1.LivePod, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "POD\tPHASE\tREADY\tRESTARTS\tWHY\tSPEC\tNODE\tAGE")
	for _, p := range pods {
		age := "-"
		if p.CreatedAt != nil {
			age = short(now.Sub(p.CreatedAt.AsTime()).Truncate(time.Second))
		}
		why := p.Why
		for _, c := range p.Containers {
			if c.TerminationMessage != "" {
				why += fmt.Sprintf(" (%s: %q)", c.Name, c.TerminationMessage)
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%t\t%d\t%s\t%s\t%s\t%s\n", tui.Clean(p.Name), tui.Clean(p.Phase), p.Ready, p.Restarts,
			orDash(tui.Clean(why)), orDash(tui.Clean(p.SpecHash)), orDash(tui.Clean(p.Node)), age)
	}
	return w.Flush()
}

// eventsTable writes a row per event, oldest first.
func eventsTable(out io.Writer, events []*ctrlv1.LiveEvent, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "LAST SEEN\tTYPE\tREASON\tOBJECT\tCOUNT\tMESSAGE")
	for _, e := range events {
		seen := "-"
		if e.LastSeen != nil {
			seen = short(now.Sub(e.LastSeen.AsTime()).Truncate(time.Second)) + " ago"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\n", seen, tui.Clean(e.Type), tui.Clean(e.Reason), tui.Clean(e.Object), e.Count, tui.Clean(e.Message))
	}
	return w.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
