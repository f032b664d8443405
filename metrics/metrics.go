// Package metrics exposes kube-ipvs' Prometheus metrics (prefix kube_ipvs_) on a private
// registry: sync timing, pending changes, network programming latency, kernel writes and
// errors, desired-state sizes, the proxy mode, rejected annotations, and per-Service IPVS
// traffic counters read from one IPVS dump per scrape.
//
// The controller owns one *Metrics (New) and calls its methods; Handler or Serve expose it.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/httpserve"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace is the prefix of every kube-ipvs metric.
const Namespace = "kube_ipvs"

// DefaultAddress is where `kube-ipvs run` serves /metrics unless told otherwise.
const DefaultAddress = "127.0.0.1:10249"

// AnnotationLastChangeTriggerTime is the EndpointSlice annotation ObserveProgramming reads.
const AnnotationLastChangeTriggerTime = "endpoints.kubernetes.io/last-change-trigger-time"

// Subsystems: label values of netlink_writes_total and kernel_errors_total. The dataplanes
// name them in their results (package dataplane).
const (
	SubsystemIPVS     = dataplane.SubsystemIPVS
	SubsystemAddress  = dataplane.SubsystemAddress
	SubsystemIPSet    = dataplane.SubsystemIPSet
	SubsystemIPTables = dataplane.SubsystemIPTables
)

// Operations: label values of netlink_writes_total.
const (
	OpAdd    = dataplane.OpAdd
	OpUpdate = dataplane.OpUpdate
	OpDelete = dataplane.OpDelete
)

// Proxy modes: label values of proxy_mode.
const (
	ModeIPVS     = "ipvs"
	ModeIPTables = "iptables"
)

// Sync kinds: label values of sync_duration_seconds.
const (
	KindFull    = "full"
	KindPartial = "partial"
)

var (
	subsystems = []string{SubsystemIPVS, SubsystemAddress, SubsystemIPSet, SubsystemIPTables}
	operations = []string{OpAdd, OpUpdate, OpDelete}
)

// ListenFunc opens a listener; net.Listen is the default.
type ListenFunc = httpserve.ListenFunc

// Option configures New.
type Option func(*config)

type config struct {
	httpserve.Hooks
	runtimeMetrics bool
}

// WithClock replaces time.Now; it is read once, in New, as the start time below which
// EndpointSlice trigger times are ignored.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.SetNow(now) }
}

// WithListen replaces net.Listen in Serve.
func WithListen(listen ListenFunc) Option {
	return func(c *config) { c.SetListen(listen) }
}

// WithoutRuntimeMetrics leaves out the standard go_* and process_* collectors.
func WithoutRuntimeMetrics() Option {
	return func(c *config) { c.runtimeMetrics = false }
}

// Metrics holds every kube-ipvs metric and the registry they live in. Its methods are safe
// for concurrent use.
type Metrics struct {
	reg    *prometheus.Registry
	listen ListenFunc
	start  time.Time

	syncDuration       *prometheus.HistogramVec
	lastSuccessfulSync prometheus.Gauge
	pendingChanges     prometheus.Gauge
	programming        prometheus.Histogram
	netlinkWrites      *prometheus.CounterVec
	kernelErrors       *prometheus.CounterVec
	virtualServers     prometheus.Gauge
	realServers        prometheus.Gauge
	vips               prometheus.Gauge
	ipsetEntries       prometheus.Gauge
	proxyMode          *prometheus.GaugeVec
	invalidAnnotations *prometheus.CounterVec
	repair             repairMetrics

	modeMu sync.Mutex
	modes  map[string]bool // every mode label value exported so far
	mode   string          // the active mode, served at /proxyMode

	statsMu sync.Mutex
	stats   *ServiceStatsCollector

	checksState // per-Service backend check metrics (backendchecks.go)

	kpOnce sync.Once
	kp     *kubeProxyCleanup // --cleanup-kube-proxy's metrics (kubeproxy.go)

	compat *compat // kube-proxy's own metrics, under its names (compat.go)
}

// New creates the metrics on a fresh private registry.
func New(opts ...Option) *Metrics {
	cfg := config{Hooks: httpserve.DefaultHooks(), runtimeMetrics: true}
	for _, o := range opts {
		o(&cfg)
	}
	m := &Metrics{
		reg:    prometheus.NewRegistry(),
		listen: cfg.Listen,
		start:  cfg.Now(),
		modes:  map[string]bool{},
		syncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "sync_duration_seconds",
			Help:    "How long a sync took, by kind: full (every Service, repaired against a kernel dump) or partial (changed Services only).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 17), // 0.5ms .. ~33s
		}, []string{"kind"}),
		lastSuccessfulSync: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "last_successful_sync_timestamp_seconds",
			Help: "Unix time of the end of the last sync that applied everything.",
		}),
		pendingChanges: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "pending_changes",
			Help: "Services with changes queued for the next sync.",
		}),
		programming: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "network_programming_duration_seconds",
			Help: "Time from an EndpointSlice change (its " + AnnotationLastChangeTriggerTime +
				" annotation) until the change was programmed into the kernel.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 3, 4, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200, 3600},
		}),
		netlinkWrites: newCounterVec("netlink_writes_total",
			"Kernel write calls made, by subsystem (ipvs, address, ipset, iptables) and operation.",
			"subsystem", "operation"),
		kernelErrors:   newCounterVec("kernel_errors_total", "Kernel calls that failed, by subsystem.", "subsystem"),
		virtualServers: newStateGauge("virtual_servers", "IPVS virtual servers in the desired state."),
		realServers:    newStateGauge("real_servers", "IPVS real servers in the desired state, summed over virtual servers."),
		vips:           newStateGauge("vips", "Service addresses bound to the dummy interface in the desired state."),
		ipsetEntries:   newStateGauge("ipset_entries", "ipset entries in the desired state, summed over sets."),
		proxyMode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "proxy_mode",
			Help: "1 for the proxy mode in use (ipvs, or the iptables fallback), 0 for the others.",
		}, []string{"mode"}),
		invalidAnnotations: newCounterVec("invalid_annotations_total",
			"Service annotations that were rejected and replaced by a default, by reason.", "reason"),
	}
	m.reg.MustRegister(m.syncDuration, m.lastSuccessfulSync, m.pendingChanges, m.programming,
		m.netlinkWrites, m.kernelErrors, m.virtualServers, m.realServers, m.vips, m.ipsetEntries,
		m.proxyMode, m.invalidAnnotations)
	m.repair = newRepairMetrics(m.reg)
	m.compat = newCompat(m.reg)
	if cfg.runtimeMetrics {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	// Known label values start at zero, so rates and alerts work before the first event.
	for _, k := range []string{KindFull, KindPartial} {
		m.syncDuration.WithLabelValues(k)
	}
	for _, s := range subsystems {
		m.kernelErrors.WithLabelValues(s)
		for _, op := range operations {
			m.netlinkWrites.WithLabelValues(s, op)
		}
	}
	for _, mode := range []string{ModeIPVS, ModeIPTables} {
		m.modes[mode] = true
		m.proxyMode.WithLabelValues(mode).Set(0)
	}
	return m
}

// serveProxyMode answers the active mode as plain text, as kube-proxy does ("ipvs", or
// "iptables" after a fallback); 503 until the mode is decided.
func (m *Metrics) serveProxyMode(w http.ResponseWriter, _ *http.Request) {
	m.modeMu.Lock()
	mode := m.mode
	m.modeMu.Unlock()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if mode == "" {
		http.Error(w, "the proxy mode is not decided yet", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte(mode))
}

func newStateGauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help})
}

// newCounterVec returns a counter kube_ipvs_<name> with those label names.
func newCounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
}

// Registry is the private registry; register more collectors on it if needed.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// SyncDone records one sync: its duration, and when it succeeded its end time as the last
// successful sync. Call it after every sync, failed or not.
func (m *Metrics) SyncDone(full bool, took time.Duration, succeeded bool, end time.Time) {
	kind := KindPartial
	if full {
		kind = KindFull
	}
	m.syncDuration.WithLabelValues(kind).Observe(took.Seconds())
	if succeeded {
		m.lastSuccessfulSync.Set(float64(end.Unix()) + float64(end.Nanosecond())/1e9)
	}
}

// SetPendingChanges sets the number of Services queued for the next sync.
func (m *Metrics) SetPendingChanges(n int) { m.pendingChanges.Set(float64(n)) }

// ObserveProgramming records the network programming latency of one applied EndpointSlice
// change: now minus trigger, the slice's AnnotationLastChangeTriggerTime value (RFC 3339),
// in kube_ipvs_network_programming_duration_seconds and, under the slice's family (IPv4 or
// IPv6), in kube-proxy's kubeproxy_network_programming_duration_seconds.
// An absent or unparsable value, or one from before New (a slice that merely existed when
// the proxy started), records nothing; it reports whether a value was recorded. A trigger
// time slightly in the future (clock skew) counts as 0.
func (m *Metrics) ObserveProgramming(trigger, family string, now time.Time) bool {
	if trigger == "" {
		return false
	}
	t, err := time.Parse(time.RFC3339, trigger)
	if err != nil || t.Before(m.start) {
		return false
	}
	d := max(now.Sub(t).Seconds(), 0)
	m.programming.Observe(d)
	m.compat.programming.WithLabelValues(family).Observe(d)
	return true
}

// AddNetlinkWrites counts n kernel writes of one subsystem and operation (see the Subsystem
// and Op constants); n <= 0 is ignored.
func (m *Metrics) AddNetlinkWrites(subsystem, operation string, n int) {
	if n > 0 {
		m.netlinkWrites.WithLabelValues(subsystem, operation).Add(float64(n))
	}
}

// AddKernelErrors counts n failed kernel calls of one subsystem; n <= 0 is ignored.
func (m *Metrics) AddKernelErrors(subsystem string, n int) {
	if n > 0 {
		m.kernelErrors.WithLabelValues(subsystem).Add(float64(n))
	}
}

// DesiredState is the size of the desired state after a sync.
type DesiredState struct {
	VirtualServers int
	RealServers    int // summed over virtual servers
	VIPs           int // addresses bound to the dummy interface
	IPSetEntries   int // summed over sets; 0 when ipsets are not in use
}

// SetDesiredState sets the desired-state gauges; call it after every sync.
func (m *Metrics) SetDesiredState(d DesiredState) {
	m.virtualServers.Set(float64(d.VirtualServers))
	m.realServers.Set(float64(d.RealServers))
	m.vips.Set(float64(d.VIPs))
	m.ipsetEntries.Set(float64(d.IPSetEntries))
}

// SetProxyMode marks mode (ModeIPVS or ModeIPTables) as the active one: 1 for it, 0 for
// every other mode.
func (m *Metrics) SetProxyMode(mode string) {
	m.modeMu.Lock()
	defer m.modeMu.Unlock()
	m.mode = mode
	m.modes[mode] = true
	for k := range m.modes {
		v := 0.0
		if k == mode {
			v = 1
		}
		m.proxyMode.WithLabelValues(k).Set(v)
	}
}

// InvalidAnnotation counts one rejected annotation; reason is the Event reason, e.g.
// InvalidScheduler (a small fixed set, never user input).
func (m *Metrics) InvalidAnnotation(reason string) {
	m.invalidAnnotations.WithLabelValues(reason).Inc()
}

// EnableServiceStats registers the per-Service IPVS counters, read at scrape time from
// source through lookup (see NewServiceStatsCollector). It can be called once.
func (m *Metrics) EnableServiceStats(source StatsSource, lookup ServiceLookup, limits StatsLimits) error {
	m.statsMu.Lock()
	defer m.statsMu.Unlock()
	if m.stats != nil {
		return errors.New("service stats are already enabled")
	}
	c := NewServiceStatsCollector(source, lookup, limits)
	if err := m.reg.Register(c); err != nil {
		return err
	}
	m.stats = c
	return nil
}

// Handler serves the registry in the Prometheus text (or negotiated) format. A collector
// that fails does not fail the scrape: the other metrics are still served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      m.reg,
	})
}

// Serve serves Handler at /metrics on addr (e.g. DefaultAddress) until ctx ends, then shuts
// down gracefully and returns nil. It returns at once if addr cannot be bound. Like
// kube-proxy's metrics server it also answers /proxyMode (the active mode, what
// `curl localhost:10249/proxyMode` shows and Kubernetes' e2e "should check kube-proxy urls"
// asks for) and /healthz ("ok" while the server runs; the proxy's own health is on the
// health port).
func (m *Metrics) Serve(ctx context.Context, addr string) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.HandleFunc("/proxyMode", m.serveProxyMode)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write([]byte("ok"))
	})
	return httpserve.Serve(ctx, m.listen, addr, &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       60 * time.Second,
	})
}
