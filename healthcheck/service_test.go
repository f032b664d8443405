package healthcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// fakeNet maps every requested ":port" to a real loopback listener on a free port, records
// each listen call and can refuse chosen ports.
type fakeNet struct {
	mu      sync.Mutex
	calls   []string
	refuse  map[uint16]error
	current map[uint16]*trackedListener // the latest listener per requested port
}

type trackedListener struct {
	net.Listener
	closed atomic.Bool
}

func (l *trackedListener) Close() error {
	l.closed.Store(true)
	return l.Listener.Close()
}

func newFakeNet() *fakeNet {
	return &fakeNet{refuse: map[uint16]error{}, current: map[uint16]*trackedListener{}}
}

func (f *fakeNet) listen(network, addr string) (net.Listener, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil || host != "" || network != "tcp" {
		return nil, fmt.Errorf("want tcp on all addresses, got %s %q", network, addr)
	}
	p, _ := strconv.ParseUint(ps, 10, 16)
	port := uint16(p)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, addr)
	if err := f.refuse[port]; err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	tl := &trackedListener{Listener: ln}
	f.current[port] = tl
	return tl, nil
}

func (f *fakeNet) setRefuse(port uint16, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.refuse, port)
	} else {
		f.refuse[port] = err
	}
}

func (f *fakeNet) listener(t *testing.T, port uint16) *trackedListener {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.current[port]
	if l == nil {
		t.Fatalf("port %d was never bound", port)
	}
	return l
}

func (f *fakeNet) url(t *testing.T, port uint16) string {
	return "http://" + f.listener(t, port).Addr().String()
}

func (f *fakeNet) listenCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

var (
	svcA = model.ServiceName{Namespace: "default", Name: "a"}
	svcB = model.ServiceName{Namespace: "default", Name: "b"}
	svcC = model.ServiceName{Namespace: "other", Name: "c"}
)

type svcResponse struct {
	code   int
	header http.Header
	body   serviceBody
	raw    map[string]any
}

var testClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

func getURL(t *testing.T, url string) svcResponse {
	t.Helper()
	resp, err := testClient.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := svcResponse{code: resp.StatusCode, header: resp.Header}
	if err := json.Unmarshal(data, &r.body); err != nil {
		t.Fatalf("GET %s: body %q: %v", url, data, err)
	}
	_ = json.Unmarshal(data, &r.raw)
	return r
}

func refused(url string) bool {
	resp, err := testClient.Get(url)
	if err != nil {
		return true
	}
	resp.Body.Close()
	return false
}

func TestServiceHealthAnswers(t *testing.T) {
	fn := newFakeNet()
	var proxyOK atomic.Bool
	proxyOK.Store(true)
	sh := NewServiceHealth(proxyOK.Load, WithListen(fn.listen))
	defer sh.Close()

	if errs := sh.SyncServices(map[model.ServiceName]uint16{svcA: 30001}); errs != nil {
		t.Fatalf("SyncServices: %v", errs)
	}
	url := fn.url(t, 30001)

	tests := []struct {
		name      string
		endpoints int
		proxy     bool
		path      string
		code      int
	}{
		{"no endpoints yet", -1, true, "/", http.StatusServiceUnavailable},
		{"three local endpoints", 3, true, "/", http.StatusOK},
		{"any path", 3, true, "/some/path?x=1", http.StatusOK},
		{"zero local endpoints", 0, true, "/", http.StatusServiceUnavailable},
		{"endpoints but the proxy is unhealthy", 2, false, "/", http.StatusServiceUnavailable},
		{"one endpoint again", 1, true, "/healthz", http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.endpoints >= 0 {
				sh.SyncEndpoints(map[model.ServiceName]int{svcA: tc.endpoints, svcB: 7})
			}
			proxyOK.Store(tc.proxy)
			r := getURL(t, url+tc.path)
			if r.code != tc.code {
				t.Errorf("status %d, want %d", r.code, tc.code)
			}
			n := max(tc.endpoints, 0)
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if got := r.header.Get(HeaderEndpointWeight); got != strconv.Itoa(n) {
				t.Errorf("%s = %q, want %d", HeaderEndpointWeight, got, n)
			}
			want := serviceBody{Service: serviceRef{Namespace: "default", Name: "a"}, LocalEndpoints: n, ServiceProxyHealthy: tc.proxy}
			if r.body != want {
				t.Errorf("body %+v, want %+v", r.body, want)
			}
			for _, k := range []string{"service", "localEndpoints", "serviceProxyHealthy"} {
				if _, ok := r.raw[k]; !ok {
					t.Errorf("body has no %q field: %v", k, r.raw)
				}
			}
		})
	}
}

func TestServiceHealthNilProxyHealthy(t *testing.T) {
	fn := newFakeNet()
	sh := NewServiceHealth(nil, WithListen(fn.listen))
	defer sh.Close()
	sh.SyncServices(map[model.ServiceName]uint16{svcA: 1})
	sh.SyncEndpoints(map[model.ServiceName]int{svcA: 1})
	if r := getURL(t, fn.url(t, 1)); r.code != http.StatusOK || !r.body.ServiceProxyHealthy {
		t.Errorf("nil proxyHealthy: %d %+v", r.code, r.body)
	}
}

func TestServiceHealthEndpointsAreDeclarative(t *testing.T) {
	fn := newFakeNet()
	sh := NewServiceHealth(nil, WithListen(fn.listen))
	defer sh.Close()
	sh.SyncServices(map[model.ServiceName]uint16{svcA: 1, svcB: 2})
	sh.SyncEndpoints(map[model.ServiceName]int{svcA: 1, svcB: 2})
	sh.SyncEndpoints(map[model.ServiceName]int{svcB: 5})
	if r := getURL(t, fn.url(t, 1)); r.code != http.StatusServiceUnavailable || r.body.LocalEndpoints != 0 {
		t.Errorf("a left out of SyncEndpoints: %d %+v", r.code, r.body)
	}
	if r := getURL(t, fn.url(t, 2)); r.code != http.StatusOK || r.body.LocalEndpoints != 5 || r.header.Get(HeaderEndpointWeight) != "5" {
		t.Errorf("b: %d %+v", r.code, r.body)
	}
	// Endpoints known before the server opens are served at once.
	sh.SyncEndpoints(map[model.ServiceName]int{svcC: 4})
	sh.SyncServices(map[model.ServiceName]uint16{svcA: 1, svcB: 2, svcC: 3})
	if r := getURL(t, fn.url(t, 3)); r.code != http.StatusOK || r.body.LocalEndpoints != 4 {
		t.Errorf("c: %d %+v", r.code, r.body)
	}
}

func TestServiceHealthOpenCloseRebind(t *testing.T) {
	fn := newFakeNet()
	sh := NewServiceHealth(nil, WithListen(fn.listen))
	defer sh.Close()
	sh.SyncEndpoints(map[model.ServiceName]int{svcA: 1, svcB: 1, svcC: 1})

	if errs := sh.SyncServices(map[model.ServiceName]uint16{svcA: 30001, svcB: 30002}); errs != nil {
		t.Fatal(errs)
	}
	a1, b1 := fn.listener(t, 30001), fn.listener(t, 30002)
	urlA1, urlB := fn.url(t, 30001), fn.url(t, 30002)
	if r := getURL(t, urlA1); r.body.Service.Name != "a" || r.code != http.StatusOK {
		t.Errorf("a: %d %+v", r.code, r.body)
	}
	if r := getURL(t, urlB); r.body.Service.Name != "b" {
		t.Errorf("b: %+v", r.body)
	}

	// Unchanged: no listen call, same listener.
	before := len(fn.listenCalls())
	if errs := sh.SyncServices(map[model.ServiceName]uint16{svcA: 30001, svcB: 30002}); errs != nil {
		t.Fatal(errs)
	}
	if n := len(fn.listenCalls()); n != before {
		t.Errorf("unchanged services: %d new listen calls", n-before)
	}
	if a1.closed.Load() || b1.closed.Load() {
		t.Error("unchanged services' listeners were closed")
	}

	// a moves to 30011, b goes away, c appears.
	if errs := sh.SyncServices(map[model.ServiceName]uint16{svcA: 30011, svcC: 30003}); errs != nil {
		t.Fatal(errs)
	}
	if !a1.closed.Load() || !refused(urlA1) {
		t.Error("a's old port is still open")
	}
	if !b1.closed.Load() || !refused(urlB) {
		t.Error("b's server is still open after b went away")
	}
	if r := getURL(t, fn.url(t, 30011)); r.body.Service.Name != "a" || r.code != http.StatusOK {
		t.Errorf("a on its new port: %d %+v", r.code, r.body)
	}
	if r := getURL(t, fn.url(t, 30003)); r.body.Service != (serviceRef{"other", "c"}) {
		t.Errorf("c: %+v", r.body)
	}
	want := map[model.ServiceName]uint16{svcA: 30011, svcC: 30003}
	if got := sh.Ports(); !equalPorts(got, want) {
		t.Errorf("Ports() = %v, want %v", got, want)
	}

	// Port 0 and an empty map close everything.
	sh.SyncServices(map[model.ServiceName]uint16{svcA: 0})
	if got := sh.Ports(); len(got) != 0 {
		t.Errorf("after removing all: %v", got)
	}
	if !fn.listener(t, 30011).closed.Load() || !fn.listener(t, 30003).closed.Load() {
		t.Error("listeners left open")
	}
}

func TestServiceHealthBindFailure(t *testing.T) {
	fn := newFakeNet()
	busy := fmt.Errorf("listen tcp :30002: bind: %w", syscall.EADDRINUSE)
	fn.setRefuse(30002, busy)
	sh := NewServiceHealth(nil, WithListen(fn.listen))
	defer sh.Close()
	sh.SyncEndpoints(map[model.ServiceName]int{svcA: 1, svcB: 1, svcC: 1})

	errs := sh.SyncServices(map[model.ServiceName]uint16{svcA: 30001, svcB: 30002, svcC: 30003})
	if len(errs) != 1 || !errors.Is(errs[svcB], syscall.EADDRINUSE) {
		t.Fatalf("errs = %v, want only b with EADDRINUSE", errs)
	}
	t.Logf("reported: %v", errs[svcB])
	for _, p := range []uint16{30001, 30003} {
		if r := getURL(t, fn.url(t, p)); r.code != http.StatusOK {
			t.Errorf("port %d: %d", p, r.code)
		}
	}
	if got := sh.Ports(); !equalPorts(got, map[model.ServiceName]uint16{svcA: 30001, svcC: 30003}) {
		t.Errorf("Ports() = %v", got)
	}

	// Still failing: reported again, nothing else touched.
	before := len(fn.listenCalls())
	errs = sh.SyncServices(map[model.ServiceName]uint16{svcA: 30001, svcB: 30002, svcC: 30003})
	if len(errs) != 1 || errs[svcB] == nil {
		t.Errorf("second sync errs = %v", errs)
	}
	if calls := fn.listenCalls()[before:]; len(calls) != 1 || calls[0] != ":30002" {
		t.Errorf("second sync listened on %v, want only :30002", calls)
	}

	// Once the port is free the next sync opens it.
	fn.setRefuse(30002, nil)
	if errs := sh.SyncServices(map[model.ServiceName]uint16{svcA: 30001, svcB: 30002, svcC: 30003}); errs != nil {
		t.Fatalf("after the port was freed: %v", errs)
	}
	if r := getURL(t, fn.url(t, 30002)); r.code != http.StatusOK || r.body.Service.Name != "b" {
		t.Errorf("b: %d %+v", r.code, r.body)
	}

	// Moving to a port that cannot be bound closes the old one and reports the new one.
	old := fn.listener(t, 30001)
	fn.setRefuse(30009, busy)
	errs = sh.SyncServices(map[model.ServiceName]uint16{svcA: 30009, svcB: 30002, svcC: 30003})
	if len(errs) != 1 || errs[svcA] == nil {
		t.Errorf("errs = %v", errs)
	}
	if !old.closed.Load() {
		t.Error("a's old listener still open")
	}
	if _, ok := sh.Ports()[svcA]; ok {
		t.Error("a listed as served")
	}
}

// Two Services swapping ports: both old listeners close before either new one opens.
func TestServiceHealthPortSwap(t *testing.T) {
	var mu sync.Mutex
	open := map[string]bool{}
	listen := func(network, addr string) (net.Listener, error) {
		mu.Lock()
		defer mu.Unlock()
		if open[addr] {
			return nil, fmt.Errorf("listen %s: %w", addr, syscall.EADDRINUSE)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		open[addr] = true
		return &closeHook{Listener: ln, onClose: func() { mu.Lock(); delete(open, addr); mu.Unlock() }}, nil
	}
	sh := NewServiceHealth(nil, WithListen(listen))
	defer sh.Close()
	if errs := sh.SyncServices(map[model.ServiceName]uint16{svcA: 1, svcB: 2}); errs != nil {
		t.Fatal(errs)
	}
	if errs := sh.SyncServices(map[model.ServiceName]uint16{svcA: 2, svcB: 1}); errs != nil {
		t.Fatalf("swap: %v", errs)
	}
	if got := sh.Ports(); !equalPorts(got, map[model.ServiceName]uint16{svcA: 2, svcB: 1}) {
		t.Errorf("Ports() = %v", got)
	}
}

// Two Services asking for one port: the first by name gets it, every time.
func TestServiceHealthSamePortIsDeterministic(t *testing.T) {
	for range 5 {
		sh := NewServiceHealth(nil) // real listeners
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := uint16(ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
		errs := sh.SyncServices(map[model.ServiceName]uint16{svcB: port, svcA: port, svcC: port})
		sh.Close()
		if _, ok := errs[svcA]; ok || len(errs) != 2 || errs[svcB] == nil || errs[svcC] == nil {
			t.Fatalf("errs = %v, want b and c to fail", errs)
		}
	}
}

type closeHook struct {
	net.Listener
	once    sync.Once
	onClose func()
}

func (c *closeHook) Close() error {
	c.once.Do(c.onClose)
	return c.Listener.Close()
}

// With the default listen function: a real port on all addresses, and a real conflict.
func TestServiceHealthRealListeners(t *testing.T) {
	sh := NewServiceHealth(nil)
	defer sh.Close()
	sh.SyncEndpoints(map[model.ServiceName]int{svcA: 2})

	held, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldPort := uint16(held.Addr().(*net.TCPAddr).Port)

	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freePort := uint16(free.Addr().(*net.TCPAddr).Port)
	free.Close()

	errs := sh.SyncServices(map[model.ServiceName]uint16{svcA: freePort, svcB: heldPort})
	if len(errs) != 1 || !errors.Is(errs[svcB], syscall.EADDRINUSE) {
		t.Fatalf("errs = %v, want b: address in use", errs)
	}
	r := getURL(t, fmt.Sprintf("http://127.0.0.1:%d/", freePort))
	if r.code != http.StatusOK || r.body.LocalEndpoints != 2 || r.header.Get(HeaderEndpointWeight) != "2" {
		t.Errorf("a: %d %+v", r.code, r.body)
	}

	// Closing and re-opening the same port right away works (no lingering bind).
	sh.SyncServices(nil)
	if !refused(fmt.Sprintf("http://127.0.0.1:%d/", freePort)) {
		t.Error("a still answering after removal")
	}
	if errs := sh.SyncServices(map[model.ServiceName]uint16{svcA: freePort}); errs != nil {
		t.Fatalf("re-open: %v", errs)
	}
	if r := getURL(t, fmt.Sprintf("http://127.0.0.1:%d/", freePort)); r.code != http.StatusOK {
		t.Errorf("re-opened a: %d", r.code)
	}
}

func TestServiceHealthClose(t *testing.T) {
	fn := newFakeNet()
	sh := NewServiceHealth(nil, WithListen(fn.listen))
	sh.SyncServices(map[model.ServiceName]uint16{svcA: 1, svcB: 2})
	sh.Close()
	if !fn.listener(t, 1).closed.Load() || !fn.listener(t, 2).closed.Load() {
		t.Error("Close left listeners open")
	}
	errs := sh.SyncServices(map[model.ServiceName]uint16{svcA: 1})
	if errs[svcA] == nil {
		t.Error("SyncServices after Close: want an error")
	}
	if len(sh.Ports()) != 0 {
		t.Error("servers after Close")
	}
	sh.Close() // idempotent
}

func TestServiceHealthConcurrent(t *testing.T) {
	fn := newFakeNet()
	var healthy atomic.Bool
	sh := NewServiceHealth(healthy.Load, WithListen(fn.listen))
	defer sh.Close()
	sh.SyncServices(map[model.ServiceName]uint16{svcA: 1})
	urlA := fn.url(t, 1)

	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(3)
	go func() {
		defer wg.Done()
		for i := range 100 {
			ports := map[model.ServiceName]uint16{svcA: 1, svcB: uint16(2 + i%3)}
			if i%4 == 0 {
				ports[svcC] = 10
			}
			sh.SyncServices(ports)
		}
	}()
	go func() {
		defer wg.Done()
		for i := range 500 {
			sh.SyncEndpoints(map[model.ServiceName]int{svcA: i % 3, svcB: i % 2})
			healthy.Store(i%5 != 0)
			_ = sh.Ports()
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			r := getURL(t, urlA)
			ok := r.body.LocalEndpoints > 0 && r.body.ServiceProxyHealthy
			if (r.code == http.StatusOK) != ok {
				t.Errorf("inconsistent answer %d %+v", r.code, r.body)
				return
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
}

func equalPorts(a, b map[model.ServiceName]uint16) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
