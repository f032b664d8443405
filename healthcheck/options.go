// Package healthcheck serves the proxy's own health (/healthz and /livez, by default on
// port 10256) and one health-check server per Service with externalTrafficPolicy: Local on
// its healthCheckNodePort, which cloud load balancers probe to find the nodes that have
// local endpoints.
//
// Both parts are plain values fed by the controller: ProxyHealth learns about queued changes,
// syncs and the Node; ServiceHealth receives the wanted health-check ports and the local
// endpoint counts as complete maps and opens, closes or rebinds listeners to match.
package healthcheck

import (
	"context"
	"net/http"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/httpserve"
)

// ListenFunc opens a listener; net.Listen is the default. Tests inject their own.
type ListenFunc = httpserve.ListenFunc

// Option configures a ProxyHealth or a ServiceHealth.
type Option func(*httpserve.Hooks)

func buildOptions(opts []Option) httpserve.Hooks {
	o := httpserve.DefaultHooks()
	for _, f := range opts {
		f(&o)
	}
	return o
}

// WithClock replaces time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *httpserve.Hooks) { o.SetNow(now) }
}

// WithListen replaces net.Listen for every listener opened.
func WithListen(listen ListenFunc) Option {
	return func(o *httpserve.Hooks) { o.SetListen(listen) }
}

func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
}

// serve listens on addr and serves h until ctx ends, then shuts down gracefully. It returns
// nil after a shutdown caused by ctx, and the error when listening or serving fails.
func serve(ctx context.Context, listen ListenFunc, addr string, h http.Handler) error {
	return httpserve.Serve(ctx, listen, addr, newHTTPServer(h))
}
