package controller

import (
	"hash/maphash"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
)

// buildConfig is the proxy config a sync or a repair cycle builds Services with, and its key
// (configKey): two configs with the same key build the same state from the same objects.
type buildConfig struct {
	cfg *proxy.Config
	key uint64
}

// buildInputs are what a Service's desired state was last built from: the informers'
// cached Service and EndpointSlices (an informer replaces an object that changed, it never
// changes one in place, and the proxy never writes them) and the config's key.
//
// A repair cycle recomputes every Service, as a safety net for a change whose event never
// came; at 50,000 Services that was most of a cycle's allocation (146 MB), and so of the
// garbage collector's work while changes wait. A Service whose inputs are the very objects
// it was built from would build the same state, so the cycle passes it over (unchanged).
type buildInputs struct {
	svc    *corev1.Service
	slices []*discoveryv1.EndpointSlice
	config uint64
}

// noteBuilt records what name's state was just built from (st nil: the Service is gone).
func (c *Controller) noteBuilt(name model.ServiceName, st *model.ServiceState, in buildInputs) {
	if st == nil {
		delete(c.built, name)
		return
	}
	c.built[name] = in
}

// unchanged reports whether name's state was built from exactly in and needs no rebuild.
// Never for a Service with Problems (a conflict it lost may be won now: only a rebuild
// finds out) or with a backend health check (its verdicts, proxy.Config.Unhealthy, change
// in place and are not in the key).
func (c *Controller) unchanged(name model.ServiceName, in buildInputs) bool {
	prev := c.state.services[name]
	was, ok := c.built[name]
	if !ok || prev == nil || in.svc == nil || len(prev.Reasons) > 0 || prev.HealthCheck != nil {
		return false
	}
	return was.svc == in.svc && was.config == in.config && sameObjects(was.slices, in.slices)
}

// sameObjects reports whether a and b hold the same pointers, in any order (an index
// lists a Service's slices in no fixed order; a Service has one or a few).
func sameObjects[T any](a, b []*T) bool {
	if len(a) != len(b) {
		return false
	}
outer:
	for _, x := range a {
		for _, y := range b {
			if x == y {
				continue outer
			}
		}
		return false
	}
	return true
}

var configSeed = maphash.MakeSeed()

// configKey hashes every field of cfg that proxy.BuildService reads, but Unhealthy (see
// unchanged). Sets are hashed in any order (a sum of their members' hashes).
func configKey(cfg *proxy.Config) uint64 {
	var h maphash.Hash
	h.SetSeed(configSeed)
	for _, s := range []string{cfg.DefaultScheduler, cfg.NodeName, cfg.NodeZone} {
		h.WriteString(s)
		_ = h.WriteByte(0)
	}
	flags := byte(0)
	if cfg.NoSchedulers {
		flags |= 1
	}
	if cfg.NoHealthChecks {
		flags |= 2
	}
	_ = h.WriteByte(flags)
	for _, a := range cfg.NodeIPs {
		b := a.As16()
		_, _ = h.Write(b[:])
	}
	key := h.Sum64()
	var set uint64
	for s, on := range cfg.UnavailableSchedulers {
		if on {
			set += maphash.String(configSeed, s)
		}
	}
	key = key*31 + set
	set = 0
	for a, on := range cfg.HostAddrs {
		if on {
			set += maphash.Comparable[netip.Addr](configSeed, a)
		}
	}
	return key*31 + set
}
