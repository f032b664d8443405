package bench

import (
	"io"

	"github.com/vishvananda/netlink"

	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// This file exports the bench's eyes on the kernel for kubeproxy-bench (the bench/kubeproxy
// module), so that kube-proxy's IPVS proxier is judged exactly as kube-ipvs is: through a
// netlink socket of the bench's own, never through the proxy's counters.

// Probe reads IPVS through its own netlink handle, one request per look.
type Probe struct{ p *probe }

// NewProbe opens the probe's netlink handle in the current network namespace.
func NewProbe() (*Probe, error) {
	p, err := newProbe()
	if err != nil {
		return nil, err
	}
	return &Probe{p}, nil
}

// Reals returns the real servers and weights of a virtual server (none if it is missing).
func (p *Probe) Reals(key model.VSKey) (map[model.RSKey]uint32, error) { return p.p.reals(key) }

// Exists reports whether the kernel has the virtual server.
func (p *Probe) Exists(key model.VSKey) (bool, error) { return p.p.exists(key) }

// LastKey is the largest virtual server key of n populated Services: kube-ipvs writes it
// last; for any proxy, it is one virtual server that must exist with all its real servers.
func LastKey(n int) model.VSKey { return (&runner{o: Options{N: n}}).lastKey() }

// PeakRSS is the process's peak resident set size (VmHWM).
func PeakRSS() uint64 { return vmHWM() }

// Host describes the machine: kernel release, CPUs and memory, as a Result records them.
func Host() (kernel string, memMiB int) { return kernelRelease(), memTotalMiB() }

// CountKernel reads the kernel's whole state back: virtual and real servers (one virtual
// server per request through a socket of its own), the addresses on link and the entries
// of every ipset. bad is the number of real servers not at weight 1.
func CountKernel(link string) (found KernelCounts, bad int, err error) {
	found.SetEntries = map[string]int{}
	if found.VirtualServers, found.RealServers, bad, err = countIPVS(); err != nil {
		return found, bad, err
	}
	l, err := netlink.LinkByName(link)
	if err != nil {
		return found, bad, err
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return found, bad, err
	}
	found.Addresses = len(addrs)
	s, err := ipset.NewKernel()
	if err != nil {
		return found, bad, err
	}
	defer s.Close()
	hs, err := s.ListHeaders()
	if err != nil {
		return found, bad, err
	}
	for _, h := range hs {
		found.SetEntries[string(h.Name)] = int(h.Entries)
	}
	return found, bad, nil
}

// countIPVS counts the kernel's virtual and real servers, one virtual server per request
// through a socket of its own; bad is the number of real servers not at weight 1 (every
// endpoint of the bench is ready).
func countIPVS() (vses, reals, bad int, err error) {
	k, err := ipvs.NewKernel()
	if err != nil {
		return 0, 0, 0, err
	}
	defer k.(io.Closer).Close()
	err = ipvs.EachVirtualServer(k, func() { vses, reals, bad = 0, 0, 0 },
		func(vs *model.VirtualServer) {
			vses++
			reals += len(vs.Reals)
			for _, w := range vs.Reals {
				if w != 1 {
					bad++
				}
			}
		})
	return vses, reals, bad, err
}
