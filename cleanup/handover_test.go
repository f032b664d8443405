package cleanup

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// scripted is a Handover over scripted attempts and a clock that records the waits and
// returns at once.
type scripted struct {
	results  []func() ([]Object, error)
	attempts int
	waits    []time.Duration
	reports  []Attempt
	onWait   func() // called on each wait, before it returns
}

func (s *scripted) handover() Handover {
	return Handover{
		First: time.Second, Max: 5 * time.Second,
		Attempt: func() ([]Object, error) {
			s.attempts++
			return s.results[min(s.attempts, len(s.results))-1]()
		},
		Report: func(a Attempt) { s.reports = append(s.reports, a) },
		After: func(d time.Duration) <-chan time.Time {
			s.waits = append(s.waits, d)
			if s.onWait != nil {
				s.onWait()
			}
			c := make(chan time.Time, 1)
			c <- time.Time{}
			return c
		},
	}
}

var kubeServices = Object{Kind: KindChain, Name: "KUBE-SERVICES", Family: familyIPv4, Backend: "nft", Table: "nat", Owner: OwnerKubeProxy}

func closed() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Nothing is tried before the first repair: a proxy that stops before it leaves
// kube-proxy's rules alone.
func TestHandoverWaitsForTheFirstRepair(t *testing.T) {
	s := &scripted{results: []func() ([]Object, error){func() ([]Object, error) { return nil, nil }}}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- s.handover().Run(ctx, ready) }()
	select {
	case err := <-done:
		t.Fatalf("Run returned before the first repair: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || s.attempts != 0 {
		t.Errorf("cancelled before the first repair: %v after %d attempts; want context.Canceled, 0", err, s.attempts)
	}
}

// A failed listing and a refused object are retried with doubling waits, capped at Max,
// until an attempt removes everything; each attempt is reported with what failed.
func TestHandoverRetriesWithBackoffUntilEverythingIsRemoved(t *testing.T) {
	refused := kubeServices
	refused.Error = "iptables-nft-restore: line 3 failed"
	listFail := func() ([]Object, error) { return nil, errors.New("listing iptables-nft: exit 4") }
	s := &scripted{results: []func() ([]Object, error){
		listFail,
		func() ([]Object, error) {
			return []Object{refused, {Kind: KindSet, Name: "KUBE-CLUSTER-IP", Owner: OwnerKubeProxy}}, nil
		},
		listFail, listFail, listFail,
		func() ([]Object, error) { return []Object{kubeServices}, nil },
	}}
	if err := s.handover().Run(context.Background(), closed()); err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{1, 2, 4, 5, 5}; !slices.Equal(s.waits, scale(want)) {
		t.Errorf("waits %v; want %v", s.waits, scale(want))
	}
	if len(s.reports) != 6 {
		t.Fatalf("%d reports; want 6", len(s.reports))
	}
	second := s.reports[1]
	if second.N != 2 || second.Retry != 2*time.Second || second.Err == nil ||
		!strings.Contains(second.Err.Error(), "1 of kube-proxy's objects could not be removed: chain iptables-nft nat KUBE-SERVICES (kube-proxy): iptables-nft-restore: line 3 failed") {
		t.Errorf("second report %+v", second)
	}
	if got := second.Removed(); got[KindSet] != 1 || got[KindChain] != 0 {
		t.Errorf("second attempt removed %v; want the set only", got)
	}
	last := s.reports[5]
	if last.Err != nil || last.Retry != 0 || last.Removed()[KindChain] != 1 {
		t.Errorf("last report %+v; want success with the chain removed", last)
	}
}

// An attempt that finds nothing is a success: nothing more is tried.
func TestHandoverWithNothingToRemoveTriesOnce(t *testing.T) {
	s := &scripted{results: []func() ([]Object, error){func() ([]Object, error) { return nil, nil }}}
	if err := s.handover().Run(context.Background(), closed()); err != nil || s.attempts != 1 || len(s.waits) != 0 {
		t.Errorf("Run: %v after %d attempts, waits %v; want nil, 1, none", err, s.attempts, s.waits)
	}
}

// The proxy stopping ends the retries.
func TestHandoverStopsRetryingWhenTheProxyStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &scripted{results: []func() ([]Object, error){func() ([]Object, error) { return nil, errors.New("no") }}}
	s.onWait = cancel
	h := s.handover()
	after := h.After
	h.After = func(d time.Duration) <-chan time.Time { after(d); return nil } // never fires
	if err := h.Run(ctx, closed()); !errors.Is(err, context.Canceled) || s.attempts != 1 {
		t.Errorf("Run: %v after %d attempts; want context.Canceled after 1", err, s.attempts)
	}
}

// Over the fake kernel: the first attempt cannot destroy a kube-proxy set that a rule still
// uses; the retry removes it once it is free. kube-ipvs' objects, the virtual servers and
// kube-ipvs0 are never touched.
func TestHandoverRemovesKubeProxysLeftoversOnlyAndRetries(t *testing.T) {
	shortSetReleaseWait(t)
	n := newNode(t)
	n.sets.SetReferences("KUBE-CLUSTER-IP", 1)
	var reports []Attempt
	h := Handover{
		First: time.Millisecond, Max: time.Millisecond,
		Attempt: func() ([]Object, error) {
			objs, _, err := RemoveKubeProxy(n.kernel())
			return objs, err
		},
		Report: func(a Attempt) {
			reports = append(reports, a)
			if a.N == 1 {
				n.sets.SetReferences("KUBE-CLUSTER-IP", 0) // the foreign user lets go
			}
		},
	}
	if err := h.Run(context.Background(), closed()); err != nil {
		t.Fatal(err)
	}
	if len(reports) != 2 || reports[0].Err == nil || !strings.Contains(reports[0].Err.Error(), "ipset KUBE-CLUSTER-IP (kube-proxy)") {
		t.Fatalf("reports %+v; want a failure naming the set, then a success", reports)
	}
	if r := reports[0].Removed(); r[KindChain] != 4 || r[KindRule] != 2 || r[KindSet] != 1 {
		t.Errorf("the first attempt removed %v; want 4 chains, 2 rules, 1 set", r)
	}
	if r := reports[1].Removed(); r[KindSet] != 1 || len(reports[1].Objects) != 1 {
		t.Errorf("the retry removed %v of %d objects; want the one set", r, len(reports[1].Objects))
	}
	v4 := n.tools.Save("iptables-nft")
	for _, keep := range []string{"KIPVS-SERVICES", "KIPVS-POSTROUTING", "KIPVS-SVC-4Q2BZ6ZJ7DO2VVZ6", "-A INPUT -j KUBE-FIREWALL"} {
		if !strings.Contains(v4, keep) {
			t.Errorf("%q is gone:\n%s", keep, v4)
		}
	}
	if !strings.Contains(n.tools.Save("ip6tables-legacy"), "KIPVS-FIREWALL") {
		t.Error("kube-ipvs' IPv6 chain is gone")
	}
	if strings.Contains(v4, "KUBE-SERVICES") || strings.Contains(v4, "KUBE-IPVS-FILTER") {
		t.Errorf("kube-proxy's chains left:\n%s", v4)
	}
	sets := strings.Join(setNames(n), " ")
	if sets != "FOREIGN-SET KIPVS-CLUSTER-IP KIPVS-CLUSTER-IP-6 KIPVS-HEALTH-CHECK-NODE-PORT KUBE-SRC-ROUTERPOLICY" {
		t.Errorf("sets left: %s", sets)
	}
	if got := strings.Count(n.vs.Dump(), "\n"); got != 9 || len(n.links.Addrs("kube-ipvs0")) != 3 {
		t.Errorf("virtual servers or kube-ipvs0 changed:\n%s%q", n.vs.Dump(), n.links.Addrs("kube-ipvs0"))
	}
}

func scale(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d * time.Second
	}
	return out
}

func setNames(n *node) []string {
	var out []string
	for _, s := range n.sets.Names() {
		out = append(out, string(s))
	}
	return out
}
