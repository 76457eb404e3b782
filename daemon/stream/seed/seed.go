package seed

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"time"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/stream"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/ent/deploymenttopology"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// pageSize is the seed's rows per poll.
const pageSize = 100

// Watcher serves streams the seed's way.
type Watcher struct {
	DB     *sql.DB
	Client *ent.Client
	// MinPoll and MaxPoll bound the random poll interval (default 0.5s and
	// 1.5s, as in the source design).
	MinPoll, MaxPoll time.Duration
}

// Serve implements the same contract as stream.Streamer.Serve.
func (w *Watcher) Serve(ctx context.Context, req stream.Request, send stream.Send) error {
	minPoll, maxPoll := w.MinPoll, w.MaxPoll
	if minPoll <= 0 {
		minPoll, maxPoll = 500*time.Millisecond, 1500*time.Millisecond
	}
	cursor := req.Cursor
	if cursor == 0 {
		var err error
		if cursor, err = w.fullSync(ctx, req.Region, send); err != nil {
			return err
		}
	}
	for {
		rows, err := w.DB.QueryContext(ctx,
			"SELECT pk, resource_type, resource_id FROM deployment_changes WHERE region = ? AND pk > ? ORDER BY pk LIMIT ?",
			req.Region, cursor, pageSize)
		if err != nil {
			return err
		}
		var changes []changelog.Change
		for rows.Next() {
			var c changelog.Change
			if err := rows.Scan(&c.Version, &c.Type, &c.ResourceID); err != nil {
				rows.Close()
				return err
			}
			changes = append(changes, c)
		}
		rows.Close()
		for _, c := range changes {
			// One point lookup per row.
			ev, err := w.lookup(ctx, req.Region, c)
			if err != nil {
				return err
			}
			if ev != nil {
				if err := send(ev); err != nil {
					return err
				}
			}
			cursor = max(cursor, c.Version)
		}
		if len(changes) > 0 {
			if err := send(bookmark(cursor, false)); err != nil {
				return err
			}
		}
		if len(changes) == pageSize {
			continue // behind: read on at once; the wait is for when idle
		}
		wait := minPoll + time.Duration(rand.Int64N(int64(maxPoll-minPoll)+1))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func (w *Watcher) lookup(ctx context.Context, region string, c changelog.Change) (*ctrlv1.DeploymentChangeEvent, error) {
	if c.Type != "deployment_topology" {
		return nil, nil // the comparison only needs deployments
	}
	t, err := w.Client.DeploymentTopology.Query().
		Where(deploymenttopology.DeploymentID(c.ResourceID), deploymenttopology.Region(region)).
		WithDeployment().Only(ctx)
	state := &ctrlv1.DeploymentState{DeploymentId: c.ResourceID}
	action := ctrlv1.Action_ACTION_DELETE
	switch {
	case ent.IsNotFound(err):
	case err != nil:
		return nil, err
	case t.DesiredStatus == deploymenttopology.DesiredStatusRunning && t.SpecHash != "":
		action = ctrlv1.Action_ACTION_APPLY
		state.Image = t.Image
		state.Replicas = int32(t.Replicas)
	}
	return &ctrlv1.DeploymentChangeEvent{Version: c.Version, Event: &ctrlv1.DeploymentChangeEvent_Deployment{
		Deployment: &ctrlv1.DeploymentEvent{Action: action, Deployment: state},
	}}, nil
}

func (w *Watcher) fullSync(ctx context.Context, region string, send stream.Send) (uint64, error) {
	var head sql.NullInt64
	if err := w.DB.QueryRowContext(ctx, "SELECT MAX(pk) FROM deployment_changes").Scan(&head); err != nil {
		return 0, err
	}
	cursor := uint64(head.Int64)
	topologies, err := w.Client.DeploymentTopology.Query().
		Where(deploymenttopology.Region(region), deploymenttopology.DesiredStatusEQ(deploymenttopology.DesiredStatusRunning),
			deploymenttopology.SpecHashNEQ("")).
		All(ctx)
	if err != nil {
		return 0, err
	}
	for _, t := range topologies {
		err := send(&ctrlv1.DeploymentChangeEvent{Version: cursor, Event: &ctrlv1.DeploymentChangeEvent_Deployment{
			Deployment: &ctrlv1.DeploymentEvent{Action: ctrlv1.Action_ACTION_APPLY, Deployment: &ctrlv1.DeploymentState{
				DeploymentId: t.DeploymentID, Image: t.Image, Replicas: int32(t.Replicas),
			}},
		}})
		if err != nil {
			return 0, err
		}
	}
	return cursor, send(bookmark(cursor, true))
}

func bookmark(v uint64, done bool) *ctrlv1.DeploymentChangeEvent {
	return &ctrlv1.DeploymentChangeEvent{Version: v, Event: &ctrlv1.DeploymentChangeEvent_Bookmark{
		Bookmark: &ctrlv1.Bookmark{ResumeVersion: v, FullSyncDone: done},
	}}
}
