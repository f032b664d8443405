package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// syncMetric is the histogram both proxies export for a sync of their rules (kube-ipvs under
// kube-proxy's name: docs/metrics.md).
const syncMetric = "kubeproxy_sync_proxy_rules_duration_seconds"

// syncTimes reads the proxy's sync-duration histogram through the API server's node proxy
// and reports how many syncs ran and how long they took: the figure that explains how fast
// a proxy follows the cluster on this node (checked at the end, after every change the
// checks made). With CLUSTER_TRACE set, the end of the proxy's log is printed too.
func (c *checker) syncTimes(ctx context.Context) (string, error) {
	b, err := c.cs.CoreV1().RESTClient().Get().
		AbsPath(fmt.Sprintf("/api/v1/nodes/%s:%d/proxy/metrics", c.h.nodes[0].name, 10249)).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("/metrics: %w", err)
	}
	if os.Getenv("CLUSTER_TRACE") != "" {
		p := c.h.proxy
		log, _, err := c.h.kubectl(ctx, "-n", "kube-system", "logs", "ds/"+p, "-c", p, "--tail=60")
		logf("%s log, last 60 lines (%v):\n%s", p, err, log)
	}
	h, err := parseHistogram(string(b), syncMetric)
	if err != nil {
		var seen []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "kubeproxy_sync") && len(seen) < 12 {
				seen = append(seen, l)
			}
		}
		return "", fmt.Errorf("%w; its kubeproxy_sync lines: %q", err, seen)
	}
	return fmt.Sprintf("%s: %d syncs, mean %.3f s, median <= %s s, p99 <= %s s, slowest <= %s s; %s",
		syncMetric, h.count, h.sum/float64(h.count), h.quantile(0.5), h.quantile(0.99), h.quantile(1),
		c.processCost(ctx)), nil
}

// processCost measures what one process costs the node: the agent's round trip running
// `ipset list -n` (a process, as kube-proxy runs ipset and iptables-restore on every sync)
// against its round trip reading /proc (none), the median of five each.
func (c *checker) processCost(ctx context.Context) string {
	median := func(f func() error) (time.Duration, error) {
		var ds []time.Duration
		for range 5 {
			t := time.Now()
			if err := f(); err != nil {
				return 0, err
			}
			ds = append(ds, time.Since(t))
		}
		slices.Sort(ds)
		return ds[2], nil
	}
	run, err1 := median(func() error {
		_, err := c.h.onNode(ctx, c.h.nodes[0].ip, 10*time.Second, "ipset", "list", "-n")
		return err
	})
	read, err2 := median(func() error { _, err := c.h.ipvsOnNode(ctx, c.h.nodes[0].ip); return err })
	if err := errors.Join(err1, err2); err != nil {
		return "process cost not measured: " + err.Error()
	}
	return fmt.Sprintf("the node agent answers in %s reading /proc and in %s running ipset list -n (medians of 5)",
		read.Round(time.Millisecond), run.Round(time.Millisecond))
}

// histogram is a Prometheus histogram read from the text format: cumulative buckets.
type histogram struct {
	les   []float64 // upper bounds, ascending (+Inf last)
	cum   []uint64
	sum   float64
	count uint64
}

// parseHistogram reads name's buckets, sum and count from a /metrics text, summed over its
// series (kube-proxy labels them by IP family).
func parseHistogram(text, name string) (histogram, error) {
	var h histogram
	byLE := map[float64]uint64{}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		metric, labels, _ := strings.Cut(f[0], "{")
		switch metric {
		case name + "_bucket":
			_, le, ok := strings.Cut(labels, `le="`)
			if !ok {
				continue
			}
			le, _, _ = strings.Cut(le, `"`)
			bound := math.Inf(1)
			if le != "+Inf" {
				if bound, err = strconv.ParseFloat(le, 64); err != nil {
					continue
				}
			}
			byLE[bound] += uint64(v)
		case name + "_sum":
			h.sum += v
		case name + "_count":
			h.count += uint64(v)
		}
	}
	if h.count == 0 || len(byLE) == 0 {
		return h, fmt.Errorf("/metrics has no %s samples", name)
	}
	for le := range byLE {
		h.les = append(h.les, le)
	}
	sort.Float64s(h.les)
	for _, le := range h.les {
		h.cum = append(h.cum, byLE[le])
	}
	return h, nil
}

// quantile is the upper bound of the bucket holding the q-th sync ("+Inf" past the last).
func (h histogram) quantile(q float64) string {
	rank := uint64(math.Ceil(q * float64(h.count)))
	for i, c := range h.cum {
		if c >= rank {
			if math.IsInf(h.les[i], 1) {
				return "+Inf"
			}
			return strconv.FormatFloat(h.les[i], 'g', -1, 64)
		}
	}
	return "+Inf"
}
