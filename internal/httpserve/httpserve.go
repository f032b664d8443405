// Package httpserve is what the proxy's HTTP endpoints (package healthcheck's /healthz,
// /livez and per-Service servers, package metrics' /metrics) share: the clock and listen
// function their options let tests replace, and a serve loop that shuts down gracefully when
// its context ends.
//
// It is internal: both packages keep their own exported options; this is only the plumbing
// behind them.
package httpserve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// ListenFunc opens a listener; net.Listen is the default.
type ListenFunc func(network, addr string) (net.Listener, error)

// Hooks are the clock and the listen function a server uses.
type Hooks struct {
	Now    func() time.Time
	Listen ListenFunc
}

// DefaultHooks returns time.Now and net.Listen.
func DefaultHooks() Hooks {
	return Hooks{Now: time.Now, Listen: net.Listen}
}

// SetNow replaces the clock; nil keeps the current one.
func (h *Hooks) SetNow(now func() time.Time) {
	if now != nil {
		h.Now = now
	}
}

// SetListen replaces the listen function; nil keeps the current one.
func (h *Hooks) SetListen(listen ListenFunc) {
	if listen != nil {
		h.Listen = listen
	}
}

// ShutdownGrace bounds how long Serve waits for in-flight requests when its context ends.
const ShutdownGrace = 5 * time.Second

// Serve listens on addr with listen and serves srv until ctx ends, then shuts down
// gracefully (closing what is still open after ShutdownGrace). It returns nil after a
// shutdown caused by ctx, and the error when listening or serving fails.
func Serve(ctx context.Context, listen ListenFunc, addr string, srv *http.Server) error {
	ln, err := listen("tcp", addr)
	if err != nil {
		return err
	}
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
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	<-done
	return nil
}
