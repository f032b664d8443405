// Package ipvsmode is the IPVS mode's dataplane: IPVS virtual servers (package ipvs), the
// Service addresses on kube-ipvs0 (package dummyif), the ipsets and constant iptables rules
// that filter and masquerade around them (packages firewall, ipset and iptables), and the
// conntrack entries of removed UDP endpoints (package conntrack). It owns the order of
// writes between them, so that no packet meets a half-built path:
//
//	set entries and rules -> addresses -> virtual servers -> unbound addresses -> old entries
//
// cmd/kube-ipvs and the scale bench build it with New; tests build it over fake kernels
// with NewWith.
package ipvsmode

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/internal/foreground"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
)

// Config is what the IPVS mode needs besides its kernel parts.
type Config struct {
	// Firewall configures the ipsets and rules (cluster CIDRs, masquerade-all, families).
	Firewall firewall.Config
	// ExcludeCIDRs are never cleaned up: virtual servers there that no Service wants are
	// left alone even when they look like the proxy's own (kube-proxy's ipvs.excludeCIDRs).
	ExcludeCIDRs []netip.Prefix
	// NodePortMin and NodePortMax bound the ports of NodePort virtual servers on node IPs
	// that a repair considers the proxy's own (--service-node-port-range).
	NodePortMin, NodePortMax uint16
	// VIPBinding is how the Service VIPs are made local through the dummy link.
	VIPBinding dummyif.Binding
	// Gate is the process's foreground gate, which the controller raises while a change
	// is applied: the repair's background listings park at it (nil: they never park).
	Gate *foreground.Gate
}

// Parts are the kernel reconcilers the mode drives.
type Parts struct {
	IPVS      *ipvs.Reconciler
	Addresses *dummyif.Reconciler
	Sets      *ipset.Reconciler
	Rules     *iptables.Runner
	Conntrack dataplane.Conntrack // nil: no conntrack clearing (tests)
	// Watcher hears of kube-ipvs0's drift (nil: none; every repair lists the addresses).
	Watcher VIPWatcher
}

// Dataplane is the IPVS mode. Only the controller's sync goroutine calls it.
type Dataplane struct {
	cfg  Config
	p    Parts
	fw   *firewallPart
	log  *slog.Logger
	tick time.Time // last drain check
	// cycle is the repair under way (BeginRepair, RepairStep); repaired says a whole
	// repair succeeded (the kernel is adopted), after which a repair may come in steps.
	cycle    *repairCycle
	repaired bool
	// listedEpoch is the watcher's subscription when kube-ipvs0 was last listed.
	listedEpoch uint64
}

var _ dataplane.Dataplane = (*Dataplane)(nil)

// New opens the kernel interfaces of the current network namespace: IPVS, whose removed
// TCP real servers drain for at most drainTimeout; the dummy link named dummyName; ipsets;
// iptables on backend ("" detects the node's).
func New(cfg Config, dummyName string, drainTimeout time.Duration, backend iptables.Backend, ct dataplane.Conntrack, log *slog.Logger) (*Dataplane, error) {
	if err := cfg.Firewall.Validate(); err != nil {
		return nil, err
	}
	k, err := ipvs.NewKernel()
	if err != nil {
		return nil, err
	}
	sk, err := ipset.NewKernel()
	if err != nil {
		return nil, err
	}
	// A second ipset socket for the periodic repair's background listings (see
	// ipset.SetsCheck): one socket cannot carry a dump and Apply's writes at once.
	lister, err := ipset.NewBackgroundKernel(cfg.Gate)
	if err != nil {
		return nil, err
	}
	sets := ipset.New(sk)
	sets.Lister, sets.Gate = lister, cfg.Gate
	// And a second IPVS socket, for the periodic repair's listing of the virtual servers
	// (see ipvs.Check).
	vsLister, err := ipvs.NewBackgroundKernel(cfg.Gate)
	if err != nil {
		return nil, err
	}
	vs := NewIPVS(k, drainTimeout)
	vs.Lister = vsLister
	return NewWith(cfg, Parts{
		IPVS:      vs,
		Addresses: dummyif.NewBinding(dummyName, cfg.VIPBinding, nil),
		Sets:      sets,
		Rules:     iptables.New(iptables.OSExec{}, iptables.Config{Backend: backend}),
		Conntrack: ct,
		Watcher:   vipWatcher(cfg.VIPBinding, dummyName),
	}, log), nil
}

// vipWatcher is the watcher of the VIPs' binding: the kernel's notifications say when a
// VIP's address or local route goes, or the link does (or, for routes, goes down), so that
// no repair cycle lists tens of thousands of them.
func vipWatcher(b dummyif.Binding, link string) VIPWatcher {
	return dummyif.NewWatcher(link, b)
}

// NewIPVS is the IPVS reconciler as the mode uses it. It shares the controller's virtual
// servers as its cache (ShareDesired): the controller builds a new VirtualServer for every
// change and never modifies one it passed.
func NewIPVS(k ipvs.Kernel, drainTimeout time.Duration) *ipvs.Reconciler {
	r := ipvs.NewReconciler(k)
	r.SetGracefulTermination(drainTimeout, nil)
	r.ShareDesired()
	return r
}

// NewWith builds the mode over given parts (fakes in tests); cfg.Firewall must be valid.
func NewWith(cfg Config, p Parts, log *slog.Logger) *Dataplane {
	return &Dataplane{cfg: cfg, p: p, fw: newFirewallPart(cfg.Firewall, p.Sets, p.Rules), log: log}
}

// Apply writes one sync's change, in the order the package doc gives.
// Each part's time goes into the result's Phases.
func (d *Dataplane) Apply(ch dataplane.Change) dataplane.Result {
	var res dataplane.Result
	var fw, addrs, vs time.Duration
	t := time.Now()
	lap := func(into *time.Duration) {
		now := time.Now()
		*into += now.Sub(t)
		t = now
	}
	for name, st := range ch.Services {
		d.fw.stage(name, st)
	}
	res.Merge(d.fw.applyAdditions())
	lap(&fw)
	res.Merge(addrResult(d.p.Addresses.Apply(ch.Bind, nil)))
	lap(&addrs)
	res.Merge(d.afterIPVS(d.p.IPVS.Apply(ch.VSes)))
	lap(&vs)
	res.Merge(addrResult(d.p.Addresses.Apply(nil, ch.Unbind)))
	lap(&addrs)
	res.Merge(d.fw.applyRemovals())
	lap(&fw)
	res.Phases.Firewall, res.Phases.Addresses, res.Phases.IPVS = fw, addrs, vs
	return res
}

// drainInterval is how often draining real servers are checked for remaining connections.
const drainInterval = time.Second

// Tick ends the drains whose connections are gone or whose time is up.
func (d *Dataplane) Tick() (dataplane.Result, time.Duration) {
	if d.p.IPVS.Draining() == 0 {
		return dataplane.Result{}, 0
	}
	if wait := drainInterval - time.Since(d.tick); wait > 0 {
		return dataplane.Result{}, wait
	}
	d.tick = time.Now()
	res := d.afterIPVS(d.p.IPVS.Drain())
	for k, e := range res.FailedVS {
		d.log.Error("checking a draining real server failed; will retry", "virtual_server", k, "err", e)
	}
	res.FailedVS = nil // the next tick checks again
	if res.Writes.IPVS > 0 {
		d.log.Info("drained real servers removed", "ipvs_writes", res.Writes.IPVS, "still_draining", d.p.IPVS.Draining())
	}
	if d.p.IPVS.Draining() == 0 {
		return res, 0
	}
	return res, drainInterval
}

// IPVS returns the IPVS reconciler (for the bench and tests).
func (d *Dataplane) IPVS() *ipvs.Reconciler { return d.p.IPVS }

// Sets returns the ipset reconciler (for the bench and tests).
func (d *Dataplane) Sets() *ipset.Reconciler { return d.p.Sets }
