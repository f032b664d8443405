package backendcheck

import (
	"context"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// countingProber passes each probe to next and signals done once per probe.
type countingProber struct {
	next Prober
	done chan struct{}
}

func (p *countingProber) Probe(ctx context.Context, hc *model.HealthCheck, ep model.RSKey) error {
	err := p.next.Probe(ctx, hc, ep)
	p.done <- struct{}{}
	return err
}

type okProber struct{}

func (okProber) Probe(context.Context, *model.HealthCheck, model.RSKey) error { return nil }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchRounds runs b.N rounds of checks of every target: each round moves the fake clock
// past one interval (plus the jitter) and waits for all checks. It reports the process's
// CPU time per round, that is per check of every endpoint once.
func benchRounds(b *testing.B, p Prober, targets []model.RSKey) {
	clk := newFakeClock()
	cp := &countingProber{next: p, done: make(chan struct{}, len(targets))}
	c := New(Options{Prober: cp, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx, func(Verdict) {})
	hc := &model.HealthCheck{Kind: model.CheckTCP, Interval: 5 * time.Second, Timeout: time.Second,
		HealthyThreshold: 2, UnhealthyThreshold: 3, Targets: targets}
	c.Set(model.ServiceName{Namespace: "bench", Name: "svc"}, hc, nil)
	b.ResetTimer()
	start := cpuTime()
	for range b.N {
		clk.Advance(hc.Interval * 12 / 10)
		for range targets {
			<-cp.done
		}
		for !c.idle() { // the last results are being recorded
			runtime.Gosched()
		}
	}
	b.StopTimer()
	perRound := (cpuTime() - start) / time.Duration(b.N)
	b.ReportMetric(float64(perRound.Microseconds())/1000, "cpu-ms/round")
	// At the default 5 s interval a round is what 1,000 endpoints cost every 5 s.
	b.ReportMetric(float64(perRound)/float64(hc.Interval)*100, "%core@5s")
}

// BenchmarkChecker1000Endpoints: the checker's own work (scheduling, workers, state) for
// 1,000 endpoints, with probes that cost nothing.
func BenchmarkChecker1000Endpoints(b *testing.B) {
	targets := make([]model.RSKey, 1000)
	for i := range targets {
		targets[i] = rs("10.1.0.1:1")
		targets[i].Port = uint16(i + 1)
	}
	benchRounds(b, okProber{}, targets)
}

// BenchmarkTCPCheck1000Endpoints: 1,000 real TCP checks (connect and close) per round to
// listeners on loopback. The CPU includes this process accepting and closing those
// connections, which on a node the pods do: an upper bound for the proxy's share.
func BenchmarkTCPCheck1000Endpoints(b *testing.B) {
	targets := make([]model.RSKey, 0, 1000)
	for range 1000 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		targets = append(targets, rs(ln.Addr().String()))
	}
	benchRounds(b, NewNetProber(), targets)
}
