package metrics

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kube-ipvs/kube-ipvs/model"
)

func vsKey(addr string, proto model.Protocol, port uint16) model.VSKey {
	return model.VSKey{Addr: netip.MustParseAddr(addr), Proto: proto, Port: port}
}

type owner struct {
	svc  model.ServiceName
	port string
}

func lookupFrom(m map[model.VSKey]owner) ServiceLookup {
	return func(k model.VSKey) (model.ServiceName, string, bool) {
		o, ok := m[k]
		return o.svc, o.port, ok
	}
}

const statsErrorsHeader = `# HELP kube_ipvs_service_stats_errors_total Scrapes whose per-Service IPVS counters were left out (source failed, timed out) or cut short (limit), by reason.
# TYPE kube_ipvs_service_stats_errors_total counter
`

func statsErrors(source, timeout, limit int) string {
	return statsErrorsHeader + fmt.Sprintf(`kube_ipvs_service_stats_errors_total{reason="limit"} %d
kube_ipvs_service_stats_errors_total{reason="source"} %d
kube_ipvs_service_stats_errors_total{reason="timeout"} %d
`, limit, source, timeout)
}

var statsNames = []string{
	"kube_ipvs_service_connections_total", "kube_ipvs_service_packets_in_total", "kube_ipvs_service_packets_out_total",
	"kube_ipvs_service_bytes_in_total", "kube_ipvs_service_bytes_out_total", "kube_ipvs_service_stats_errors_total",
}

func TestServiceStatsCollect(t *testing.T) {
	web := model.ServiceName{Namespace: "shop", Name: "web"}
	dns := model.ServiceName{Namespace: "kube-system", Name: "dns"}
	k1 := vsKey("10.96.0.10", model.UDP, 53)
	k2 := vsKey("fd00::1", model.TCP, 443)
	k3 := vsKey("192.168.1.5", model.SCTP, 30080)
	foreign := vsKey("10.0.0.99", model.TCP, 22)
	var calls atomic.Int32
	source := func() ([]VSStats, error) {
		calls.Add(1)
		return []VSStats{
			{Key: k1, Connections: 100, PacketsIn: 200, PacketsOut: 190, BytesIn: 12000, BytesOut: 30000},
			{Key: foreign, Connections: 5, PacketsIn: 5, PacketsOut: 5, BytesIn: 5, BytesOut: 5},
			{Key: k2, Connections: 1 << 40, PacketsIn: 2, PacketsOut: 3, BytesIn: 4, BytesOut: 5},
			{Key: k3},
		}, nil
	}
	c := NewServiceStatsCollector(source, lookupFrom(map[model.VSKey]owner{
		k1: {dns, "dns"}, k2: {web, "https"}, k3: {web, ""},
	}), StatsLimits{})

	want := `
# HELP kube_ipvs_service_connections_total Connections a Service's IPVS virtual server has scheduled.
# TYPE kube_ipvs_service_connections_total counter
kube_ipvs_service_connections_total{name="dns",namespace="kube-system",port="dns",protocol="UDP",vip="10.96.0.10:53"} 100
kube_ipvs_service_connections_total{name="web",namespace="shop",port="",protocol="SCTP",vip="192.168.1.5:30080"} 0
kube_ipvs_service_connections_total{name="web",namespace="shop",port="https",protocol="TCP",vip="[fd00::1]:443"} 1.099511627776e+12
# HELP kube_ipvs_service_packets_in_total Packets from clients through a Service's IPVS virtual server.
# TYPE kube_ipvs_service_packets_in_total counter
kube_ipvs_service_packets_in_total{name="dns",namespace="kube-system",port="dns",protocol="UDP",vip="10.96.0.10:53"} 200
kube_ipvs_service_packets_in_total{name="web",namespace="shop",port="",protocol="SCTP",vip="192.168.1.5:30080"} 0
kube_ipvs_service_packets_in_total{name="web",namespace="shop",port="https",protocol="TCP",vip="[fd00::1]:443"} 2
# HELP kube_ipvs_service_packets_out_total Packets to clients through a Service's IPVS virtual server.
# TYPE kube_ipvs_service_packets_out_total counter
kube_ipvs_service_packets_out_total{name="dns",namespace="kube-system",port="dns",protocol="UDP",vip="10.96.0.10:53"} 190
kube_ipvs_service_packets_out_total{name="web",namespace="shop",port="",protocol="SCTP",vip="192.168.1.5:30080"} 0
kube_ipvs_service_packets_out_total{name="web",namespace="shop",port="https",protocol="TCP",vip="[fd00::1]:443"} 3
# HELP kube_ipvs_service_bytes_in_total Bytes from clients through a Service's IPVS virtual server.
# TYPE kube_ipvs_service_bytes_in_total counter
kube_ipvs_service_bytes_in_total{name="dns",namespace="kube-system",port="dns",protocol="UDP",vip="10.96.0.10:53"} 12000
kube_ipvs_service_bytes_in_total{name="web",namespace="shop",port="",protocol="SCTP",vip="192.168.1.5:30080"} 0
kube_ipvs_service_bytes_in_total{name="web",namespace="shop",port="https",protocol="TCP",vip="[fd00::1]:443"} 4
# HELP kube_ipvs_service_bytes_out_total Bytes to clients through a Service's IPVS virtual server.
# TYPE kube_ipvs_service_bytes_out_total counter
kube_ipvs_service_bytes_out_total{name="dns",namespace="kube-system",port="dns",protocol="UDP",vip="10.96.0.10:53"} 30000
kube_ipvs_service_bytes_out_total{name="web",namespace="shop",port="",protocol="SCTP",vip="192.168.1.5:30080"} 0
kube_ipvs_service_bytes_out_total{name="web",namespace="shop",port="https",protocol="TCP",vip="[fd00::1]:443"} 5
` + statsErrors(0, 0, 0)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), statsNames...); err != nil {
		t.Error(err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("source called %d times for one scrape, want 1", n)
	}
	// Nothing foreign leaks out.
	if n := testutil.CollectAndCount(c, "kube_ipvs_service_connections_total"); n != 3 {
		t.Errorf("%d connection series, want 3", n)
	}
}

func TestServiceStatsSourceError(t *testing.T) {
	fail := true
	k := vsKey("10.96.0.1", model.TCP, 443)
	c := NewServiceStatsCollector(func() ([]VSStats, error) {
		if fail {
			return []VSStats{{Key: k, Connections: 9}}, errors.New("netlink dump interrupted")
		}
		return []VSStats{{Key: k, Connections: 9}}, nil
	}, lookupFrom(map[model.VSKey]owner{k: {model.ServiceName{Namespace: "default", Name: "kubernetes"}, "https"}}), StatsLimits{})

	// A failing source: the scrape succeeds with only the error counter, even if the source
	// also returned partial data.
	if err := testutil.CollectAndCompare(c, strings.NewReader(statsErrors(1, 0, 0)), statsNames...); err != nil {
		t.Error(err)
	}
	fail = false
	if n := testutil.CollectAndCount(c, "kube_ipvs_service_connections_total"); n != 1 {
		t.Errorf("after recovery: %d series", n)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(statsErrors(1, 0, 0)), "kube_ipvs_service_stats_errors_total"); err != nil {
		t.Error(err)
	}
}

func TestServiceStatsSourcePanics(t *testing.T) {
	c := NewServiceStatsCollector(func() ([]VSStats, error) { panic("nil map") }, lookupFrom(nil), StatsLimits{})
	if err := testutil.CollectAndCompare(c, strings.NewReader(statsErrors(1, 0, 0)), statsNames...); err != nil {
		t.Error(err)
	}
}

func TestServiceStatsTimeout(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	k := vsKey("10.96.0.1", model.TCP, 80)
	c := NewServiceStatsCollector(func() ([]VSStats, error) {
		calls.Add(1)
		<-release
		return []VSStats{{Key: k, Connections: 1}}, nil
	}, lookupFrom(map[model.VSKey]owner{k: {model.ServiceName{Namespace: "a", Name: "b"}, "http"}}),
		StatsLimits{Timeout: 20 * time.Millisecond})

	start := time.Now()
	if err := testutil.CollectAndCompare(c, strings.NewReader(statsErrors(0, 1, 0)), statsNames...); err != nil {
		t.Error(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("scrape took %v with a 20ms timeout", d)
	}
	// A stuck source is not called again: the next scrapes wait on the same call.
	if err := testutil.CollectAndCompare(c, strings.NewReader(statsErrors(0, 2, 0)), statsNames...); err != nil {
		t.Error(err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("stuck source called %d times, want 1", n)
	}
	close(release)
	// Once it answers, scrapes get data again (the finished call may be shared once).
	deadline := time.Now().Add(5 * time.Second)
	for testutil.CollectAndCount(c, "kube_ipvs_service_connections_total") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("no data after the source recovered")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestServiceStatsConcurrentScrapesShareOneCall(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	k := vsKey("10.96.0.1", model.TCP, 80)
	c := NewServiceStatsCollector(func() ([]VSStats, error) {
		calls.Add(1)
		<-release
		return []VSStats{{Key: k, Connections: 7}}, nil
	}, lookupFrom(map[model.VSKey]owner{k: {model.ServiceName{Namespace: "a", Name: "b"}, "http"}}), StatsLimits{Timeout: 10 * time.Second})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)

	var wg sync.WaitGroup
	counts := make([]int, 5)
	for i := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := testutil.GatherAndCount(reg, "kube_ipvs_service_connections_total")
			if err != nil {
				t.Error(err)
			}
			counts[i] = n
		}()
	}
	// Let every scrape join the call before it returns.
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	for i, n := range counts {
		if n != 1 {
			t.Errorf("scrape %d got %d series", i, n)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("source called %d times for 5 concurrent scrapes, want 1", n)
	}
}

func TestServiceStatsLimit(t *testing.T) {
	svc := model.ServiceName{Namespace: "ns", Name: "many"}
	owners := map[model.VSKey]owner{}
	var stats []VSStats
	// Descending, so the cap has to sort to keep the lowest keys.
	for i := 9; i >= 0; i-- {
		k := vsKey(fmt.Sprintf("10.0.0.%d", i), model.TCP, 80)
		owners[k] = owner{svc, "http"}
		stats = append(stats, VSStats{Key: k, Connections: uint64(i)})
	}
	c := NewServiceStatsCollector(func() ([]VSStats, error) { return stats, nil }, lookupFrom(owners), StatsLimits{MaxVirtualServers: 3})
	want := `
# HELP kube_ipvs_service_connections_total Connections a Service's IPVS virtual server has scheduled.
# TYPE kube_ipvs_service_connections_total counter
kube_ipvs_service_connections_total{name="many",namespace="ns",port="http",protocol="TCP",vip="10.0.0.0:80"} 0
kube_ipvs_service_connections_total{name="many",namespace="ns",port="http",protocol="TCP",vip="10.0.0.1:80"} 1
kube_ipvs_service_connections_total{name="many",namespace="ns",port="http",protocol="TCP",vip="10.0.0.2:80"} 2
` + statsErrors(0, 0, 1)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "kube_ipvs_service_connections_total", "kube_ipvs_service_stats_errors_total"); err != nil {
		t.Error(err)
	}
	// Foreign virtual servers do not count toward the cap.
	c = NewServiceStatsCollector(func() ([]VSStats, error) {
		return append([]VSStats{{Key: vsKey("1.1.1.1", model.TCP, 1)}, {Key: vsKey("1.1.1.2", model.TCP, 1)}}, stats[:3]...), nil
	}, lookupFrom(owners), StatsLimits{MaxVirtualServers: 3})
	if err := testutil.CollectAndCompare(c, strings.NewReader(statsErrors(0, 0, 0)), "kube_ipvs_service_stats_errors_total"); err != nil {
		t.Error(err)
	}
}

func TestServiceStatsRegisteredOnMetrics(t *testing.T) {
	m := newTestMetrics()
	k := vsKey("10.96.0.1", model.TCP, 443)
	if err := m.EnableServiceStats(func() ([]VSStats, error) { return []VSStats{{Key: k, BytesOut: 42}}, nil },
		lookupFrom(map[model.VSKey]owner{k: {model.ServiceName{Namespace: "default", Name: "kubernetes"}, "https"}}), StatsLimits{}); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP kube_ipvs_service_bytes_out_total Bytes to clients through a Service's IPVS virtual server.
# TYPE kube_ipvs_service_bytes_out_total counter
kube_ipvs_service_bytes_out_total{name="kubernetes",namespace="default",port="https",protocol="TCP",vip="10.96.0.1:443"} 42
`), "kube_ipvs_service_bytes_out_total"); err != nil {
		t.Error(err)
	}
	lint(t, m.Registry())
}

// benchStats builds n virtual servers owned by n/2 Services (a ClusterIP and a NodePort each).
func benchStats(n int) ([]VSStats, ServiceLookup) {
	stats := make([]VSStats, n)
	owners := make(map[model.VSKey]owner, n)
	for i := range n {
		k := model.VSKey{Addr: netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), Proto: model.TCP, Port: 80}
		if i%2 == 1 {
			k = model.VSKey{Addr: netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)}), Proto: model.TCP, Port: 30000 + uint16(i%2000)}
		}
		stats[i] = VSStats{Key: k, Connections: uint64(i), PacketsIn: uint64(3 * i), PacketsOut: uint64(2 * i), BytesIn: uint64(100 * i), BytesOut: uint64(900 * i)}
		owners[k] = owner{model.ServiceName{Namespace: fmt.Sprintf("ns-%d", i%50), Name: fmt.Sprintf("svc-%d", i/2)}, "http"}
	}
	var mu sync.Mutex // the controller's lookup takes a lock too
	return stats, func(k model.VSKey) (model.ServiceName, string, bool) {
		mu.Lock()
		defer mu.Unlock()
		o, ok := owners[k]
		return o.svc, o.port, ok
	}
}

func TestBenchStatsAreUnique(t *testing.T) {
	stats, lookup := benchStats(10000)
	seen := map[model.VSKey]bool{}
	for _, s := range stats {
		if seen[s.Key] {
			t.Fatalf("duplicate key %v", s.Key)
		}
		seen[s.Key] = true
		if _, _, ok := lookup(s.Key); !ok {
			t.Fatalf("no owner for %v", s.Key)
		}
	}
	c := NewServiceStatsCollector(func() ([]VSStats, error) { return stats, nil }, lookup, StatsLimits{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 5*10000+3 {
		t.Errorf("gathered %d series (err %v), want %d", n, err, 5*10000+3)
	}
}

// BenchmarkCollect10k measures one scrape's Collect over 10,000 virtual servers (drained
// from the channel as the registry would).
func BenchmarkCollect10k(b *testing.B) {
	stats, lookup := benchStats(10000)
	var calls atomic.Int64
	c := NewServiceStatsCollector(func() ([]VSStats, error) { calls.Add(1); return stats, nil }, lookup, StatsLimits{})
	b.ReportAllocs()
	scrapes := int64(0)
	for b.Loop() {
		scrapes++
		ch := make(chan prometheus.Metric, 1024)
		done := make(chan int)
		go func() {
			n := 0
			for range ch {
				n++
			}
			done <- n
		}()
		c.Collect(ch)
		close(ch)
		if n := <-done; n != 5*10000+3 {
			b.Fatalf("collected %d metrics", n)
		}
	}
	if calls.Load() != scrapes {
		b.Fatalf("%d source calls for %d scrapes", calls.Load(), scrapes)
	}
}

// BenchmarkGather10k is a whole registry gather (Collect plus sorting and encoding to
// protobuf), the cost of one scrape without the HTTP write.
func BenchmarkGather10k(b *testing.B) {
	stats, lookup := benchStats(10000)
	m := New(WithoutRuntimeMetrics())
	if err := m.EnableServiceStats(func() ([]VSStats, error) { return stats, nil }, lookup, StatsLimits{}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Registry().Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
