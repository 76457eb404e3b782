package stream

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploysync/deploysync/daemon/changelog"
	"github.com/deploysync/deploysync/daemon/kinds"
	"github.com/deploysync/deploysync/daemon/metrics"
	"github.com/deploysync/deploysync/ent"
	"github.com/deploysync/deploysync/internal/recovery"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// The tests here drive syncKind with a kind whose pages are made up, so
// that when each page is read, and what the client does meanwhile, is the
// test's to decide. What the pages read from MariaDB is tested in
// daemon/kinds and, end to end, in behaviour_test.go.

// pagedKind is a kind of pages resources, pageSize to a page, whose Page
// reports each read on reads (the index of the page it read).
func pagedKind(pages, pageSize int, reads chan<- int) kinds.Kind {
	return kinds.Kind{
		Name:       "test",
		ChangeType: "test",
		Page: func(ctx context.Context, _ *ent.Client, _, after string, limit int) ([]kinds.Event, string, error) {
			page := 0
			if after != "" {
				last, err := strconv.Atoi(after)
				if err != nil {
					return nil, after, err
				}
				page = last + 1
			}
			reads <- page
			if page >= pages {
				return nil, after, nil
			}
			events := make([]kinds.Event, limit)
			for i := range events {
				id := fmt.Sprintf("r%d-%d", page, i)
				events[i] = kinds.Event{ID: id, Event: &ctrlv1.DeploymentChangeEvent{Event: &ctrlv1.DeploymentChangeEvent_Deployment{
					Deployment: &ctrlv1.DeploymentEvent{Action: ctrlv1.Action_ACTION_APPLY, Deployment: &ctrlv1.DeploymentState{DeploymentId: id}},
				}}}
			}
			return events, fmt.Sprint(page), nil
		},
	}
}

func testStreamer(pageSize int) *Streamer {
	return &Streamer{
		cfg:           Config{PageSize: pageSize},
		metrics:       metrics.New(prometheus.NewRegistry()),
		guard:         recovery.Guard{},
		fullSyncSlots: make(chan struct{}, 1),
	}
}

// A full sync reads one page ahead of the one it sends, never more: a
// client that does not read holds at most two pages of its region in
// ctrld's memory, and no database connection or full-sync slot (I8).
func TestAFullSyncReadsOnePageAheadOfItsClientAndNoMore(t *testing.T) {
	const pageSize = 2
	s := testStreamer(pageSize)
	reads := make(chan int, 100)
	release := make(chan struct{})
	sent := 0
	st := &state{req: Request{Region: "eu"}, send: func(*ctrlv1.DeploymentChangeEvent) error {
		if sent++; sent == 1 {
			<-release // the client reads nothing for now
		}
		return nil
	}}
	done := make(chan error, 1)
	go func() {
		done <- s.syncKind(context.Background(), st, pagedKind(5, pageSize, reads), 7, map[changelog.Resource]bool{}, func() error { return nil })
	}()

	// The first page, which the client does not read, and the next.
	for want := range 2 {
		select {
		case got := <-reads:
			if got != want {
				t.Fatalf("read page %d, want %d", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("page %d was not read while the client had not read page 0", want)
		}
	}
	// A page read after those would come at once: watch for one a while.
	select {
	case got := <-reads:
		t.Fatalf("read page %d while the client had not read the first", got)
	case <-time.After(200 * time.Millisecond):
	}
	if n := len(s.fullSyncSlots); n != 0 {
		t.Errorf("%d full-sync slots held while the client does not read", n)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if sent != 5*pageSize {
		t.Errorf("sent %d events, want %d", sent, 5*pageSize)
	}
}

// A page read ahead may be older than a live change relayed after the page
// before it was sent; its resource is then skipped, as the live event
// carries newer state: which resources were sent live is asked when a page
// is sent, not when it was read.
func TestAPageReadAheadSkipsWhatWasSentLiveSinceItWasRead(t *testing.T) {
	const pageSize = 2
	s := testStreamer(pageSize)
	reads := make(chan int, 100)
	kind := pagedKind(2, pageSize, reads)
	sentLive := map[changelog.Resource]bool{}
	var mu sync.Mutex
	var sent []string
	st := &state{req: Request{Region: "eu"}, send: func(ev *ctrlv1.DeploymentChangeEvent) error {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, ev.GetDeployment().GetDeployment().GetDeploymentId())
		return nil
	}}
	betweens := 0
	between := func() error {
		if betweens++; betweens == 1 {
			// After the first page: the second is read (ahead, or
			// now), and then a live change of one of its resources is
			// relayed.
			for timeout := time.After(10 * time.Second); ; {
				select {
				case page := <-reads:
					if page != 1 {
						continue
					}
				case <-timeout: // read after this, then
				}
				break
			}
			sentLive[changelog.Resource{Type: kind.ChangeType, ID: "r1-0"}] = true
		}
		return nil
	}
	if err := s.syncKind(context.Background(), st, kind, 7, sentLive, between); err != nil {
		t.Fatal(err)
	}
	want := []string{"r0-0", "r0-1", "r1-1"}
	if fmt.Sprint(sent) != fmt.Sprint(want) {
		t.Errorf("sent %v, want %v", sent, want)
	}
}

// A full sync whose stream's context ends while a kind's pages are read
// fails that kind, whichever way the reader notices: one that ended as
// if it had read the last page would be followed by the full sync's
// bookmark, and the agent would delete everything the missing pages hold.
// Token revocation ends a stream's context this way while the stream
// itself still delivers.
func TestAFullSyncCutShortByItsContextFails(t *testing.T) {
	const pageSize = 2
	for i := range 200 {
		s := testStreamer(pageSize)
		ctx, cancel := context.WithCancel(context.Background())
		reads := make(chan int, 100)
		kind := pagedKind(5, pageSize, reads)
		page := kind.Page
		kind.Page = func(pctx context.Context, c *ent.Client, region, after string, limit int) ([]kinds.Event, string, error) {
			if after != "" { // the second page: the stream's context ends
				cancel()
				return nil, after, pctx.Err()
			}
			return page(pctx, c, region, after, limit)
		}
		st := &state{req: Request{Region: "eu"}, send: func(*ctrlv1.DeploymentChangeEvent) error { return nil }}
		err := s.syncKind(ctx, st, kind, 7, map[changelog.Resource]bool{}, func() error { return nil })
		if err == nil {
			t.Fatalf("run %d: a kind cut short after its first page ended without an error", i)
		}
	}
}
