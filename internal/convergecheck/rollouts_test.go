package convergecheck

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/deploysync/deploysync/internal/rolloutcheck"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// fakeLog is a region's cluster as the image log would have seen it.
type fakeLog struct {
	sets []rolloutcheck.Sighting
	pods []rolloutcheck.PodSighting
}

func (f *fakeLog) History(string) []rolloutcheck.Sighting { return f.sets }
func (f *fakeLog) Pods(string) []rolloutcheck.PodSighting { return f.pods }

// The rollout verdict is the promise itself: a later wave gets the new
// spec only after each earlier wave's regions ran it, every replica
// ready, for their bake, with no Pod of it restarting (since an
// operator's resume of the wave, if any), or after an operator promoted
// that wave by hand; a region it never reached never
// gets it. A stopped, 0-replica or not-yet-ready canary proves nothing.
func TestTheRolloutVerdictIsThePromise(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	const ms = time.Millisecond
	spec := newSpec{image: "app:v2", env: map[string]string{"REV": "7"}}
	old := map[string]string{"REV": "6"}
	sts := func(d time.Duration, image string, env map[string]string, replicas, ready int32) rolloutcheck.Sighting {
		return rolloutcheck.Sighting{Namespace: "acme-prod", Name: "api", Image: image, Env: env, Replicas: replicas,
			Generation: 2, ObservedGeneration: 2, StatusReplicas: replicas, ReadyReplicas: ready, UpdatedReplicas: replicas, At: at(d)}
	}
	deleted := func(d time.Duration) rolloutcheck.Sighting {
		return rolloutcheck.Sighting{Namespace: "acme-prod", Name: "api", Deleted: true, At: at(d)}
	}
	pod := func(d time.Duration, restarts int32) rolloutcheck.PodSighting {
		return rolloutcheck.PodSighting{Namespace: "acme-prod", Name: "api-0", UID: "u1", Owner: "api", Image: spec.image, Env: spec.env,
			Restarts: restarts, Ready: restarts == 0, At: at(d)}
	}
	before := sts(-time.Minute, "app:v1", old, 2, 2)
	readyCanary := []rolloutcheck.Sighting{before, sts(100*ms, "app:v2", spec.env, 2, 0), sts(500*ms, "app:v2", spec.env, 2, 2)}
	// us, the second wave, promoted at 1.9 s, its StatefulSet on the new
	// spec at 2 s.
	usGot := &fakeLog{sets: []rolloutcheck.Sighting{before, sts(2000*ms, "app:v2", spec.env, 2, 0)}}
	cases := []struct {
		name string
		eu   *fakeLog
		// euWhy, usState: the rollout's account of the regions.
		euWhy, usState string
		// euPromoted is when ctrld promoted eu last: after the rollout
		// began, an operator resumed its wave then.
		euPromoted time.Duration
		want       string // in the violation; "" for none
	}{
		{name: "ran it ready for its bake", eu: &fakeLog{sets: readyCanary, pods: []rolloutcheck.PodSighting{pod(300*ms, 0)}}},
		{name: "stopped during its bake", eu: &fakeLog{sets: append(readyCanary[:3:3], deleted(800*ms))},
			want: "had not run it ready for its bake of 1s before: its longest ready run was 300ms"},
		{name: "scaled to 0", eu: &fakeLog{sets: []rolloutcheck.Sighting{before, sts(100*ms, "app:v2", spec.env, 0, 0)}},
			want: ": scaled to 0"},
		{name: "stopped before the update", eu: &fakeLog{sets: []rolloutcheck.Sighting{before, deleted(-time.Second)}},
			want: ": deleted (stopped, or removed)"},
		{name: "ready on the spec before only", eu: &fakeLog{sets: []rolloutcheck.Sighting{before, sts(100*ms, "app:v2", old, 2, 2)}},
			want: ": on another spec (app:v2, another environment)"},
		{name: "a restart in its bake", eu: &fakeLog{sets: readyCanary, pods: []rolloutcheck.PodSighting{pod(300*ms, 0), pod(1000*ms, 1)}},
			want: "had a Pod of it restart before: acme-prod/api-0, restart count 1"},
		{name: "a restart, then its wave resumed", euPromoted: 1200 * ms,
			eu: &fakeLog{sets: readyCanary, pods: []rolloutcheck.PodSighting{pod(300*ms, 0), pod(1000*ms, 1), pod(1300*ms, 1)}}},
		{name: "a restart after its wave resumed", euPromoted: 1200 * ms,
			eu:   &fakeLog{sets: readyCanary, pods: []rolloutcheck.PodSighting{pod(300*ms, 0), pod(1000*ms, 1), pod(1500*ms, 2)}},
			want: "had a Pod of it restart before: acme-prod/api-0, restart count 2"},
		{name: "a restart after the promotion", eu: &fakeLog{sets: readyCanary, pods: []rolloutcheck.PodSighting{pod(300*ms, 0), pod(1950*ms, 1)}}},
		{name: "scaled to 0, then promoted by hand", euWhy: "promoted by dana",
			eu: &fakeLog{sets: []rolloutcheck.Sighting{before, sts(100*ms, "app:v2", spec.env, 0, 0)}}},
		{name: "never reached", usState: "waiting", eu: &fakeLog{sets: readyCanary},
			want: "never reached us, yet its StatefulSet carried the new spec (app:v2) at"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			usState := "passed"
			if c.usState != "" {
				usState = c.usState
			}
			r := &ctrlv1.Rollout{DeploymentId: "api", Revision: 3, State: "succeeded", ToImage: spec.image, FromImage: "app:v1",
				CreatedAt: timestamppb.New(t0), FinishedAt: timestamppb.New(at(20 * time.Second)),
				Strategy: &ctrlv1.RolloutStrategy{Waves: []*ctrlv1.RolloutWave{
					{Regions: []string{"eu"}, Bake: durationpb.New(time.Second)},
					{Regions: []string{"us"}, Bake: durationpb.New(time.Second)},
				}},
				Regions: []*ctrlv1.RolloutRegion{
					{Region: "eu", Wave: 1, State: "passed", Why: c.euWhy, PromotedAt: timestamppb.New(at(c.euPromoted))},
					{Region: "us", Wave: 2, State: usState, PromotedAt: timestamppb.New(at(1900 * ms))},
				}}
			if usState == "waiting" {
				r.Regions[1].PromotedAt = nil
			}
			violations, passes, _ := brokenPromise(r, spec, map[string]clusterLog{"eu": c.eu, "us": usGot})
			switch {
			case c.want == "" && len(violations) > 0:
				t.Fatalf("violations %q, want none", violations)
			case c.want != "" && (len(violations) != 1 || !strings.Contains(violations[0], c.want)):
				t.Fatalf("violations %q, want one saying %q", violations, c.want)
			}
			if c.name == "ran it ready for its bake" && (len(passes) != 1 || passes[0].margin != 400*ms || !passes[0].carried.Equal(at(2000*ms))) {
				t.Errorf("passes %+v, want one carried at 2s, with the 400ms by which eu's 1.4s ready run before the promotion covered its bake", passes)
			}
			t.Log(violations)
		})
	}
}
