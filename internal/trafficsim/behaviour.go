package trafficsim

import (
	"strings"
	"time"
)

// Behaviour is how a simulated application answers.
type Behaviour struct {
	// FailEvery makes every FailEvery-th request answer 500 (5 fails
	// 20 %); 0 fails none.
	FailEvery int64
	// Latency is how long each request takes.
	Latency time.Duration
}

// ErrorFraction is the share of requests that fail.
func (b Behaviour) ErrorFraction() float64 {
	if b.FailEvery <= 0 {
		return 0
	}
	return 1 / float64(b.FailEvery)
}

// failures is how many of the first n requests fail: exactly every
// FailEvery-th one, so any count is exact, not a random draw.
func (b Behaviour) failures(n int64) int64 {
	if b.FailEvery <= 0 {
		return 0
	}
	return n / b.FailEvery
}

// Image tags with a behaviour of their own; any other tag (or none) is
// healthy.
const (
	// ErrorsTag (say nginx:errors) fails 20 % of requests with 500.
	ErrorsTag = "errors"
	// SlowTag (say nginx:slow) answers in 2 s instead of 50 ms.
	SlowTag = "slow"
)

// healthy is how an image answers whose tag is not in byTag.
var healthy = Behaviour{Latency: 50 * time.Millisecond}

// byTag is the behaviour of each special tag: a new tag is a new row.
var byTag = map[string]Behaviour{
	ErrorsTag: {FailEvery: 5, Latency: healthy.Latency},
	SlowTag:   {Latency: 2 * time.Second},
}

// BehaviourOf is how an application running image answers, from the
// image's tag.
func BehaviourOf(image string) Behaviour {
	if b, ok := byTag[Tag(image)]; ok {
		return b
	}
	return healthy
}

// Tag is image's tag ("errors" of registry:5000/nginx:errors@sha256:…),
// or "" when it has none: a colon before the last slash is a registry's
// port, and a digest is no tag.
func Tag(image string) string {
	image, _, _ = strings.Cut(image, "@")
	colon := strings.LastIndex(image, ":")
	if colon < 0 || colon < strings.LastIndex(image, "/") {
		return ""
	}
	return image[colon+1:]
}
