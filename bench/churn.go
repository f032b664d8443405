package bench

import (
	"fmt"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-ipvs/kube-ipvs/metrics"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// ChurnOptions configure the stream of endpoint changes.
type ChurnOptions struct {
	// Rate is the changes per second (0: no churn).
	Rate float64
	// Cycles is how many whole periodic repair cycles the churn runs through.
	Cycles int
	// Max bounds the churn's length when the cycles take longer (the result says how many
	// ran).
	Max time.Duration
}

// Churn is what the stream of endpoint changes measured on the restarted controller, which
// runs with --sync-period's default: its repair cycles run while the changes arrive.
type Churn struct {
	Rate    float64 `json:"rate"`
	Seconds float64 `json:"seconds"`
	// Changes are the changes sent, each an endpoint added to or removed from a one-port
	// ClusterIP Service; Latencies (seconds, in the order sent) are those the kernel
	// showed, SentAt (seconds since the churn began) when each was sent.
	Changes   int       `json:"changes"`
	Latencies []float64 `json:"latencies"`
	SentAt    []float64 `json:"sent_at"`
	// Unseen counts changes the kernel had not shown when the run's timeout passed.
	Unseen int `json:"unseen,omitempty"`
	// Cycles are the repair cycles that ended during the churn.
	Cycles []Cycle `json:"cycles"`
	// Writes are all the kernel writes during the churn, by subsystem: the changes', the
	// drained real servers' deletes and the repair cycles' (which must be 0).
	Writes map[string]int `json:"writes"`
}

// Cycle is one repair cycle, from the controller's metrics.
type Cycle struct {
	// EndedAt is when the end was seen, in seconds since the churn began; Seconds its wall
	// time (it began at EndedAt-Seconds).
	EndedAt     float64 `json:"ended_at"`
	Seconds     float64 `json:"seconds"`
	LongestStep float64 `json:"longest_step"`
	// LongestOfKind is the longest step of each kind (metrics.StepKinds), in seconds.
	LongestOfKind map[string]float64 `json:"longest_of_kind,omitempty"`
	CoreShare     float64            `json:"core_share"`
}

// DuringCycles returns the latencies of the changes sent while a repair cycle ran, and of
// the others.
func (c *Churn) DuringCycles() (during, between []float64) {
	for i, l := range c.Latencies {
		in := false
		for _, cy := range c.Cycles {
			if c.SentAt[i] >= cy.EndedAt-cy.Seconds && c.SentAt[i] <= cy.EndedAt {
				in = true
				break
			}
		}
		if in {
			during = append(during, l)
		} else {
			between = append(between, l)
		}
	}
	return during, between
}

// pendingChange is a change sent and not yet seen in the kernel.
type pendingChange struct {
	index int
	key   model.VSKey
	rs    model.RSKey
	add   bool
	sent  time.Time
}

// processStart is about when the process began (package initialisation).
var processStart = time.Now()

// churn sends endpoint changes at the configured rate until the configured number of repair
// cycles ended (or Max passed), and measures each from the API write to the kernel.
func (r *runner) churn() error {
	o := r.o.Churn
	if o.Cycles <= 0 {
		o.Cycles = 2
	}
	if o.Max <= 0 {
		o.Max = 30 * time.Minute
	}
	c := &Churn{Rate: o.Rate, Writes: map[string]int{}}
	r.res.Churn = c
	r.quiet()
	before := r.writes()
	slices := r.client.DiscoveryV1().EndpointSlices(Namespace)
	// The Services changed: one-port ClusterIP ones (i%10 == 2), visited in a spread order;
	// each change adds the Service's extra endpoint, or removes it if the last one added it.
	svcs := max(r.o.N/10, 1)
	stride := coprimeStride(svcs)
	has := map[int]bool{}

	var mu sync.Mutex
	var pending []pendingChange
	stop := make(chan struct{})
	watched := make(chan struct{})
	start := time.Now()
	// The process's age, so that GODEBUG=gctrace=1's lines (stamped with it) can be set
	// beside the changes' SentAt.
	r.log("churn: starts %.3fs into the process, %.1f changes a second", time.Since(processStart).Seconds(), o.Rate)
	rec := r.startSlowRecorder()
	defer rec.stop()
	if w := r.o.ChurnHeapProfiles; w[0] != nil && w[1] != nil {
		_ = pprof.Lookup("heap").WriteTo(w[0], 0)
		defer func() { _ = pprof.Lookup("heap").WriteTo(w[1], 0) }()
	}
	go func() {
		defer close(watched)
		var deadline time.Time // set once the sending stopped
		for {
			mu.Lock()
			ps := append([]pendingChange(nil), pending...)
			mu.Unlock()
			for _, p := range ps {
				reals, err := r.probe.reals(p.key)
				if err != nil {
					continue
				}
				w, ok := reals[p.rs]
				if (p.add && ok && w == 1) || (!p.add && (!ok || w == 0)) {
					took := time.Since(p.sent).Seconds()
					mu.Lock()
					c.Latencies[p.index] = took
					sentAt := c.SentAt[p.index]
					for k := range pending {
						if pending[k].index == p.index {
							pending = append(pending[:k], pending[k+1:]...)
							break
						}
					}
					mu.Unlock()
					rec.seen(sentAt, time.Duration(took*float64(time.Second)))
				}
			}
			select {
			case <-stop:
				if deadline.IsZero() {
					deadline = time.Now().Add(r.o.Timeout)
				}
				mu.Lock()
				left := len(pending)
				mu.Unlock()
				if left == 0 || time.Now().After(deadline) {
					return
				}
			default:
			}
			time.Sleep(pollInterval)
		}
	}()

	interval := time.Duration(float64(time.Second) / o.Rate)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	lastCount, lastSum := r.cycleSums()
	var lastSlow uint64
	if rec != nil {
		lastSlow = r.slowSteps()
	}
	for n := 0; ; n++ {
		if rec != nil {
			if s := r.slowSteps(); s > lastSlow {
				rec.slowStep(time.Since(start).Seconds())
				lastSlow = s
			}
		}
		if cnt, sum := r.cycleSums(); cnt > lastCount {
			step, share := r.gauge("repair_step_max_duration_seconds"), r.gauge("repair_cycle_core_share")
			cy := Cycle{EndedAt: time.Since(start).Seconds(), Seconds: (sum - lastSum) / float64(cnt-lastCount), LongestStep: step, CoreShare: share,
				LongestOfKind: map[string]float64{}}
			var kinds []string
			for _, k := range metrics.StepKinds {
				cy.LongestOfKind[k] = r.gaugeOf("repair_step_kind_max_duration_seconds", "kind", k)
				kinds = append(kinds, fmt.Sprintf("%s %.1f ms", k, 1000*cy.LongestOfKind[k]))
			}
			c.Cycles = append(c.Cycles, cy)
			r.log("churn: repair cycle %d ended at %.0fs: %.2fs, longest step %.1f ms (%s), core share %.2f, %d changes so far",
				len(c.Cycles), cy.EndedAt, cy.Seconds, 1000*cy.LongestStep, strings.Join(kinds, ", "), cy.CoreShare, n)
			lastCount, lastSum = cnt, sum
		}
		if len(c.Cycles) >= o.Cycles || time.Since(start) > o.Max || r.ctx.Err() != nil {
			break
		}
		i := 10*((n*stride)%svcs) + 2
		if i >= r.o.N {
			i = 2
		}
		add := !has[i]
		eps := DefaultEndpoints()
		if add {
			eps = append(eps, EndpointsPerService)
		}
		mu.Lock()
		c.Latencies = append(c.Latencies, -1)
		c.SentAt = append(c.SentAt, time.Since(start).Seconds())
		p := pendingChange{index: len(c.Latencies) - 1, key: HTTPKey(i), rs: RealServer(i, EndpointsPerService), add: add, sent: time.Now()}
		pending = append(pending, p)
		mu.Unlock()
		if _, err := slices.Update(r.ctx, EndpointSlice(i, eps...), metav1.UpdateOptions{}); err != nil {
			close(stop)
			return fmt.Errorf("churn: change %d: %w", n, err)
		}
		has[i] = add
		c.Changes++
		<-tick.C
	}
	c.Seconds = time.Since(start).Seconds()
	close(stop)
	<-watched // every change seen, or the run's timeout passed (counted as unseen)
	mu.Lock()
	lat := make([]float64, 0, len(c.Latencies))
	sent := make([]float64, 0, len(c.SentAt))
	for k, l := range c.Latencies {
		if l < 0 {
			c.Unseen++
			continue
		}
		lat = append(lat, l)
		sent = append(sent, c.SentAt[k])
	}
	c.Latencies, c.SentAt = lat, sent
	mu.Unlock()
	r.settle()
	c.Writes = diff(r.writes(), before)
	p := Percentiles(c.Latencies)
	r.log("churn: %d changes in %.0fs through %d repair cycles: p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms, writes %v",
		c.Changes, c.Seconds, len(c.Cycles), 1000*p.P50, 1000*p.P90, 1000*p.P99, 1000*p.Max, c.Writes)
	if len(c.Cycles) < o.Cycles {
		r.fail("churn: only %d of %d repair cycles ended within %s", len(c.Cycles), o.Cycles, o.Max)
	}
	if c.Unseen > 0 {
		r.fail("churn: %d changes never reached the kernel", c.Unseen)
	}
	return nil
}

// coprimeStride is a stride near n/2.6 with no common factor with n, so that i*stride mod n
// visits every Service once per n changes, far from the one before.
func coprimeStride(n int) int {
	if n <= 2 {
		return 1
	}
	for s := max(n*10/26, 1); s > 1; s-- {
		if gcd(s, n) == 1 {
			return s
		}
	}
	return 1
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// cycleSums returns the count and the summed seconds of the repair cycles that ended.
func (r *runner) cycleSums() (int, float64) {
	n, sum := r.metrics.RepairCycles()
	return int(n), sum
}

// gauge reads a gauge of the controller's metrics (0 when absent).
func (r *runner) gauge(name string) float64 { return r.gaugeOf(name, "", "") }

// gaugeOf reads the gauge kube_ipvs_<name> whose label has value (label "": the first).
func (r *runner) gaugeOf(name, label, value string) float64 {
	fams, err := r.metrics.Registry().Gather()
	if err != nil {
		return 0
	}
	for _, f := range fams {
		if f.GetName() != metrics.Namespace+"_"+name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label == "" {
				return m.GetGauge().GetValue()
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// Pcts are latency percentiles.
type Pcts struct{ P50, P90, P99, Max float64 }

// Percentiles returns the nearest-rank percentiles of xs (NaN when empty).
func Percentiles(xs []float64) Pcts {
	if len(xs) == 0 {
		nan := Summarize(nil).Median
		return Pcts{nan, nan, nan, nan}
	}
	s := append([]float64(nil), xs...)
	sortFloats(s)
	rank := func(q float64) float64 {
		k := int(q*float64(len(s))+0.999999) - 1
		return s[min(max(k, 0), len(s)-1)]
	}
	return Pcts{P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: s[len(s)-1]}
}
