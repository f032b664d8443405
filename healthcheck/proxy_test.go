package healthcheck

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeClock is a settable clock, safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Step(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type proxyResponse struct {
	code        int
	contentType string
	raw         string
	body        map[string]any
}

func get(t *testing.T, h http.Handler, path string) proxyResponse {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	r := proxyResponse{code: rec.Code, contentType: rec.Header().Get("Content-Type"), raw: rec.Body.String()}
	if err := json.Unmarshal(rec.Body.Bytes(), &r.body); err != nil {
		t.Fatalf("GET %s: body %q is not JSON: %v", path, r.raw, err)
	}
	return r
}

func TestProxyHealthRules(t *testing.T) {
	const period = 30 * time.Second
	type step func(h *ProxyHealth, c *fakeClock)
	queued := func(ago time.Duration) step {
		return func(h *ProxyHealth, c *fakeClock) { h.QueuedUpdate(c.Now().Add(-ago)) }
	}
	updated := func(ago time.Duration) step {
		return func(h *ProxyHealth, c *fakeClock) { h.Updated(c.Now().Add(-ago)) }
	}
	failed := func(h *ProxyHealth, c *fakeClock) { h.SyncFailed(c.Now()) }
	wait := func(d time.Duration) step { return func(_ *ProxyHealth, c *fakeClock) { c.Step(d) } }
	deleting := func(h *ProxyHealth, _ *fakeClock) {
		h.SyncNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", DeletionTimestamp: &metav1.Time{Time: time.Unix(1, 0)}}})
	}
	tainted := func(h *ProxyHealth, _ *fakeClock) {
		h.SyncNode(&corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: TaintToBeDeleted, Effect: corev1.TaintEffectNoSchedule}}}})
	}
	nodeOK := func(h *ProxyHealth, _ *fakeClock) { h.SyncNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}) }
	nodeGone := func(h *ProxyHealth, _ *fakeClock) { h.SyncNode(nil) }

	tests := []struct {
		name           string
		steps          []step
		healthz, livez bool
	}{
		{"fresh: nothing attempted, nothing pending", nil, true, true},
		{"nothing attempted, a change pending", []step{queued(0)}, false, false},
		{"synced, nothing pending", []step{queued(time.Second), updated(0)}, true, true},
		{"synced, a young change pending", []step{updated(0), queued(0), wait(2 * period)}, true, true},
		{"synced, a change pending exactly 2 x period", []step{updated(0), queued(2 * period)}, true, true},
		{"synced, a change pending longer than 2 x period", []step{updated(0), queued(2*period + time.Nanosecond)}, false, false},
		{"a pending change ages past the limit", []step{updated(0), queued(0), wait(2*period + time.Millisecond)}, false, false},
		{"the oldest pending change counts", []step{updated(0), queued(2*period + time.Second), queued(0)}, false, false},
		{"an old change applied by a later sync", []step{queued(3 * period), updated(0)}, true, true},
		{"last sync failed", []step{updated(time.Second), failed}, false, false},
		{"a failed sync, then a successful one", []step{failed, wait(time.Second), updated(0)}, true, true},
		{"change queued after the sync's snapshot stays pending", []step{queued(10 * period), queued(4 * period), updated(5 * period)}, false, false},
		{"change queued during a recent sync is young", []step{queued(time.Minute), queued(time.Second), updated(2 * time.Second)}, true, true},
		{"change queued during a sync ages from the snapshot", []step{queued(time.Minute), queued(time.Second), updated(2 * time.Second), wait(2*period - time.Second)}, false, false},
		{"a later sync applies it", []step{queued(time.Minute), queued(time.Second), updated(2 * time.Second), wait(2 * period), updated(0)}, true, true},
		{"node being deleted", []step{deleting}, false, true},
		{"node tainted by the autoscaler", []step{tainted}, false, true},
		{"node object deleted", []step{nodeGone}, false, true},
		{"node deletion cancelled", []step{deleting, nodeOK}, true, true},
		{"node being deleted and stale", []step{deleting, updated(0), queued(3 * period)}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeClock()
			h := NewProxyHealth(period, WithClock(c.Now))
			for _, s := range tc.steps {
				s(h, c)
			}
			if got := h.Healthy(); got != tc.healthz {
				t.Errorf("Healthy() = %v, want %v", got, tc.healthz)
			}
			if got := h.Live(); got != tc.livez {
				t.Errorf("Live() = %v, want %v", got, tc.livez)
			}
			hz := get(t, h.Handler(), "/healthz")
			lz := get(t, h.Handler(), "/livez")
			for _, r := range []struct {
				path string
				resp proxyResponse
				want bool
			}{{"/healthz", hz, tc.healthz}, {"/livez", lz, tc.livez}} {
				wantCode := http.StatusOK
				if !r.want {
					wantCode = http.StatusServiceUnavailable
				}
				if r.resp.code != wantCode {
					t.Errorf("%s: status %d, want %d (body %s)", r.path, r.resp.code, wantCode, r.resp.raw)
				}
				if r.resp.body["healthy"] != r.want {
					t.Errorf("%s: healthy = %v, want %v", r.path, r.resp.body["healthy"], r.want)
				}
			}
		})
	}
}

func TestProxyHealthBody(t *testing.T) {
	c := newFakeClock()
	h := NewProxyHealth(time.Minute, WithClock(c.Now))
	syncAt := c.Now()
	h.Updated(syncAt)
	c.Step(1500 * time.Millisecond)

	hz := get(t, h.Handler(), "/healthz")
	if hz.contentType != "application/json" {
		t.Errorf("Content-Type = %q", hz.contentType)
	}
	want := map[string]any{
		"lastUpdated":  "2026-03-04T05:06:07.123456789Z",
		"currentTime":  "2026-03-04T05:06:08.623456789Z",
		"nodeEligible": true,
		"healthy":      true,
	}
	if !equalJSON(hz.body, want) {
		t.Errorf("/healthz body = %s, want %v", hz.raw, want)
	}
	for k, v := range want {
		if s, ok := v.(string); ok {
			if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
				t.Errorf("%s %q: %v", k, s, err)
			}
		}
	}

	lz := get(t, h.Handler(), "/livez")
	delete(want, "nodeEligible")
	if !equalJSON(lz.body, want) {
		t.Errorf("/livez body = %s, want %v (no nodeEligible)", lz.raw, want)
	}
	if lz.contentType != "application/json" {
		t.Errorf("/livez Content-Type = %q", lz.contentType)
	}

	h.SetNodeDeleting(true)
	hz = get(t, h.Handler(), "/healthz")
	if hz.body["nodeEligible"] != false || hz.body["healthy"] != false || hz.code != http.StatusServiceUnavailable {
		t.Errorf("deleting node: /healthz %d %s", hz.code, hz.raw)
	}
	if lz := get(t, h.Handler(), "/livez"); lz.code != http.StatusOK || lz.body["healthy"] != true {
		t.Errorf("deleting node: /livez %d %s", lz.code, lz.raw)
	}
}

func TestProxyHealthBodyBeforeFirstSync(t *testing.T) {
	c := newFakeClock()
	h := NewProxyHealth(time.Minute, WithClock(c.Now))
	hz := get(t, h.Handler(), "/healthz")
	if got := hz.body["lastUpdated"]; got != "0001-01-01T00:00:00Z" {
		t.Errorf("lastUpdated before any sync = %v", got)
	}
}

func TestProxyHealthLastUpdatedKeepsLastSuccess(t *testing.T) {
	c := newFakeClock()
	h := NewProxyHealth(time.Minute, WithClock(c.Now))
	first := c.Now()
	h.Updated(first)
	c.Step(time.Second)
	h.SyncFailed(c.Now())
	hz := get(t, h.Handler(), "/healthz")
	if hz.body["lastUpdated"] != first.Format(time.RFC3339Nano) {
		t.Errorf("lastUpdated after a failure = %v, want the last success %v", hz.body["lastUpdated"], first)
	}
	// An out-of-order Updated does not move lastUpdated back.
	h.Updated(first.Add(-time.Hour))
	if hz := get(t, h.Handler(), "/healthz"); hz.body["lastUpdated"] != first.Format(time.RFC3339Nano) {
		t.Errorf("lastUpdated moved back to %v", hz.body["lastUpdated"])
	}
}

func TestProxyHealthOtherPaths(t *testing.T) {
	h := NewProxyHealth(time.Minute)
	rec := httptest.NewRecorder()
	h.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("/metrics: %d, want 404", rec.Code)
	}
}

func TestProxyHealthDefaultSyncPeriod(t *testing.T) {
	c := newFakeClock()
	h := NewProxyHealth(0, WithClock(c.Now))
	h.Updated(c.Now())
	h.QueuedUpdate(c.Now().Add(-59 * time.Second))
	if !h.Healthy() {
		t.Error("59s-old change with the default 30s period: want healthy")
	}
	h.QueuedUpdate(c.Now().Add(-61 * time.Second))
	if h.Healthy() {
		t.Error("61s-old change with the default 30s period: want unhealthy")
	}
}

// A change queued while a long repair runs waits for it: the limit grows by twice the last
// repair's duration, so a large cluster's proxy is not restarted for being slow, while a
// change older than that still fails the check.
func TestProxyHealthStalenessAllowsForTheRepairsDuration(t *testing.T) {
	c := newFakeClock()
	h := NewProxyHealth(30*time.Second, WithClock(c.Now))
	h.Updated(c.Now())
	h.QueuedUpdate(c.Now())
	c.Step(90 * time.Second)
	if h.Live() {
		t.Fatal("a 90s-old change with a 30s period and quick repairs: want not live")
	}
	h.FullSyncTook(40 * time.Second) // limit 60s + 80s
	if !h.Live() {
		t.Error("a 90s-old change after a 40s repair: want live")
	}
	c.Step(51 * time.Second)
	if h.Live() {
		t.Error("a 141s-old change after a 40s repair: want not live")
	}
	h.FullSyncTook(time.Second) // the repair became quick again: back to about 2 x period
	c.Step(-77 * time.Second)   // 64s old; the limit is 60s + 2s
	if h.Live() {
		t.Error("a 64s-old change after a 1s repair: want not live")
	}
}

func equalJSON(got map[string]any, want map[string]any) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

func TestProxyHealthServe(t *testing.T) {
	var addr net.Addr
	var mu sync.Mutex
	listen := func(network, a string) (net.Listener, error) {
		if a != "0.0.0.0:10256" {
			return nil, errors.New("unexpected address " + a)
		}
		ln, err := net.Listen(network, "127.0.0.1:0")
		if err == nil {
			mu.Lock()
			addr = ln.Addr()
			mu.Unlock()
		}
		return ln, err
	}
	h := NewProxyHealth(time.Minute, WithListen(listen))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, DefaultProxyHealthAddress) }()

	var url string
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		if addr != nil {
			url = "http://" + addr.String()
		}
		return addr != nil
	})
	resp, err := http.Get(url + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"healthy":true`) {
		t.Errorf("GET /livez: %d %s", resp.StatusCode, body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if _, err := http.Get(url + "/livez"); err == nil {
		t.Error("server still answering after shutdown")
	}
}

func TestProxyHealthServeListenError(t *testing.T) {
	boom := errors.New("address in use")
	h := NewProxyHealth(time.Minute, WithListen(func(string, string) (net.Listener, error) { return nil, boom }))
	if err := h.Serve(context.Background(), ":1"); !errors.Is(err, boom) {
		t.Errorf("Serve = %v, want %v", err, boom)
	}
}

func TestProxyHealthServeRealListener(t *testing.T) {
	h := NewProxyHealth(time.Minute)
	// Take a free port, release it and serve there with the default listen function.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, addr) }()
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func TestProxyHealthConcurrent(t *testing.T) {
	c := newFakeClock()
	h := NewProxyHealth(time.Second, WithClock(c.Now))
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				switch (i + j) % 5 {
				case 0:
					h.QueuedUpdate(c.Now())
				case 1:
					h.Updated(c.Now())
				case 2:
					h.SyncFailed(c.Now())
				case 3:
					h.SetNodeDeleting(j%2 == 0)
				case 4:
					c.Step(time.Millisecond)
				}
				_ = h.Healthy()
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := srv.Client()
			for range 50 {
				for _, p := range []string{"/healthz", "/livez"} {
					resp, err := client.Get(srv.URL + p)
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Every answer is reported with its path and the status code the client got (kube-proxy's
// kubeproxy_proxy_healthz_total and _livez_total count them).
func TestProxyHealthOnServed(t *testing.T) {
	c := newFakeClock()
	h := NewProxyHealth(time.Minute, WithClock(c.Now))
	type answer struct {
		livez bool
		code  int
	}
	var got []answer
	h.OnServed(func(livez bool, code int) { got = append(got, answer{livez, code}) })
	h.Updated(c.Now())
	get(t, h.Handler(), "/healthz")
	h.SetNodeDeleting(true)
	get(t, h.Handler(), "/healthz")
	get(t, h.Handler(), "/livez")
	want := []answer{{false, http.StatusOK}, {false, http.StatusServiceUnavailable}, {true, http.StatusOK}}
	if !slices.Equal(got, want) {
		t.Errorf("reported %v, want %v", got, want)
	}
}
