package backendcheck

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

var svcName = model.ServiceName{Namespace: "ns", Name: "web"}

func rs(s string) model.RSKey {
	ap := netip.MustParseAddrPort(s)
	return model.RSKey{Addr: ap.Addr(), Port: ap.Port()}
}

func tcpCheck(targets ...model.RSKey) *model.HealthCheck {
	return &model.HealthCheck{Kind: model.CheckTCP, Interval: 5 * time.Second, Timeout: time.Second,
		HealthyThreshold: 2, UnhealthyThreshold: 3, Targets: targets}
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestHealthThresholds(t *testing.T) {
	cases := []struct {
		name    string
		start   bool
		results string // p: pass, f: fail
		changes string // per result: '.' none, 'D' went unhealthy, 'U' went healthy
	}{
		{"healthy stays healthy on passes", true, "ppp", "..."},
		{"three failures take it out", true, "fff", "..D"},
		{"a pass resets the failure count", true, "ffpfff", ".....D"},
		{"two passes bring it back", false, "pp", ".U"},
		{"a failure resets the pass count", false, "pfpp", "...U"},
		{"out and back", true, "fffpp", "..D.U"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := health{healthy: tc.start}
			got := []byte{}
			for _, r := range tc.results {
				switch {
				case !h.observe(r == 'p', 2, 3):
					got = append(got, '.')
				case h.healthy:
					got = append(got, 'U')
				default:
					got = append(got, 'D')
				}
			}
			if string(got) != tc.changes {
				t.Fatalf("changes %q, want %q", got, tc.changes)
			}
		})
	}
}

func TestJitterBounds(t *testing.T) {
	now := time.Unix(0, 0)
	iv := 5 * time.Second
	for _, r := range []float64{0, 0.25, 0.5, 0.999999} {
		if d := firstDue(now, iv, r).Sub(now); d < 0 || d >= iv {
			t.Errorf("firstDue(r=%v) = +%v, want in [0, %v)", r, d, iv)
		}
		if d := nextDue(now, iv, r).Sub(now); d < 4500*time.Millisecond || d > 5500*time.Millisecond {
			t.Errorf("nextDue(r=%v) = +%v, want in [4.5s, 5.5s]", r, d)
		}
	}
	if a, b := nextDue(now, iv, 0), nextDue(now, iv, 0.999999); b.Sub(a) < 999*time.Millisecond {
		t.Errorf("jitter spreads next checks over %v only, want about 1s", b.Sub(a))
	}
}

// startChecker runs a checker with a fake clock and prober and a fixed jitter of 0.5: the
// first check comes half an interval after Set, the next ones exactly one interval apart.
func startChecker(t *testing.T, workers int, p Prober) (*Checker, *fakeClock, *verdicts) {
	t.Helper()
	clk := newFakeClock()
	c := New(Options{Workers: workers, Prober: p, Clock: clk, Rand: func() float64 { return 0.5 }})
	v := &verdicts{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx, v.add); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return c, clk, v
}

func TestCheckerVerdictsFollowThresholds(t *testing.T) {
	p := newFakeProber()
	c, clk, v := startChecker(t, 4, p)
	a, b := rs("10.1.0.1:8080"), rs("10.1.0.2:8080")
	c.Set(svcName, tcpCheck(a, b), nil)

	// round advances to the next due time and waits until both endpoints were checked n times.
	round := func(n int, d time.Duration) {
		t.Helper()
		clk.Advance(d)
		waitFor(t, "checks", func() bool { return p.count(a) == n && p.count(b) == n && c.idle() })
	}
	round(1, 2500*time.Millisecond)
	p.setFailing(a, true)
	round(2, 5*time.Second)
	round(3, 5*time.Second)
	if got := v.get(); len(got) != 0 {
		t.Fatalf("verdict after 2 failures with threshold 3: %v", got)
	}
	round(4, 5*time.Second)
	waitFor(t, "an unhealthy verdict", func() bool { return len(v.get()) == 1 })
	if got := v.get()[0]; got.Endpoint != a || got.Healthy || got.Service != svcName || got.Err == "" {
		t.Fatalf("verdict = %+v, want %s unhealthy with an error", got, a)
	}
	if s := c.Snapshot(svcName); s[0].Healthy || !s[1].Healthy || s[0].LastError == "" {
		t.Fatalf("snapshot = %+v", s)
	}
	p.setFailing(a, false)
	round(5, 5*time.Second)
	if len(v.get()) != 1 {
		t.Fatalf("back after 1 pass with threshold 2: %v", v.get())
	}
	round(6, 5*time.Second)
	waitFor(t, "a healthy verdict", func() bool { return len(v.get()) == 2 })
	if got := v.get()[1]; got.Endpoint != a || !got.Healthy {
		t.Fatalf("verdict = %+v, want %s healthy", got, a)
	}
}

// TestCheckerStartDown: an endpoint the kernel showed at weight 0 after a restart starts
// unhealthy and needs the healthy threshold to come back; nothing is reported before.
func TestCheckerStartDown(t *testing.T) {
	p := newFakeProber()
	c, clk, v := startChecker(t, 2, p)
	a := rs("10.1.0.1:8080")
	c.Set(svcName, tcpCheck(a), map[model.RSKey]bool{a: true})
	if s := c.Snapshot(svcName); len(s) != 1 || s[0].Healthy || s[0].Checks != 0 {
		t.Fatalf("snapshot before any check = %+v", s)
	}
	clk.Advance(2500 * time.Millisecond)
	waitFor(t, "first check", func() bool { return p.count(a) == 1 && c.idle() })
	clk.Advance(5 * time.Second)
	waitFor(t, "healthy verdict", func() bool { return len(v.get()) == 1 })
	if got := v.get()[0]; !got.Healthy {
		t.Fatalf("verdict = %+v", got)
	}
}

func TestCheckerSetKeepsStateAndDropsRemoved(t *testing.T) {
	p := newFakeProber()
	c, clk, _ := startChecker(t, 2, p)
	a, b := rs("10.1.0.1:8080"), rs("10.1.0.2:8080")
	p.setFailing(a, true)
	c.Set(svcName, tcpCheck(a, b), nil)
	clk.Advance(2500 * time.Millisecond)
	waitFor(t, "checks", func() bool { return p.count(a) == 1 && p.count(b) == 1 && c.idle() })
	c.Set(svcName, tcpCheck(a), nil) // b's endpoint went away
	if s := c.Snapshot(svcName); len(s) != 1 || s[0].Fails != 1 {
		t.Fatalf("snapshot = %+v: a should keep its failure count", s)
	}
	clk.Advance(5 * time.Second)
	waitFor(t, "a checked again", func() bool { return p.count(a) == 2 })
	if p.count(b) != 1 {
		t.Fatalf("removed endpoint checked again")
	}
	c.Remove(svcName)
	if c.Snapshot(svcName) != nil {
		t.Fatal("snapshot of a removed Service")
	}
}

// blockingProber holds every probe until released and records the most at once.
type blockingProber struct {
	release chan struct{}
	cur     atomic.Int32
	max     atomic.Int32
	done    atomic.Int32
	mu      sync.Mutex
}

func (p *blockingProber) Probe(ctx context.Context, _ *model.HealthCheck, _ model.RSKey) error {
	n := p.cur.Add(1)
	p.mu.Lock()
	if n > p.max.Load() {
		p.max.Store(n)
	}
	p.mu.Unlock()
	<-p.release
	p.cur.Add(-1)
	p.done.Add(1)
	return nil
}

func TestCheckerConcurrencyLimit(t *testing.T) {
	p := &blockingProber{release: make(chan struct{})}
	clk := newFakeClock()
	c := New(Options{Workers: 3, Prober: p, Clock: clk, Rand: func() float64 { return 0 }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx, func(Verdict) {}); close(done) }()
	defer func() { cancel(); <-done }()
	var targets []model.RSKey
	for i := range 20 {
		targets = append(targets, model.RSKey{Addr: netip.AddrFrom4([4]byte{10, 1, 0, byte(i + 1)}), Port: 80})
	}
	c.Set(svcName, tcpCheck(targets...), nil) // all due at once (jitter 0)
	waitFor(t, "3 checks running", func() bool { return p.cur.Load() == 3 })
	for range 20 {
		p.release <- struct{}{}
	}
	waitFor(t, "all 20 checked", func() bool { return p.done.Load() == 20 })
	if m := p.max.Load(); m != 3 {
		t.Fatalf("at most %d checks ran at once, want the limit 3", m)
	}
}
