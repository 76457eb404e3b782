package trafficsim

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
)

// Serve runs a simulator for the Pods of kube's cluster until ctx ends,
// its metrics on /metrics at a free port of 127.0.0.1 (addr, host:port,
// for a Prometheus to scrape): what the tests and checkers run per
// region. stop ends the listener.
func Serve(ctx context.Context, kube kubernetes.Interface, opts Options) (addr string, stop func(), err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	sim := New(opts)
	reg := prometheus.NewRegistry()
	reg.MustRegister(sim)
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(lis)
	go sim.Run(ctx, kube)
	return lis.Addr().String(), func() { srv.Close() }, nil
}
