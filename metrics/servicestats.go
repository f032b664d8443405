package metrics

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// VSStats are the kernel's cumulative counters of one IPVS virtual server.
type VSStats struct {
	Key                   model.VSKey
	Connections           uint64
	PacketsIn, PacketsOut uint64
	BytesIn, BytesOut     uint64
}

// StatsSource returns the counters of every virtual server, from a single IPVS dump. Keys
// must be unique.
type StatsSource func() ([]VSStats, error)

// ServiceLookup names the Service and the Service port a virtual server belongs to; ok is
// false for a virtual server that is not the proxy's own, which is then not exported. It is
// called once per virtual server per scrape and must be cheap (a map lookup).
type ServiceLookup func(model.VSKey) (svc model.ServiceName, portName string, ok bool)

// StatsLimits bound the cost of one scrape.
type StatsLimits struct {
	// Timeout is how long a scrape waits for the source (default DefaultStatsTimeout). A
	// source still running when the next scrape comes is waited for, never called twice.
	Timeout time.Duration
	// MaxVirtualServers caps the virtual servers exported per scrape (default
	// DefaultMaxVirtualServers); above it the lowest keys are kept.
	MaxVirtualServers int
}

// Defaults of StatsLimits.
const (
	DefaultStatsTimeout      = 5 * time.Second
	DefaultMaxVirtualServers = 50000
)

// Reasons: label values of service_stats_errors_total.
const (
	StatsErrorSource  = "source"  // the source returned an error (or panicked)
	StatsErrorTimeout = "timeout" // the source did not answer within Timeout
	StatsErrorLimit   = "limit"   // more than MaxVirtualServers: the rest were left out
)

var errStatsTimeout = errors.New("service stats source timed out")

// ServiceStatsCollector is a prometheus.Collector that exports per-Service IPVS counters
// (kube_ipvs_service_{connections,packets_in,packets_out,bytes_in,bytes_out}_total,
// labelled namespace, name, port, vip, protocol) from one StatsSource call per scrape. When
// the source fails or is too slow, the scrape goes on without them and
// kube_ipvs_service_stats_errors_total counts it.
type ServiceStatsCollector struct {
	source StatsSource
	lookup ServiceLookup
	limits StatsLimits

	conns, pktsIn, pktsOut, bytesIn, bytesOut *prometheus.Desc
	errors                                    *prometheus.CounterVec

	mu       sync.Mutex
	inflight *statsCall
}

type statsCall struct {
	done  chan struct{}
	stats []VSStats
	err   error
}

var statsLabels = []string{"namespace", "name", "port", "vip", "protocol"}

// NewServiceStatsCollector builds the collector; zero limits take the defaults. Register it
// on a registry (Metrics.EnableServiceStats does).
func NewServiceStatsCollector(source StatsSource, lookup ServiceLookup, limits StatsLimits) *ServiceStatsCollector {
	if limits.Timeout <= 0 {
		limits.Timeout = DefaultStatsTimeout
	}
	if limits.MaxVirtualServers <= 0 {
		limits.MaxVirtualServers = DefaultMaxVirtualServers
	}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, statsLabels, nil)
	}
	c := &ServiceStatsCollector{
		source:   source,
		lookup:   lookup,
		limits:   limits,
		conns:    desc("service_connections_total", "Connections a Service's IPVS virtual server has scheduled."),
		pktsIn:   desc("service_packets_in_total", "Packets from clients through a Service's IPVS virtual server."),
		pktsOut:  desc("service_packets_out_total", "Packets to clients through a Service's IPVS virtual server."),
		bytesIn:  desc("service_bytes_in_total", "Bytes from clients through a Service's IPVS virtual server."),
		bytesOut: desc("service_bytes_out_total", "Bytes to clients through a Service's IPVS virtual server."),
		errors: newCounterVec("service_stats_errors_total",
			"Scrapes whose per-Service IPVS counters were left out (source failed, timed out) or cut short (limit), by reason.",
			"reason"),
	}
	for _, r := range []string{StatsErrorSource, StatsErrorTimeout, StatsErrorLimit} {
		c.errors.WithLabelValues(r)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *ServiceStatsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.conns, c.pktsIn, c.pktsOut, c.bytesIn, c.bytesOut} {
		ch <- d
	}
	c.errors.Describe(ch)
}

type statsRow struct {
	s    *VSStats
	svc  model.ServiceName
	port string
}

// Collect implements prometheus.Collector: one source call, one lookup per virtual server.
func (c *ServiceStatsCollector) Collect(ch chan<- prometheus.Metric) {
	defer c.errors.Collect(ch)
	stats, err := c.fetch()
	if err != nil {
		reason := StatsErrorSource
		if errors.Is(err, errStatsTimeout) {
			reason = StatsErrorTimeout
		}
		c.errors.WithLabelValues(reason).Inc()
		return
	}
	rows := make([]statsRow, 0, len(stats))
	for i := range stats {
		svc, port, ok := c.lookup(stats[i].Key)
		if ok {
			rows = append(rows, statsRow{s: &stats[i], svc: svc, port: port})
		}
	}
	if len(rows) > c.limits.MaxVirtualServers {
		sort.Slice(rows, func(i, j int) bool { return model.VSKeyLess(rows[i].s.Key, rows[j].s.Key) })
		rows = rows[:c.limits.MaxVirtualServers]
		c.errors.WithLabelValues(StatsErrorLimit).Inc()
	}
	descs := [statsKinds]*prometheus.Desc{c.conns, c.pktsIn, c.pktsOut, c.bytesIn, c.bytesOut}
	for _, r := range rows {
		vm := newVSMetrics(descs, r)
		for i := range vm.metrics {
			ch <- &vm.metrics[i]
		}
	}
}

const statsKinds = 5

// Label names in the sorted order Prometheus wants label pairs in.
var (
	labelName      = "name"
	labelNamespace = "namespace"
	labelPort      = "port"
	labelProtocol  = "protocol"
	labelVIP       = "vip"
)

// vsMetrics holds the five counters of one virtual server in one allocation, sharing a
// single set of label pairs: prometheus.NewConstMetric would build and sort the pairs five
// times, which dominated a scrape of 10,000 virtual servers.
type vsMetrics struct {
	values   [5]string // name, namespace, port, protocol, vip
	pairs    [5]dto.LabelPair
	labels   [5]*dto.LabelPair
	counters [statsKinds]dto.Counter
	numbers  [statsKinds]float64
	metrics  [statsKinds]statsMetric
}

func newVSMetrics(descs [statsKinds]*prometheus.Desc, r statsRow) *vsMetrics {
	vm := &vsMetrics{}
	vip := netip.AddrPortFrom(r.s.Key.Addr, r.s.Key.Port).String()
	if r.s.Key.FWMark != 0 {
		vip = r.s.Key.String() // a firewall-mark virtual server has no address of its own
	}
	vm.values = [5]string{r.svc.Name, r.svc.Namespace, r.port, r.s.Key.Proto.String(), vip}
	names := [5]*string{&labelName, &labelNamespace, &labelPort, &labelProtocol, &labelVIP}
	for i := range vm.pairs {
		vm.pairs[i].Name = names[i]
		vm.pairs[i].Value = &vm.values[i]
		vm.labels[i] = &vm.pairs[i]
	}
	vm.numbers = [statsKinds]float64{float64(r.s.Connections), float64(r.s.PacketsIn), float64(r.s.PacketsOut),
		float64(r.s.BytesIn), float64(r.s.BytesOut)}
	for i := range vm.metrics {
		vm.counters[i].Value = &vm.numbers[i]
		vm.metrics[i] = statsMetric{desc: descs[i], labels: vm.labels[:], counter: &vm.counters[i]}
	}
	return vm
}

// statsMetric is one counter sample; it implements prometheus.Metric.
type statsMetric struct {
	desc    *prometheus.Desc
	labels  []*dto.LabelPair
	counter *dto.Counter
}

func (m *statsMetric) Desc() *prometheus.Desc { return m.desc }

func (m *statsMetric) Write(out *dto.Metric) error {
	out.Label = m.labels
	out.Counter = m.counter
	return nil
}

// fetch calls the source, or joins the call already running, and waits up to the timeout.
func (c *ServiceStatsCollector) fetch() ([]VSStats, error) {
	c.mu.Lock()
	call := c.inflight
	if call == nil {
		call = &statsCall{done: make(chan struct{})}
		c.inflight = call
		go c.run(call)
	}
	c.mu.Unlock()
	timer := time.NewTimer(c.limits.Timeout)
	defer timer.Stop()
	select {
	case <-call.done:
		return call.stats, call.err
	case <-timer.C:
		return nil, errStatsTimeout
	}
}

func (c *ServiceStatsCollector) run(call *statsCall) {
	defer func() {
		if p := recover(); p != nil {
			call.stats, call.err = nil, fmt.Errorf("service stats source panicked: %v", p)
		}
		c.mu.Lock()
		c.inflight = nil
		c.mu.Unlock()
		close(call.done)
	}()
	call.stats, call.err = c.source()
}
