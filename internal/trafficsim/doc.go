// Package trafficsim is a traffic SIMULATOR: it stands in for the
// application behind each deployment, because the Pods of the dev stack
// and of the tests are kwok's, and kwok's Pods run no code. Nothing here
// serves or measures a real request. What it exports looks like what an
// instrumented application would export, so that the metric gates of
// issue 30 (agentd querying its region's Prometheus, ctrld gating each
// rollout wave on the answer) can be built and tested against a real
// Prometheus.
//
// It watches, through the region's kube-apiserver, the Pods of the
// deployments agentd manages (the managed-by label and a deployment ID
// label, internal/manifest), and for every one that is Running and Ready
// counts simulated requests at a fixed rate (DefaultRate per Pod):
//
//   - deploysync_sim_requests_total{namespace, deployment, spec_hash, code}
//     counts them, code "200" or "500";
//   - deploysync_sim_request_duration_seconds{namespace, deployment,
//     spec_hash} is a histogram of how long they took.
//
// The Pods' series are summed per namespace, deployment and spec hash (the
// Pod's unkey.spec.hash label, so the two revisions of a rolling update are
// told apart), and go from /metrics once the last Pod of a series is gone.
//
// How the simulated application answers comes from the tag of the image
// the API server says the Pod's container runs (a small table, behaviour.go,
// to which more tags can be added): ":errors" fails every 5th request
// (20 %) with 500, ":slow" takes 2 s per request, and every other image
// answers all requests with 200 in 50 ms.
//
// It is deterministic, so tests can assert exact values: a Pod's requests
// are its time serving (Running and Ready, as last seen) times the rate,
// rounded down, brought up to date whenever the metrics are collected
// (each scrape); the n-th request of an ":errors" Pod fails exactly when n
// is a multiple of 5; every request of a Pod takes exactly its image's
// latency. No goroutine ticks and nothing is random.
package trafficsim
