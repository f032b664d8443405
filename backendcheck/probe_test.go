package backendcheck

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

func endpointOf(t *testing.T, addr string) model.RSKey {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return model.RSKey{Addr: ap.Addr(), Port: ap.Port()}
}

func probe(p *NetProber, hc *model.HealthCheck, ep model.RSKey) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.Probe(ctx, hc, ep)
}

func TestNetProberTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := endpointOf(t, ln.Addr().String())
	p := NewNetProber()
	hc := &model.HealthCheck{Kind: model.CheckTCP}
	if err := probe(p, hc, ep); err != nil {
		t.Fatalf("listening port: %v", err)
	}
	ln.Close()
	if err := probe(p, hc, ep); err == nil {
		t.Fatal("closed port passed")
	}
}

func TestNetProberHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.WriteHeader(http.StatusNoContent)
		case "/moved":
			http.Redirect(w, r, "/broken", http.StatusFound)
		default:
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	ep := endpointOf(t, srv.Listener.Addr().String())
	p := NewNetProber()
	for path, healthy := range map[string]bool{"/ok": true, "/moved": true, "/broken": false} {
		err := probe(p, &model.HealthCheck{Kind: model.CheckHTTP, Path: path}, ep)
		if (err == nil) != healthy {
			t.Errorf("GET %s: err %v, want healthy %v", path, err, healthy)
		}
	}
}
