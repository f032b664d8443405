package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// scaleTrace records what a failed request of the scale-down's loop needs explained, on the
// node's clock (which the pods share, so kipvs-echo ask's failure times line up with it):
// the virtual server's real servers and weights and the client's connections that are not
// closed, polled on the node, and every change of the echo Pods and their endpoints, watched
// from the API. It keeps only changes, so a quiet stretch costs one line.
type scaleTrace struct {
	mu     sync.Mutex
	events []traceEvent
	skew   time.Duration // the node's clock minus the host's, from the agent's replies
	last   map[string]string
}

type traceEvent struct {
	at   time.Time // the node's clock
	what string
}

// startScaleTrace polls and watches until ctx ends; the returned function waits for that.
func (c *checker) startScaleTrace(ctx context.Context, vs, clientIP string) (*scaleTrace, func()) {
	t := &scaleTrace{last: map[string]string{}}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); t.pollIPVS(ctx, c.h, c.clientNode, vs, clientIP) }()
	go func() { defer wg.Done(); t.watchPods(ctx, c) }()
	go func() { defer wg.Done(); t.watchSlices(ctx, c) }()
	return t, wg.Wait
}

// record adds what under key when it differs from key's last record.
func (t *scaleTrace) record(at time.Time, key, what string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last[key] == what {
		return
	}
	t.last[key] = what
	t.events = append(t.events, traceEvent{at: at, what: key + ": " + what})
}

// hostToNode places a host time on the node's clock.
func (t *scaleTrace) hostToNode(at time.Time) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return at.Add(t.skew)
}

func (t *scaleTrace) pollIPVS(ctx context.Context, h *host, node, vs, clientIP string) {
	var last time.Time // the node's clock at the end of the last poll
	for ctx.Err() == nil {
		sent := time.Now()
		rep, err := h.ipvsOnNode(ctx, node)
		if err != nil {
			continue
		}
		// The reply's end is about halfway between sending and receiving.
		mid := sent.Add(time.Since(sent) / 2)
		t.mu.Lock()
		t.skew = rep.End.Sub(mid)
		t.mu.Unlock()
		table, conns, _ := strings.Cut(rep.Output, "==")
		var ws []string
		for rs, w := range realServers(table, vs) {
			ws = append(ws, fmt.Sprintf("%s=%d", rs, w))
		}
		sort.Strings(ws)
		t.record(rep.End, "ipvs weights", strings.Join(ws, " "))
		t.record(rep.End, "ipvs open connections from the client", openConns(conns, vs, clientIP))
		// A poll takes a few hundred milliseconds; a longer gap is a node that did not run
		// (or answer) for that long, which the failures around it must be read against.
		if gap := rep.End.Sub(last); !last.IsZero() && gap > 2*time.Second {
			t.record(rep.End, "node", fmt.Sprintf("no poll answered for %s, since %s",
				gap.Round(10*time.Millisecond), last.Format("15:04:05.000")))
		}
		last = rep.End
		time.Sleep(100 * time.Millisecond)
	}
}

// openConns lists ipvsadm -Lnc's entries from client to vs that are neither closed nor in
// TIME_WAIT: "STATE source->destination", sorted.
func openConns(out, vs, client string) string {
	var open []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		// pro expire state source virtual destination
		if len(f) != 6 || f[4] != vs || !strings.HasPrefix(f[3], client+":") {
			continue
		}
		if f[2] == "TIME_WAIT" || f[2] == "CLOSE" {
			continue
		}
		open = append(open, f[2]+" "+f[3]+"->"+f[5])
	}
	sort.Strings(open)
	if len(open) == 0 {
		return "none"
	}
	return strings.Join(open, ", ")
}

func (t *scaleTrace) watchPods(ctx context.Context, c *checker) {
	w, err := c.cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
	if err != nil {
		t.record(t.hostToNode(time.Now()), "pod watch", err.Error())
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			continue
		}
		at := t.hostToNode(time.Now())
		if ev.Type == watch.Deleted {
			t.record(at, "pod "+p.Name, "deleted from the API")
			continue
		}
		t.record(at, "pod "+p.Name, echoPodState(p))
	}
}

// echoPodState is a Pod's address, phase, deletion, readiness and its container's state.
func echoPodState(p *corev1.Pod) string {
	s := []string{p.Status.PodIP, string(p.Status.Phase)}
	if p.DeletionTimestamp != nil {
		s = append(s, "deleting")
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			s = append(s, "ready="+string(cond.Status))
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Terminated != nil:
			s = append(s, fmt.Sprintf("exited %d at %s", cs.State.Terminated.ExitCode,
				cs.State.Terminated.FinishedAt.UTC().Format("15:04:05")))
		case cs.State.Running != nil:
			s = append(s, "running")
		}
	}
	return strings.Join(s, " ")
}

func (t *scaleTrace) watchSlices(ctx context.Context, c *checker) {
	w, err := c.cs.DiscoveryV1().EndpointSlices("default").Watch(ctx,
		metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=echo"})
	if err != nil {
		t.record(t.hostToNode(time.Now()), "slice watch", err.Error())
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		s, ok := ev.Object.(*discoveryv1.EndpointSlice)
		if !ok || ev.Type == watch.Deleted {
			continue
		}
		at := t.hostToNode(time.Now())
		var eps []string
		for _, e := range s.Endpoints {
			eps = append(eps, strings.Join(e.Addresses, ",")+" "+conds(e.Conditions))
		}
		sort.Strings(eps)
		t.record(at, "slice "+s.Name, strings.Join(eps, "; "))
	}
}

// conds is an endpoint's conditions as three letters: Ready, Serving, Terminating in upper
// case when true, lower case when false, "-" when unset.
func conds(c discoveryv1.EndpointConditions) string {
	b := func(p *bool, name byte) byte {
		switch {
		case p == nil:
			return '-'
		case *p:
			return name
		default:
			return name + 'a' - 'A'
		}
	}
	return string([]byte{b(c.Ready, 'R'), b(c.Serving, 'S'), b(c.Terminating, 'T')})
}

// String is the time line, in the node's clock's order.
func (t *scaleTrace) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	ev := append([]traceEvent(nil), t.events...)
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].at.Before(ev[j].at) })
	var b strings.Builder
	fmt.Fprintf(&b, "\n--- the scale-down on the node's clock (the host's is %s behind; endpoints as Ready/Serving/Terminating)\n", t.skew.Round(time.Millisecond))
	for _, e := range ev {
		fmt.Fprintf(&b, "%s %s\n", e.at.UTC().Format("15:04:05.000"), e.what)
	}
	return b.String()
}
