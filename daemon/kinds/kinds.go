package kinds

import (
	"context"

	"github.com/deploysync/deploysync/ent"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// A Kind is one kind of resource the stream carries.
type Kind struct {
	// Name is the kind as agents report it and metrics label it.
	Name string
	// ChangeType is its resource_type in deployment_changes.
	ChangeType string

	// Page reads, for a full sync, up to limit of the region's resources
	// that should run, in key order after the key after ("" for the first
	// page), and returns their apply events and the key of the last row it
	// read (rows read may be more than events: a stopped one is read and
	// skipped). Keys are opaque to callers.
	Page func(ctx context.Context, c *ent.Client, region, after string, limit int) (events []Event, last string, rows int, err error)

	// Load builds the event of each resource ids names in region, from its
	// current state: an apply, or a delete when it is gone or stopped.
	// Every ID gets an event. All reads go through c, which callers make a
	// snapshot, so one resource's rows are read consistently (I6).
	Load func(ctx context.Context, c *ent.Client, region string, ids []string) (map[string]*ctrlv1.DeploymentChangeEvent, error)

	// Desired returns which of ids the region desires (running or
	// stopped): only those take an agent's sync report.
	Desired func(ctx context.Context, c *ent.Client, region string, ids []string) ([]string, error)

	// DesiredSQL holds for a resource_syncs row s whose resource its
	// region still desires (the same rule as Desired, for a sweep in SQL).
	DesiredSQL string
}

// Event is one resource's event, with the resource's ID.
type Event struct {
	ID    string
	Event *ctrlv1.DeploymentChangeEvent
}

// All is every kind, in the order a full sync sends them.
var All = []Kind{deployments, sentinels, ciliumNetworkPolicies}

// Named returns the kind agents report as name.
func Named(name string) (Kind, bool) {
	for _, k := range All {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// OfChange returns the kind of a change row's resource_type.
func OfChange(changeType string) (Kind, bool) {
	for _, k := range All {
		if k.ChangeType == changeType {
			return k, true
		}
	}
	return Kind{}, false
}
