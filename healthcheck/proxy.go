package healthcheck

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// DefaultProxyHealthAddress is where kube-proxy, and so kube-ipvs, serves /healthz and /livez.
const DefaultProxyHealthAddress = "0.0.0.0:10256"

// TaintToBeDeleted is the taint the cluster autoscaler puts on a Node it is about to remove;
// like a deletion timestamp it makes the Node ineligible for load-balancer traffic.
const TaintToBeDeleted = "ToBeDeletedByClusterAutoscaler"

// ProxyHealth tracks whether the proxy keeps the kernel up to date, and whether its Node
// should receive load-balancer traffic. It is safe for concurrent use.
//
// The controller calls QueuedUpdate when it marks a change for a later sync, Updated after a
// sync that applied everything, SyncFailed after a sync that did not, and SyncNode whenever
// its Node object changes.
type ProxyHealth struct {
	now     func() time.Time
	listen  ListenFunc
	timeout time.Duration

	mu            sync.RWMutex
	repairTook    time.Duration // the last full sync's duration: a change may wait that long more
	lastUpdated   time.Time     // the last successful sync
	attempted     bool          // a sync was attempted (Updated or SyncFailed called)
	lastFailed    bool          // the last sync attempt failed
	oldestPending time.Time     // the oldest queued change not yet applied; zero if none
	newestQueued  time.Time     // the newest QueuedUpdate time since everything was applied
	nodeDeleting  bool
	served        func(livez bool, code int)
}

// NewProxyHealth returns a tracker that reports unhealthy once a queued change has waited
// longer than 2 × syncPeriod (syncPeriod <= 0 means 30s).
func NewProxyHealth(syncPeriod time.Duration, opts ...Option) *ProxyHealth {
	if syncPeriod <= 0 {
		syncPeriod = 30 * time.Second
	}
	o := buildOptions(opts)
	return &ProxyHealth{now: o.Now, listen: o.Listen, timeout: 2 * syncPeriod}
}

// FullSyncTook records how long the last full sync (the periodic repair) took. A change
// queued while one runs waits for it, so the staleness limit is 2 × syncPeriod plus twice
// that: at a scale where a repair takes a minute, a busy proxy is not reported dead (and
// restarted by its liveness probe) merely for being large, while a stuck one still is.
func (h *ProxyHealth) FullSyncTook(d time.Duration) {
	h.mu.Lock()
	h.repairTook = max(d, 0)
	h.mu.Unlock()
}

// QueuedUpdate records that a change was queued at t and is not applied yet. Only the
// oldest pending change matters, so calling it for every event is cheap.
func (h *ProxyHealth) QueuedUpdate(t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.oldestPending.IsZero() || t.Before(h.oldestPending) {
		h.oldestPending = t
	}
	h.newestQueued = later(h.newestQueued, t)
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Updated records a successful sync that applied every change queued up to t; t should be
// the time the sync took its snapshot of queued changes. A change queued after t stays
// pending, counted (conservatively) from t.
func (h *ProxyHealth) Updated(t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attempted = true
	h.lastFailed = false
	h.lastUpdated = later(h.lastUpdated, t)
	switch {
	case !h.newestQueued.After(t):
		h.oldestPending, h.newestQueued = time.Time{}, time.Time{}
	case !h.oldestPending.After(t):
		h.oldestPending = t
	}
}

// SyncFailed records a sync attempt that did not apply everything: the proxy is unhealthy
// until the next Updated. Queued changes stay pending. Call it for a sync that failed as a
// whole; whether one Service's failed kernel call should make the node unhealthy is the
// caller's decision.
func (h *ProxyHealth) SyncFailed(t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attempted = true
	h.lastFailed = true
	if h.oldestPending.IsZero() {
		h.oldestPending = t
	}
	h.newestQueued = later(h.newestQueued, t)
}

// SyncNode records this proxy's Node: it is ineligible for load-balancer traffic (/healthz
// fails) while it has a deletion timestamp or the autoscaler's to-be-deleted taint. nil
// means the Node was deleted.
func (h *ProxyHealth) SyncNode(node *corev1.Node) {
	deleting := node == nil || !node.DeletionTimestamp.IsZero()
	if node != nil {
		for _, t := range node.Spec.Taints {
			if t.Key == TaintToBeDeleted {
				deleting = true
			}
		}
	}
	h.SetNodeDeleting(deleting)
}

// SetNodeDeleting sets the Node condition directly.
func (h *ProxyHealth) SetNodeDeleting(deleting bool) {
	h.mu.Lock()
	h.nodeDeleting = deleting
	h.mu.Unlock()
}

// status is one consistent reading of the state.
type status struct {
	now, lastUpdated time.Time
	live             bool // the sync rules hold
	nodeEligible     bool
}

func (h *ProxyHealth) status() status {
	h.mu.RLock()
	defer h.mu.RUnlock()
	now := h.now()
	syncOK := (h.attempted && !h.lastFailed) || (!h.attempted && h.oldestPending.IsZero())
	fresh := h.oldestPending.IsZero() || now.Sub(h.oldestPending) <= h.timeout+2*h.repairTook
	return status{now: now, lastUpdated: h.lastUpdated, live: syncOK && fresh, nodeEligible: !h.nodeDeleting}
}

// Live reports the /livez condition: the last sync succeeded (or none was attempted and
// nothing is pending) and no queued change is older than 2 × syncPeriod (plus twice the
// last full sync's duration, see FullSyncTook). Service health
// servers report it as serviceProxyHealthy.
func (h *ProxyHealth) Live() bool { return h.status().live }

// Healthy reports the /healthz condition: Live and the Node is not being deleted.
func (h *ProxyHealth) Healthy() bool {
	s := h.status()
	return s.live && s.nodeEligible
}

type proxyBody struct {
	LastUpdated  string `json:"lastUpdated"`
	CurrentTime  string `json:"currentTime"`
	NodeEligible *bool  `json:"nodeEligible,omitempty"`
	Healthy      bool   `json:"healthy"`
}

// OnServed has f called with every answer Handler gives: livez for /livez (/healthz
// otherwise) and the HTTP status code, for kube-proxy's kubeproxy_proxy_healthz_total and
// kubeproxy_proxy_livez_total. Call it before serving.
func (h *ProxyHealth) OnServed(f func(livez bool, code int)) {
	h.mu.Lock()
	h.served = f
	h.mu.Unlock()
}

// Handler serves /healthz and /livez (any method) with a JSON body and 200 or 503.
func (h *ProxyHealth) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { h.write(w, true) })
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { h.write(w, false) })
	return mux
}

func (h *ProxyHealth) write(w http.ResponseWriter, withNode bool) {
	s := h.status()
	b := proxyBody{
		LastUpdated: s.lastUpdated.Format(time.RFC3339Nano),
		CurrentTime: s.now.Format(time.RFC3339Nano),
		Healthy:     s.live,
	}
	if withNode {
		eligible := s.nodeEligible
		b.NodeEligible = &eligible
		b.Healthy = s.live && eligible
	}
	code := writeJSON(w, b.Healthy, b)
	h.mu.RLock()
	served := h.served
	h.mu.RUnlock()
	if served != nil {
		served(!withNode, code)
	}
}

// writeJSON answers with body and 200 (ok) or 503, and returns the status code written.
func writeJSON(w http.ResponseWriter, ok bool, body any) int {
	data, err := json.Marshal(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	code := http.StatusServiceUnavailable
	if ok {
		code = http.StatusOK
	}
	w.WriteHeader(code)
	_, _ = w.Write(append(data, '\n'))
	return code
}

// Serve serves Handler on addr (e.g. DefaultProxyHealthAddress) until ctx ends, then shuts
// down gracefully and returns nil. It returns at once if addr cannot be bound.
func (h *ProxyHealth) Serve(ctx context.Context, addr string) error {
	return serve(ctx, h.listen, addr, h.Handler())
}
