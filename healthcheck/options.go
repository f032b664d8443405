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
	"errors"
	"net"
	"net/http"
	"time"
)

// ListenFunc opens a listener; net.Listen is the default. Tests inject their own.
type ListenFunc func(network, addr string) (net.Listener, error)

// Option configures a ProxyHealth or a ServiceHealth.
type Option func(*options)

type options struct {
	now    func() time.Time
	listen ListenFunc
}

func buildOptions(opts []Option) options {
	o := options{now: time.Now, listen: net.Listen}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// WithClock replaces time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}

// WithListen replaces net.Listen for every listener opened.
func WithListen(listen ListenFunc) Option {
	return func(o *options) {
		if listen != nil {
			o.listen = listen
		}
	}
}

// shutdownGrace bounds how long Serve waits for in-flight requests when its context ends.
const shutdownGrace = 5 * time.Second

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
	ln, err := listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := newHTTPServer(h)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		// Serve never returns nil; anything but ErrServerClosed is a real failure.
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	<-done
	return nil
}
