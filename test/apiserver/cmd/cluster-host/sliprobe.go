package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// triggerAnnotation is where the endpointslice controller records the change that triggered
// a slice's update: the time the proxy's histogram measures from.
const triggerAnnotation = "endpoints.kubernetes.io/last-change-trigger-time"

// sliProbe cross-checks the histogram on a sample of the churn's changes: for a Deployment
// scaled to one Pod more, the node's agent looks up the Service's virtual server by key
// several times a second and stamps when it holds the new number of real servers; that
// stamp, on the host's clock, less the slice's trigger time, is the change's latency as the
// kernel shows it.
type sliProbe struct {
	c    *checker
	cs   kubernetes.Interface
	node clusterNode
	sem  chan struct{} // bounds the probes in flight
	wg   sync.WaitGroup

	mu        sync.Mutex
	latencies []time.Duration
	failures  []string
}

func newSLIProbe(c *checker, cs kubernetes.Interface) *sliProbe {
	return &sliProbe{c: c, cs: cs, node: c.h.nodes[0], sem: make(chan struct{}, 16)}
}

// watch probes Service i of namespace ns after its Deployment was scaled to reals Pods; it
// does not wait (a probe in flight beyond the bound is skipped: the sample shrinks, the
// churn's pace does not).
func (p *sliProbe) watch(ctx context.Context, ns, name string, reals int) {
	select {
	case p.sem <- struct{}{}:
	default:
		return
	}
	p.wg.Add(1)
	go func() {
		defer func() { <-p.sem; p.wg.Done() }()
		d, err := p.one(ctx, ns, name, reals)
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil {
			p.failures = append(p.failures, fmt.Sprintf("%s/%s: %v", ns, name, err))
			return
		}
		p.latencies = append(p.latencies, d)
	}()
}

func (p *sliProbe) one(ctx context.Context, ns, name string, reals int) (time.Duration, error) {
	svc, err := p.cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	body, _ := json.Marshal(map[string]any{"timeout": "90s", "every": "200ms",
		"vs": []map[string]any{{"addr": svc.Spec.ClusterIP, "port": 80, "proto": "TCP", "reals": reals}}})
	var rep struct {
		Seen  []time.Time `json:"seen"`
		Error string      `json:"error"`
	}
	if err := p.c.h.agentJSON(ctx, p.node.ip, 90*time.Second, http.MethodPost, "/ipvs/watch", body, &rep); err != nil {
		return 0, err
	}
	if rep.Error != "" || len(rep.Seen) != 1 || rep.Seen[0].IsZero() {
		return 0, fmt.Errorf("not seen with %d real servers within 90 s (%s)", reals, rep.Error)
	}
	offset, err := p.clockOffset(ctx)
	if err != nil {
		return 0, err
	}
	trigger, err := p.trigger(ctx, ns, name, reals)
	if err != nil {
		return 0, err
	}
	return rep.Seen[0].Add(-offset).Sub(trigger), nil
}

// clockOffset is the node's clock less the host's: the agent's time against the middle of
// a round trip to it.
func (p *sliProbe) clockOffset(ctx context.Context) (time.Duration, error) {
	var rep agentReply
	t1 := time.Now()
	if err := p.c.h.agentJSON(ctx, p.node.ip, 10*time.Second, http.MethodGet, "/now", nil, &rep); err != nil {
		return 0, err
	}
	t2 := time.Now()
	return rep.End.Sub(t1.Add(t2.Sub(t1) / 2)), nil
}

// trigger reads the trigger time of the Service's slice once it holds reals ready endpoints.
func (p *sliProbe) trigger(ctx context.Context, ns, name string, reals int) (time.Time, error) {
	var found time.Time
	err := poll(ctx, time.Minute, time.Second, func() (bool, error) {
		l, err := p.cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
		if err != nil {
			return false, nil
		}
		ready := 0
		var latest time.Time
		for i := range l.Items {
			ready += readyIn(&l.Items[i])
			if t, err := time.Parse(time.RFC3339, l.Items[i].Annotations[triggerAnnotation]); err == nil && t.After(latest) {
				latest = t
			}
		}
		found = latest
		return ready == reals && !latest.IsZero(), nil
	})
	return found, err
}

// summary waits for the probes in flight and sums them up.
func (p *sliProbe) summary() (n int, p50, p90, worst time.Duration, failures []string) {
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	l := slices.Clone(p.latencies)
	slices.Sort(l)
	if len(l) > 0 {
		p50, p90, worst = l[(len(l)-1)/2], l[(len(l)-1)*9/10], l[len(l)-1]
	}
	return len(l), p50, p90, worst, p.failures
}
