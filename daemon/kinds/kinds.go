package kinds

import (
	"context"
	"fmt"
	"strings"

	"entgo.io/ent/dialect/sql/schema"

	"github.com/deploysync/deploysync/daemon/changelog"
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
	// page), and returns their apply events and the key of the last one.
	// Keys are opaque to callers. The caller may drop some of the events
	// (those it sent live meanwhile). A page is read with one statement,
	// which InnoDB reads from one snapshot by itself: c needs no
	// transaction. A page reads about as many rows as it returns, however
	// far into the region it starts and whatever other regions hold
	// (regionIndex): a full sync costs the region's size, not its square
	// nor the table's.
	Page func(ctx context.Context, c *ent.Client, region, after string, limit int) (events []Event, last string, err error)

	// Load builds the event of each resource ids names in region, from its
	// current state: an apply, or a delete when it is gone or stopped.
	// Every ID gets an event. All reads go through c, which callers make a
	// snapshot, so one resource's rows are read consistently (I6).
	Load func(ctx context.Context, c *ent.Client, region string, ids []string) (map[string]*ctrlv1.DeploymentChangeEvent, error)

	// Desired returns which of ids the region desires (running or
	// stopped): only those take an agent's sync report.
	Desired func(ctx context.Context, c *ent.Client, region string, ids []string) ([]string, error)

	// Describe says, in a few words, what the region desires of each of
	// the resources ids, for operators reading pending changes; a
	// resource it has no words for is gone.
	Describe func(ctx context.Context, c *ent.Client, region string, ids []string) (map[string]string, error)

	// DesiredSQL holds for a resource_syncs row s whose resource its
	// region still desires (the same rule as Desired, for a sweep in SQL).
	DesiredSQL string
}

// DescribeState is a workload's desired state in a region in a few words:
// "desired: running, 3 replicas, app:1".
func DescribeState(status string, replicas int, image string) string {
	return fmt.Sprintf("desired: %s, %d replicas, %s", status, replicas, image)
}

// Event is one resource's event, with the resource's ID.
type Event struct {
	ID    string
	Event *ctrlv1.DeploymentChangeEvent
}

// All is every kind, in the order a full sync sends them.
var All = []Kind{deployments, sentinels, ciliumNetworkPolicies}

// Named returns the kind named name (rpc.Kind*).
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

// regionIndex returns the name of table's index on its region column
// alone, which InnoDB extends with the primary key: (region, id). A page
// statement names it (FORCE INDEX) so that MariaDB reads it as a range
// from (region, after): on its own, with statistics that lag the table (a
// region filled since they were last taken), it looks the region up and
// filters the key inside the index, walking every entry of the region
// before the page's start, so a full sync of n resources read n²/2 entries
// over its pages. The range costs the page's rows whatever the statistics
// or the other regions hold; the primary key in key order, MariaDB's other
// choice, costs every region's rows in between.
func regionIndex(table *schema.Table) string {
	for _, idx := range table.Indexes {
		if len(idx.Columns) == 1 && idx.Columns[0].Name == "region" {
			return idx.Name
		}
	}
	panic(fmt.Sprintf("kinds: table %s has no index on region alone, which its full-sync page reads", table.Name))
}

// CurrentSyncSQL holds for a resource_syncs row s that describes the resource
// as the region desires it now: the resource is desired in the region,
// and no change of it is newer than the newest event the agent had
// received for it when it reported. So a row goes stale when the
// deployment is stopped, or deleted and deployed again under the same ID,
// after the report (a new agent process never hears of a stopped
// deployment again, and a new deployment is not the old one's failure),
// and is current again once the agent reports on the new change. Versions,
// not times: replicas' clocks differ. (A row from an agent that does not
// send received_version falls back to its applied version.) Region health
// counts only current rows, and retention deletes the others: a row
// superseded by a change is written again when the agent reports on it.
var CurrentSyncSQL = currentSyncSQL()

func currentSyncSQL() string {
	var desired, changeTypes []string
	for _, k := range All {
		desired = append(desired, fmt.Sprintf("(s.kind = '%s' AND EXISTS (%s))", k.Name, k.DesiredSQL))
		changeTypes = append(changeTypes, fmt.Sprintf("WHEN '%s' THEN '%s'", k.Name, k.ChangeType))
	}
	changeType := "CASE s.kind " + strings.Join(changeTypes, " ") + " END"
	return "(" + strings.Join(desired, " OR ") + ") AND " +
		changelog.NoChangeAbove(changeType, "s.resource_id", "s.region", "GREATEST(s.received_version, s.applied_version)")
}
