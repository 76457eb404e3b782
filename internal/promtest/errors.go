package promtest

import "errors"

// ErrNoBinary means the Prometheus server could not be had: neither
// EnvBin nor scripts/prometheus.sh gave one.
var ErrNoBinary = errors.New("promtest: no Prometheus server binary")

// ErrClosed means the server was closed: nothing starts it again.
var ErrClosed = errors.New("promtest: server closed")
