package backendcheck

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Prober runs one check of one endpoint; nil means healthy. It must return by ctx's
// deadline (the check's timeout).
type Prober interface {
	Probe(ctx context.Context, hc *model.HealthCheck, ep model.RSKey) error
}

// NetProber checks endpoints over the network of the process, which is the node's when
// kube-ipvs runs with hostNetwork: the path from this node to the pod, not the kubelet's.
type NetProber struct {
	dialer net.Dialer
	client *http.Client
}

// NewNetProber returns a prober that opens a new connection for every check (no keep-alive:
// a check must see whether the endpoint still accepts connections) and follows no redirect
// (a 3xx is an answer, and healthy).
func NewNetProber() *NetProber {
	p := &NetProber{}
	p.client = &http.Client{
		Transport: &http.Transport{DialContext: p.dialer.DialContext, DisableKeepAlives: true, Proxy: nil},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	return p
}

// Probe connects to ep (CheckTCP) or sends it GET hc.Path (CheckHTTP: 2xx and 3xx pass).
func (p *NetProber) Probe(ctx context.Context, hc *model.HealthCheck, ep model.RSKey) error {
	addr := netip.AddrPortFrom(ep.Addr, ep.Port).String()
	if hc.Kind != model.CheckHTTP {
		conn, err := p.dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+hc.Path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "kube-ipvs-health-check")
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP status %d", resp.StatusCode)
	}
	return nil
}
