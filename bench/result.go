package bench

import (
	"math"
	"slices"
	"sort"
)

// Kinds of single change the bench measures.
const (
	// KindEndpointAdd: one ready endpoint added to a one-port ClusterIP Service's slice.
	KindEndpointAdd = "endpoint-add"
	// KindEndpointRemove: that endpoint removed again; latency until its real server is at
	// weight 0 (draining), writes including the drain's final delete.
	KindEndpointRemove = "endpoint-remove"
	// KindNoop: a Service annotation no one reads changes: one Service is recomputed and
	// nothing must be written.
	KindNoop = "noop-sync"
	// KindServiceAdd: a new one-port ClusterIP Service, then its EndpointSlice.
	KindServiceAdd = "service-add"
	// KindServiceDelete: that Service deleted, then its EndpointSlice.
	KindServiceDelete = "service-delete"
	// KindFullResync: the Node object changes, which makes the controller recompute every
	// Service and repair the kernel against a dump (what --sync-period does); nothing must
	// be written.
	KindFullResync = "full-resync"
)

// Kinds lists the single-change kinds in report order.
var Kinds = []string{KindEndpointAdd, KindEndpointRemove, KindNoop, KindServiceAdd, KindServiceDelete, KindFullResync}

// Subsystems are the write counters, as the controller's metrics label them.
var Subsystems = []string{"ipvs", "address", "ipset", "iptables"}

// Sample is one measurement.
type Sample struct {
	// Seconds is the latency: from the clientset call to the kernel showing the change
	// (polled through a separate IPVS netlink handle), or for a no-op and a full resync,
	// to the end of the controller's sync.
	Seconds float64 `json:"seconds"`
	// APISeconds is the part of Seconds spent inside the fake clientset's calls (its field
	// manager is slow; a real API server's latency would take its place).
	APISeconds float64 `json:"api_seconds,omitempty"`
	// Writes are the kernel writes the change caused, by subsystem (netlink requests; for
	// iptables, iptables-restore runs), from the controller's netlink_writes_total.
	Writes map[string]int `json:"writes"`
	// SyncSeconds is the controller's own duration of the sync(s) involved.
	SyncSeconds float64 `json:"sync_seconds,omitempty"`
	// PhaseSeconds is where a full resync's time went (build, firewall, addresses, ipvs).
	PhaseSeconds map[string]float64 `json:"phase_seconds,omitempty"`
}

// TotalWrites sums the writes over subsystems.
func (s Sample) TotalWrites() int {
	n := 0
	for _, w := range s.Writes {
		n += w
	}
	return n
}

// KernelCounts is what the kernel held after the cold start, read back.
type KernelCounts struct {
	VirtualServers, RealServers, Addresses int
	SetEntries                             map[string]int
	// LoopBackMaxElem is the maxelem the hairpin set was created with (kube-proxy's sets are
	// fixed at 65,536).
	LoopBackMaxElem int
}

// Result is the bench's outcome at one N.
type Result struct {
	N           int    `json:"n"`
	Kernel      string `json:"kernel"`
	CPUs        int    `json:"cpus"`
	MemTotalMiB int    `json:"mem_total_mib"`
	GoVersion   string `json:"go_version"`
	// GoMemLimitBytes is the Go runtime's soft memory limit (GOMEMLIMIT), 0 if none.
	GoMemLimitBytes int64    `json:"go_memory_limit_bytes,omitempty"`
	Expected        Expected `json:"expected"`
	// Found is the kernel state after the cold start.
	Found           KernelCounts `json:"found"`
	PopulateSeconds float64      `json:"populate_seconds"`
	// ColdStart runs from controller start (informers listing everything) to the kernel
	// holding everything: every virtual server with its real servers seen through a
	// separate socket, and the first full sync ended (addresses, sets, rules); writes are
	// that sync's.
	ColdStart Sample `json:"cold_start"`
	// ColdStartCPU is the guest's CPU time during the cold start by kind (user, system,
	// softirq, idle, ...), in seconds summed over CPUs.
	ColdStartCPU map[string]float64 `json:"cold_start_cpu"`
	// Changes are the single-change samples by kind.
	Changes map[string][]Sample `json:"changes"`
	// Memory: the process's peak resident set (VmHWM), the live Go heap after populating
	// the fake clientset (the stand-in API server's store) and after the cold start, and
	// the largest heap in use seen (sampled).
	PeakRSSBytes     uint64   `json:"peak_rss_bytes"`
	HeapAPIBytes     uint64   `json:"heap_api_bytes"`
	HeapLiveBytes    uint64   `json:"heap_live_bytes"`
	HeapPeakBytes    uint64   `json:"heap_peak_bytes"`
	KernelSlabBytes  uint64   `json:"kernel_slab_bytes"`
	Errors           []string `json:"errors,omitempty"`
	MinSyncPeriodSec float64  `json:"min_sync_period_seconds"`
	// Binding is the run's --vip-binding ("" in results from before it: address), and
	// RepairStep its --repair-step.
	Binding    string `json:"binding,omitempty"`
	RepairStep int    `json:"repair_step,omitempty"`
	// RateEstimation is the run's --ipvs-rate-estimation ("" in results from before it, and
	// for kernel: the kernel's own, on).
	RateEstimation string `json:"rate_estimation,omitempty"`
	// ForegroundGate is "off" when the run had no foreground gate ("" or "on": it had one).
	ForegroundGate string `json:"foreground_gate,omitempty"`
	// Restart is a new controller started onto the state a cleanly stopped one left, with
	// its handover (--handover-file), as an upgraded Pod: Seconds until its first sync ended
	// (ready), the writes of that sync. RestartNoHandover is the same without one, as after
	// a crash: every virtual server read back.
	Restart           *Sample `json:"restart,omitempty"`
	RestartNoHandover *Sample `json:"restart_no_handover,omitempty"`
	// Churn is the stream of endpoint changes run on the restarted controller.
	Churn *Churn `json:"churn,omitempty"`
	// PeakRSSEndBytes is VmHWM at the end of the run (PeakRSSBytes is taken before the
	// restart, whose second controller shares the process for a while).
	PeakRSSEndBytes uint64 `json:"peak_rss_end_bytes,omitempty"`
}

// BindingOf is r's VIP binding, address for results from before the field.
func (r *Result) BindingOf() string {
	if r.Binding == "" {
		return "address"
	}
	return r.Binding
}

// GateOf is r's foreground gate setting, on for results from before the field.
func (r *Result) GateOf() string {
	if r.ForegroundGate == "" {
		return "on"
	}
	return r.ForegroundGate
}

func gateOf(off bool) string {
	if off {
		return "off"
	}
	return "on"
}

// Summary is the median and spread of a series.
type Summary struct {
	N                int
	Median, Min, Max float64
}

// Summarize returns the median, minimum and maximum of xs.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Summary{N: len(s), Median: m, Min: s[0], Max: s[len(s)-1]}
}

// Latencies returns the latencies of a kind, in seconds.
func (r *Result) Latencies(kind string) []float64 {
	var out []float64
	for _, s := range r.Changes[kind] {
		out = append(out, s.Seconds)
	}
	return out
}

// Writes returns the total writes of each sample of a kind.
func (r *Result) Writes(kind string) []float64 {
	var out []float64
	for _, s := range r.Changes[kind] {
		out = append(out, float64(s.TotalWrites()))
	}
	return out
}

// WritesBy returns the writes of one subsystem of each sample of a kind.
func (r *Result) WritesBy(kind, subsystem string) []float64 {
	var out []float64
	for _, s := range r.Changes[kind] {
		out = append(out, float64(s.Writes[subsystem]))
	}
	return out
}

// ResultPrefix starts the line that carries one Result as JSON on the guest's console.
const ResultPrefix = "KIPVS-BENCH-RESULT "

// ProfilePrefix starts the line that carries a CPU profile (base64) on the guest's console.
const ProfilePrefix = "KIPVS-BENCH-PPROF "

// HeapProfilePrefix starts the line that carries a heap profile (base64) on the console.
const HeapProfilePrefix = "KIPVS-BENCH-HEAP "

// TracePrefix starts the line that carries an execution trace of a slow change (the
// change's start in seconds since the churn began, its latency in ms, then base64).
const TracePrefix = "KIPVS-BENCH-TRACE "

func sortFloats(s []float64) { sort.Float64s(s) }
