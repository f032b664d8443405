package healthcheck

import (
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// HeaderEndpointWeight carries the number of local endpoints in every Service health answer.
const HeaderEndpointWeight = "X-Load-Balancing-Endpoint-Weight"

// ServiceHealth runs one HTTP server per Service with externalTrafficPolicy: Local, on its
// healthCheckNodePort on all addresses. Any path answers 200 while the Service has local
// ready endpoints and the proxy is healthy, 503 otherwise. It is safe for concurrent use.
type ServiceHealth struct {
	listen       ListenFunc
	proxyHealthy func() bool

	syncMu sync.Mutex // serialises SyncServices and Close: the listener I/O runs outside mu

	mu        sync.Mutex
	servers   map[model.ServiceName]*svcServer
	endpoints map[model.ServiceName]int
	closed    bool
}

type svcServer struct {
	port uint16
	srv  *http.Server
	done chan struct{} // closed when Serve has returned
}

// NewServiceHealth returns a ServiceHealth with no servers. proxyHealthy (ProxyHealth.Live,
// typically; nil means always healthy) is asked on every request.
func NewServiceHealth(proxyHealthy func() bool, opts ...Option) *ServiceHealth {
	o := buildOptions(opts)
	if proxyHealthy == nil {
		proxyHealthy = func() bool { return true }
	}
	return &ServiceHealth{
		listen:       o.Listen,
		proxyHealthy: proxyHealthy,
		servers:      map[model.ServiceName]*svcServer{},
		endpoints:    map[model.ServiceName]int{},
	}
}

// SyncServices makes the servers match ports, the complete set of Services that need one
// (a port of 0 counts as absent). Servers of Services no longer present are closed, a
// changed port is closed and the new one opened, unchanged ones keep their listener. The
// result holds an error for each Service whose port could not be bound (nil if none); those
// Services are tried again on the next call, and every other Service is served regardless.
func (s *ServiceHealth) SyncServices(ports map[model.ServiceName]uint16) map[model.ServiceName]error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return closedErrors(ports)
	}
	var stale []*svcServer
	for name, srv := range s.servers {
		if p := ports[name]; p != srv.port {
			stale = append(stale, srv)
			delete(s.servers, name)
		}
	}
	var open []model.ServiceName
	for name, p := range ports {
		if _, ok := s.servers[name]; !ok && p != 0 {
			open = append(open, name)
		}
	}
	s.mu.Unlock()

	// Close first, so a port that moves from one Service to another can be bound again.
	for _, srv := range stale {
		srv.close()
	}
	// Sorted, so that when two Services ask for the same port the same one always gets it.
	sort.Slice(open, func(i, j int) bool { return serviceLess(open[i], open[j]) })
	var errs map[model.ServiceName]error
	for _, name := range open {
		srv, err := s.start(name, ports[name])
		if err != nil {
			if errs == nil {
				errs = map[model.ServiceName]error{}
			}
			errs[name] = err
			continue
		}
		s.mu.Lock()
		s.servers[name] = srv
		s.mu.Unlock()
	}
	return errs
}

func closedErrors(ports map[model.ServiceName]uint16) map[model.ServiceName]error {
	errs := map[model.ServiceName]error{}
	for name, p := range ports {
		if p != 0 {
			errs[name] = fmt.Errorf("health check server for %s: already closed", name)
		}
	}
	return errs
}

func (s *ServiceHealth) start(name model.ServiceName, port uint16) (*svcServer, error) {
	ln, err := s.listen("tcp", net.JoinHostPort("", strconv.Itoa(int(port))))
	if err != nil {
		return nil, fmt.Errorf("health check node port %d for Service %s: %w", port, name, err)
	}
	srv := &svcServer{port: port, srv: newHTTPServer(s.handler(name)), done: make(chan struct{})}
	go func() {
		defer close(srv.done)
		_ = srv.srv.Serve(ln) // returns ErrServerClosed after close
	}()
	return srv, nil
}

// close stops accepting, drops open connections and waits until the listener is released.
func (v *svcServer) close() {
	_ = v.srv.Close()
	<-v.done
}

// SyncEndpoints sets the number of local ready endpoints of every Service; a Service left
// out has none.
func (s *ServiceHealth) SyncEndpoints(local map[model.ServiceName]int) {
	counts := make(map[model.ServiceName]int, len(local))
	for name, n := range local {
		if n > 0 {
			counts[name] = n
		}
	}
	s.mu.Lock()
	s.endpoints = counts
	s.mu.Unlock()
}

// Ports returns the Services that have a listening server and their ports.
func (s *ServiceHealth) Ports() map[model.ServiceName]uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[model.ServiceName]uint16, len(s.servers))
	for name, srv := range s.servers {
		out[name] = srv.port
	}
	return out
}

// Close stops every server; later SyncServices calls open nothing and report an error.
func (s *ServiceHealth) Close() {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	servers := s.servers
	s.servers = map[model.ServiceName]*svcServer{}
	s.closed = true
	s.mu.Unlock()
	for _, srv := range servers {
		srv.close()
	}
}

type serviceRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

type serviceBody struct {
	Service             serviceRef `json:"service"`
	LocalEndpoints      int        `json:"localEndpoints"`
	ServiceProxyHealthy bool       `json:"serviceProxyHealthy"`
}

func (s *ServiceHealth) handler(name model.ServiceName) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		n := s.endpoints[name]
		s.mu.Unlock()
		healthy := s.proxyHealthy()
		w.Header().Set(HeaderEndpointWeight, strconv.Itoa(n))
		writeJSON(w, n > 0 && healthy, serviceBody{
			Service:             serviceRef{Namespace: name.Namespace, Name: name.Name},
			LocalEndpoints:      n,
			ServiceProxyHealthy: healthy,
		})
	})
}

func serviceLess(a, b model.ServiceName) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}
