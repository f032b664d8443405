package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// programmingMetric is the network programming latency histogram: from the change that
// triggered an EndpointSlice update (the endpointslice controller's
// endpoints.kubernetes.io/last-change-trigger-time) to the proxy's programming of it.
// kube-proxy exports it, and kube-ipvs under kube-proxy's name (docs/metrics.md).
const programmingMetric = "kubeproxy_network_programming_duration_seconds"

// since returns the observations h made after before: the same histogram of one process,
// scraped twice (ClusterLoader2 reads the SLI so, over the measured phase only). A
// restarted process, whose counters went down, cannot be subtracted.
func (h histogram) since(before histogram) (histogram, error) {
	if before.count == 0 && len(before.les) == 0 {
		return h, nil
	}
	if !slices.Equal(h.les, before.les) {
		return histogram{}, fmt.Errorf("the buckets changed between the scrapes: %v, then %v", before.les, h.les)
	}
	out := histogram{les: h.les, cum: make([]uint64, len(h.cum)), sum: h.sum - before.sum}
	for i := range h.cum {
		if h.cum[i] < before.cum[i] {
			return histogram{}, errors.New("a bucket went down between the scrapes: the proxy restarted")
		}
		out.cum[i] = h.cum[i] - before.cum[i]
	}
	if h.count < before.count {
		return histogram{}, errors.New("the count went down between the scrapes: the proxy restarted")
	}
	out.count = h.count - before.count
	return out, nil
}

// promQuantile is Prometheus' histogram_quantile(q, ...) of h, which ClusterLoader2's
// NetworkProgrammingLatency reads: the bucket that holds the q-th observation, and within
// it a linear interpolation between its bounds (the first bucket starting at 0). A rank in
// the +Inf bucket gives the largest finite bound; no observation gives NaN.
func (h histogram) promQuantile(q float64) float64 {
	n := len(h.cum)
	if n < 2 || h.cum[n-1] == 0 || !math.IsInf(h.les[n-1], 1) {
		return math.NaN()
	}
	rank := q * float64(h.cum[n-1])
	b := sort.Search(n-1, func(i int) bool { return float64(h.cum[i]) >= rank })
	if b == n-1 {
		return h.les[n-2]
	}
	if b == 0 && h.les[0] <= 0 {
		return h.les[0]
	}
	start, end := 0.0, h.les[b]
	count := float64(h.cum[b])
	if b > 0 {
		start = h.les[b-1]
		count -= float64(h.cum[b-1])
		rank -= float64(h.cum[b-1])
	}
	return start + (end-start)*(rank/count)
}

// parseHistogramOrEmpty is parseHistogram, but a histogram with no observation yet (a proxy
// that has programmed nothing) is an empty one, not an error.
func parseHistogramOrEmpty(text, name string) (histogram, error) {
	h, err := parseHistogram(text, name)
	if err != nil && h.count == 0 && strings.Contains(text, name+"_count") {
		return histogram{}, nil
	}
	return h, err
}

// plus adds the observations of o (another process's histogram of the same buckets).
func (h histogram) plus(o histogram) (histogram, error) {
	switch {
	case o.count == 0 && len(o.les) == 0:
		return h, nil
	case h.count == 0 && len(h.les) == 0:
		return o, nil
	case !slices.Equal(h.les, o.les):
		return histogram{}, fmt.Errorf("two proxies' buckets differ: %v and %v", h.les, o.les)
	}
	out := histogram{les: h.les, cum: make([]uint64, len(h.cum)), sum: h.sum + o.sum, count: h.count + o.count}
	for i := range h.cum {
		out.cum[i] = h.cum[i] + o.cum[i]
	}
	return out, nil
}
