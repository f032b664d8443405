package dataplane

import (
	"iter"
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Live is the controller's desired state as it is at the moment the dataplane reads it. A
// stepped repair reads it at every step, so that it judges the kernel against the changes
// applied since it began, not against a copy taken at its start. Only the sync goroutine
// reads it, and only during a call.
type Live struct {
	// Services are the resolved desired states (read-only).
	Services map[model.ServiceName]*model.ServiceState
	// VS is the desired virtual server of a key (nil: none). VSKeys walks every desired
	// key: unlike the rest of Live it may be walked after the call and on another
	// goroutine, as it takes the desired state's lock a chunk of keys at a time (the IPVS
	// check merges the keys with the kernel's listing in the background: at 70,000 virtual
	// servers under emulation, walking or copying them in one step held the sync loop for
	// hundreds of milliseconds). A key added or removed during the walk may or may not be
	// produced; every other one is, once.
	VS     func(model.VSKey) *model.VirtualServer
	VSKeys iter.Seq[model.VSKey]
	// VSes copies every desired virtual server, for a whole repair (nil: Snapshot walks
	// VSKeys).
	VSes func() map[model.VSKey]*model.VirtualServer
	// Bound says whether an address is to be bound on the node; Binds copies them all (for
	// the rare repair that must list the link's addresses again).
	Bound func(netip.Addr) bool
	Binds func() map[netip.Addr]bool
	// NodeIPs and ServiceCIDRs are as in Snapshot.
	NodeIPs      []netip.Addr
	ServiceCIDRs []netip.Prefix
	// Yield, when set, says that a change is waiting: a step checks it as it goes and ends
	// early (after some progress), so that the change waits for one kernel read, not for
	// the rest of the step.
	Yield func() bool
	// Whole asks BeginRepair to repair everything at once, as the first repair (which adopts
	// what the kernel holds: a restart) and every repair with --repair-step=0 do; the first
	// RepairStep then reports done. A mode repairs everything at once, asked or not, until
	// one such repair has succeeded.
	Whole bool
}

// Yielding reports whether l.Yield is set and says to yield.
func (l Live) Yielding() bool { return l.Yield != nil && l.Yield() }

// Snapshot copies the desired state live shows into a Snapshot, for a repair of everything
// at once.
func (l Live) Snapshot() Snapshot {
	if l.VSes != nil {
		return Snapshot{Services: l.Services, VSes: l.VSes(), Binds: l.Binds(), NodeIPs: l.NodeIPs, ServiceCIDRs: l.ServiceCIDRs}
	}
	vses := map[model.VSKey]*model.VirtualServer{}
	if l.VSKeys != nil {
		for k := range l.VSKeys {
			if vs := l.VS(k); vs != nil {
				vses[k] = vs
			}
		}
	}
	var binds map[netip.Addr]bool
	if l.Binds != nil {
		binds = l.Binds()
	}
	return Snapshot{Services: l.Services, VSes: vses, Binds: binds, NodeIPs: l.NodeIPs, ServiceCIDRs: l.ServiceCIDRs}
}
