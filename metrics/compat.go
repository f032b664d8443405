package metrics

import (
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The metrics in this file carry kube-proxy v1.37's names, types, labels and buckets
// (k8s.io/kubernetes pkg/proxy/metrics, the ones its IPVS mode registers), each with the
// meaning kube-proxy gives it, so that dashboards, alerts and scale tests written for
// kube-proxy (the kube-prometheus mixin, ClusterLoader2's network programming SLI) keep
// working after the switch. docs/metrics.md lists them beside kube-ipvs's own.

// CompatSubsystem is kube-proxy's metric prefix (its metrics subsystem).
const CompatSubsystem = "kubeproxy"

// IP families: the ip_family label values, kube-proxy's (v1.IPFamily).
const (
	IPv4 = "IPv4"
	IPv6 = "IPv6"
)

// Traffic policies: the traffic_policy label values of
// kubeproxy_sync_proxy_rules_no_local_endpoints_total.
const (
	PolicyInternal = "internal"
	PolicyExternal = "external"
)

// Change kinds for QueuedChange.
const (
	ChangeService  = "service"
	ChangeEndpoint = "endpoint"
	ChangeOther    = "other" // a Node or ServiceCIDR change: queues a sync, counts no change
)

// SyncBuckets are kubeproxy_sync_proxy_rules_duration_seconds's: 1 ms doubling to 16.384 s.
var SyncBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

// ProgrammingBuckets are kubeproxy_network_programming_duration_seconds's: 0, 0.25 s, 0.5 s,
// every second to 59 s, every 5 s to 115 s, every 30 s to 5 min (kube-proxy merges its
// linear ranges after a leading 0).
var ProgrammingBuckets = func() []float64 {
	b := []float64{0}
	b = append(b, prometheus.LinearBuckets(0.25, 0.25, 2)...)
	b = append(b, prometheus.LinearBuckets(1, 1, 59)...)
	b = append(b, prometheus.LinearBuckets(60, 5, 12)...)
	return append(b, prometheus.LinearBuckets(120, 30, 7)...)
}()

// compat holds the kube-proxy-named metrics.
type compat struct {
	syncDuration *prometheus.HistogramVec // ip_family
	lastSync     *prometheus.GaugeVec     // ip_family
	lastQueued   *prometheus.GaugeVec     // ip_family
	programming  *prometheus.HistogramVec // ip_family
	epPending    prometheus.Gauge
	epTotal      prometheus.Counter
	svcPending   prometheus.Gauge
	svcTotal     prometheus.Counter
	noLocal      *prometheus.GaugeVec // traffic_policy, ip_family
	healthz      *prometheus.CounterVec
	livez        *prometheus.CounterVec

	mu       sync.Mutex
	families []string // the families this proxy serves (SetIPFamilies); IPv4 until told
}

func newCompat(reg prometheus.Registerer) *compat {
	c := &compat{
		syncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: CompatSubsystem, Name: "sync_proxy_rules_duration_seconds",
			Help:    "SyncProxyRules latency in seconds",
			Buckets: SyncBuckets,
		}, []string{"ip_family"}),
		lastSync: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: CompatSubsystem, Name: "sync_proxy_rules_last_timestamp_seconds",
			Help: "The last time proxy rules were successfully synced",
		}, []string{"ip_family"}),
		lastQueued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: CompatSubsystem, Name: "sync_proxy_rules_last_queued_timestamp_seconds",
			Help: "The last time a sync of proxy rules was queued",
		}, []string{"ip_family"}),
		programming: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: CompatSubsystem, Name: "network_programming_duration_seconds",
			Help:    "In Cluster Network Programming Latency in seconds",
			Buckets: ProgrammingBuckets,
		}, []string{"ip_family"}),
		epPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: CompatSubsystem, Name: "sync_proxy_rules_endpoint_changes_pending",
			Help: "Pending proxy rules Endpoint changes",
		}),
		epTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: CompatSubsystem, Name: "sync_proxy_rules_endpoint_changes_total",
			Help: "Cumulative proxy rules Endpoint changes",
		}),
		svcPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: CompatSubsystem, Name: "sync_proxy_rules_service_changes_pending",
			Help: "Pending proxy rules Service changes",
		}),
		svcTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: CompatSubsystem, Name: "sync_proxy_rules_service_changes_total",
			Help: "Cumulative proxy rules Service changes",
		}),
		// A gauge despite its name, as in kube-proxy: recounted at every sync.
		noLocal: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: CompatSubsystem, Name: "sync_proxy_rules_no_local_endpoints_total",
			Help: "Number of services with a Local traffic policy and no endpoints",
		}, []string{"traffic_policy", "ip_family"}),
		healthz: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: CompatSubsystem, Name: "proxy_healthz_total",
			Help: "Cumulative proxy healthz HTTP status",
		}, []string{"code"}),
		livez: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: CompatSubsystem, Name: "proxy_livez_total",
			Help: "Cumulative proxy livez HTTP status",
		}, []string{"code"}),
	}
	reg.MustRegister(c.syncDuration, c.lastSync, c.lastQueued, c.programming, c.epPending, c.epTotal,
		c.svcPending, c.svcTotal, c.noLocal, c.healthz, c.livez)
	c.setFamilies([]string{IPv4})
	return c
}

// setFamilies makes families the ones the per-family metrics are recorded under, and
// creates their series, so that a dashboard finds them before the first sync or change.
func (c *compat) setFamilies(families []string) {
	c.mu.Lock()
	old := c.families
	c.families = append([]string(nil), families...)
	c.mu.Unlock()
	for _, f := range old {
		if !slices.Contains(families, f) { // no longer served: its series would stand still
			c.syncDuration.DeleteLabelValues(f)
			c.lastSync.DeleteLabelValues(f)
			c.lastQueued.DeleteLabelValues(f)
			c.programming.DeleteLabelValues(f)
			c.noLocal.DeleteLabelValues(PolicyInternal, f)
			c.noLocal.DeleteLabelValues(PolicyExternal, f)
		}
	}
	for _, f := range families {
		c.syncDuration.WithLabelValues(f)
		c.lastSync.WithLabelValues(f)
		c.lastQueued.WithLabelValues(f)
		c.programming.WithLabelValues(f)
		c.noLocal.WithLabelValues(PolicyInternal, f)
		c.noLocal.WithLabelValues(PolicyExternal, f)
	}
}

func (c *compat) familyList() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.families
}

// SetIPFamilies says which IP families this proxy serves (IPv4, IPv6, or both on a
// dual-stack node; IPv4 until called). kube-proxy runs one proxier per family, each
// recording its syncs under its own ip_family; kube-ipvs syncs both families at once, so a
// sync is recorded under each family it serves, as the proxiers of a dual-stack
// kube-proxy would each record theirs.
func (m *Metrics) SetIPFamilies(families []string) {
	if len(families) == 0 {
		families = []string{IPv4}
	}
	m.compat.setFamilies(families)
}

// unixSeconds is t as a Unix time in seconds with its fraction, as SetToCurrentTime sets.
func unixSeconds(t time.Time) float64 {
	return float64(t.UnixNano()) / 1e9
}

// KubeProxySyncDone records one sync under every family served: its duration always
// (kube-proxy observes every attempt), and its end as the last successful sync when applied:
// no step failed as a whole. Single virtual servers whose writes failed and are retried do
// not make a sync unsuccessful, as kube-proxy's IPVS mode logs such failures and goes on.
func (m *Metrics) KubeProxySyncDone(took time.Duration, applied bool, end time.Time) {
	for _, f := range m.compat.familyList() {
		m.compat.syncDuration.WithLabelValues(f).Observe(took.Seconds())
		if applied {
			m.compat.lastSync.WithLabelValues(f).Set(unixSeconds(end))
		}
	}
}

// QueuedChange records one change that queues a sync at now: a Service's (ChangeService),
// an EndpointSlice's (ChangeEndpoint, every add, update and delete, as kube-proxy counts
// them) or another object's (ChangeOther). Every kind sets the last queued timestamp.
func (m *Metrics) QueuedChange(kind string, now time.Time) {
	switch kind {
	case ChangeService:
		m.compat.svcTotal.Inc()
	case ChangeEndpoint:
		m.compat.epTotal.Inc()
	}
	for _, f := range m.compat.familyList() {
		m.compat.lastQueued.WithLabelValues(f).Set(unixSeconds(now))
	}
}

// SetChangesPending sets the changes not yet taken by a sync: services is the number of
// Services with a change of their own, endpoints the number of EndpointSlice changes.
func (m *Metrics) SetChangesPending(services, endpoints int) {
	m.compat.svcPending.Set(float64(services))
	m.compat.epPending.Set(float64(endpoints))
}

// NoLocalEndpoints counts, for one family, the Services with a Local traffic policy that
// have endpoints in the cluster but none on this node: Internal for internalTrafficPolicy
// (their ClusterIPs), External for externalTrafficPolicy (their node ports, external and
// load-balancer addresses). A Service is counted once per policy, whatever its ports.
type NoLocalEndpoints struct {
	Internal, External int
}

// SetNoLocalEndpoints sets kubeproxy_sync_proxy_rules_no_local_endpoints_total for the
// families served: byFamily[0] is IPv4, [1] IPv6.
func (m *Metrics) SetNoLocalEndpoints(byFamily [2]NoLocalEndpoints) {
	for _, f := range m.compat.familyList() {
		n := byFamily[0]
		if f == IPv6 {
			n = byFamily[1]
		}
		m.compat.noLocal.WithLabelValues(PolicyInternal, f).Set(float64(n.Internal))
		m.compat.noLocal.WithLabelValues(PolicyExternal, f).Set(float64(n.External))
	}
}

// ProxyHealthServed counts one answer of the proxy's health server: /livez when livez,
// /healthz otherwise, by HTTP status code (200 or 503).
func (m *Metrics) ProxyHealthServed(livez bool, code int) {
	v := m.compat.healthz
	if livez {
		v = m.compat.livez
	}
	v.WithLabelValues(strconv.Itoa(code)).Inc()
}
