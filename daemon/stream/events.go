package stream

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/kinds"
	"github.com/deploysync/deploysync/ent"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// loadEvents turns change rows of one region into events carrying the
// resources' current state, with one query per resource kind however many
// rows there are. Several rows for one resource become one event (the
// newest version). A row whose resource is gone, or stopped, becomes a
// delete (invariant I4).
//
// All reads share one snapshot (a read-only REPEATABLE READ transaction):
// read one by one, a deployment deleted between the topology read and the
// read of its deployment would leave a topology without one (I6).
func loadEvents(ctx context.Context, db *ent.Client, region string, changes []changelog.Change) ([]*ctrlv1.DeploymentChangeEvent, error) {
	latest := map[changelog.Resource]uint64{}
	var order []changelog.Resource
	ids := map[string][]string{}
	for _, c := range changes {
		k := changelog.Resource{Type: c.Type, ID: c.ResourceID}
		if _, ok := latest[k]; !ok {
			order = append(order, k)
			ids[c.Type] = append(ids[c.Type], c.ResourceID)
		}
		latest[k] = max(latest[k], c.Version)
	}
	if len(order) == 0 {
		return nil, nil
	}
	tx, err := beginSnapshot(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("load events: %w", err)
	}
	defer tx.Rollback()
	built := map[string]map[string]*ctrlv1.DeploymentChangeEvent{}
	for _, kind := range kinds.All {
		if list := ids[kind.ChangeType]; len(list) > 0 {
			if built[kind.ChangeType], err = kind.Load(ctx, tx.Client(), region, list); err != nil {
				return nil, err
			}
		}
	}

	events := make([]*ctrlv1.DeploymentChangeEvent, 0, len(order))
	for _, k := range order {
		ev := built[k.Type][k.ID]
		if ev == nil {
			return nil, fmt.Errorf("change for unknown resource type %q (id %s)", k.Type, k.ID)
		}
		ev.Version = latest[k]
		events = append(events, ev)
	}
	return events, nil
}

// beginSnapshot begins a read-only REPEATABLE READ transaction: its reads
// share one snapshot. Callers keep it short and end it before they send
// what they read, so no stream holds a connection while it waits on its
// client (invariant I8).
func beginSnapshot(ctx context.Context, client *ent.Client) (*ent.Tx, error) {
	tx, err := client.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("begin snapshot: %w", err)
	}
	return tx, nil
}

func bookmark(version uint64, fullSyncDone bool) *ctrlv1.DeploymentChangeEvent {
	return &ctrlv1.DeploymentChangeEvent{Version: version, Event: &ctrlv1.DeploymentChangeEvent_Bookmark{
		Bookmark: &ctrlv1.Bookmark{ResumeVersion: version, FullSyncDone: fullSyncDone},
	}}
}

func resyncRequired(reason string) *ctrlv1.DeploymentChangeEvent {
	return &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_ResyncRequired{
		ResyncRequired: &ctrlv1.ResyncRequired{Reason: reason},
	}}
}
