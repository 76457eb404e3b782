package limits

const (
	// MaxMessageBytes is the largest gRPC message ctrld sends or receives,
	// and the largest its clients receive.
	MaxMessageBytes = 4 << 20

	// MaxResourceBytes is the largest desired-state resource ctrld accepts:
	// a deployment's image, command and env together, or a policy's spec,
	// as stored. A quarter of the message limit leaves room for the event's
	// other fields and any future growth of them. A policy's spec is also
	// counted as Kubernetes stores it, its JSON plus server-side apply's
	// record of its keys (managedFields, about as big again for a spec of
	// many labels): within this limit, its object fits etcd's 1.5 MiB
	// request limit with half a MiB to spare.
	MaxResourceBytes = 1 << 20

	// MaxErrorBytes is the longest error text an agent reports (its last
	// error, its full sync's, a resource's failing apply): what ctrld
	// takes of one. Agents clip theirs to it, a resource's to half of it
	// (agentd/status: one report carries up to 500).
	MaxErrorBytes = 2 << 10

	// MaxInstanceReasonBytes is the longest reason an agent reports for an
	// instance that is not ready (Instance.reason): Kubernetes' own
	// (CrashLoopBackOff, ImagePullBackOff, ...) are single CamelCase words
	// well within it; agents clip any other to it.
	MaxInstanceReasonBytes = 64

	// MaxEvidenceBytes is the longest evidence an agent reports of a
	// crashed instance (Instance.evidence: its termination message or
	// last lines of log): enough for a panic's first lines, small enough
	// that 500 crash-looping instances make a 1 MiB report.
	MaxEvidenceBytes = 2 << 10
)
