package controller

import (
	"fmt"
	"net/netip"
	"sort"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// desiredState merges the per-Service desired states into the node's desired kernel state and
// turns one Service's change into the minimal set of kernel changes. It is pure bookkeeping.
//
// Invariants: every virtual server key has at most one owner (the first Service that claimed
// it; others that want it get a Problem and are retried when it is released); an address is
// bound while at least one Service wants it.
type desiredState struct {
	services   map[model.ServiceName]*model.ServiceState
	vsOwner    map[model.VSKey]model.ServiceName
	contenders map[model.VSKey]map[model.ServiceName]bool
	bindRefs   map[netip.Addr]int
}

func newDesiredState() *desiredState {
	return &desiredState{
		services:   map[model.ServiceName]*model.ServiceState{},
		vsOwner:    map[model.VSKey]model.ServiceName{},
		contenders: map[model.VSKey]map[model.ServiceName]bool{},
		bindRefs:   map[netip.Addr]int{},
	}
}

// change is what one Service update means for the kernel.
type change struct {
	vs      map[model.VSKey]*model.VirtualServer // nil value: delete
	bind    []netip.Addr
	unbind  []netip.Addr
	requeue []model.ServiceName // Services that may now claim a released virtual server
}

// update replaces the desired state of one Service (next == nil: the Service is gone) and
// returns the kernel changes. Virtual servers another Service owns are left out of next's
// state and reported as Problems on next.
func (d *desiredState) update(name model.ServiceName, next *model.ServiceState) change {
	ch := change{vs: map[model.VSKey]*model.VirtualServer{}}
	prev := d.services[name]

	// Claim or contest each wanted virtual server.
	if next != nil {
		for key := range next.VSes {
			owner, owned := d.vsOwner[key]
			if owned && owner != name {
				delete(next.VSes, key)
				if d.contenders[key] == nil {
					d.contenders[key] = map[model.ServiceName]bool{}
				}
				d.contenders[key][name] = true
				next.Reasons = append(next.Reasons, model.Problem{
					Reason:  "VirtualServerConflict",
					Message: fmt.Sprintf("%s is already served by Service %s; this Service does not get it until that one lets go", key, owner),
				})
				continue
			}
			d.vsOwner[key] = name
			if d.contenders[key] != nil {
				delete(d.contenders[key], name)
			}
		}
	}

	// Virtual servers: changed or new ones from next, released ones from prev.
	if next != nil {
		for key, vs := range next.VSes {
			if prev == nil || prev.VSes[key] == nil || !prev.VSes[key].Equal(vs) {
				ch.vs[key] = vs
			}
		}
	}
	if prev != nil {
		for key := range prev.VSes {
			if next != nil && next.VSes[key] != nil {
				continue
			}
			ch.vs[key] = nil
			delete(d.vsOwner, key)
			for c := range d.contenders[key] {
				ch.requeue = append(ch.requeue, c)
			}
			delete(d.contenders, key)
		}
	}
	// A Service that goes away also stops contending.
	if next == nil {
		for key, cs := range d.contenders {
			delete(cs, name)
			if len(cs) == 0 {
				delete(d.contenders, key)
			}
		}
	}

	// Addresses, reference-counted across Services (externalIPs and LB IPs may be shared).
	for a := range bindSet(next) {
		if prev == nil || !prev.Bind[a] {
			if d.bindRefs[a] == 0 {
				ch.bind = append(ch.bind, a)
			}
			d.bindRefs[a]++
		}
	}
	for a := range bindSet(prev) {
		if next == nil || !next.Bind[a] {
			d.bindRefs[a]--
			if d.bindRefs[a] <= 0 {
				delete(d.bindRefs, a)
				ch.unbind = append(ch.unbind, a)
			}
		}
	}
	sortAddrs(ch.bind)
	sortAddrs(ch.unbind)
	sort.Slice(ch.requeue, func(i, j int) bool { return ch.requeue[i].String() < ch.requeue[j].String() })

	if next == nil {
		delete(d.services, name)
	} else {
		d.services[name] = next
	}
	return ch
}

func bindSet(s *model.ServiceState) map[netip.Addr]bool {
	if s == nil {
		return nil
	}
	return s.Bind
}

// allVSes returns every desired virtual server.
func (d *desiredState) allVSes() map[model.VSKey]*model.VirtualServer {
	all := make(map[model.VSKey]*model.VirtualServer, len(d.vsOwner))
	for key, owner := range d.vsOwner {
		if s := d.services[owner]; s != nil && s.VSes[key] != nil {
			all[key] = s.VSes[key]
		}
	}
	return all
}

// allBinds returns every address that must be bound to the dummy link.
func (d *desiredState) allBinds() map[netip.Addr]bool {
	all := make(map[netip.Addr]bool, len(d.bindRefs))
	for a := range d.bindRefs {
		all[a] = true
	}
	return all
}

// ownerOf returns the Service that owns a virtual server key.
func (d *desiredState) ownerOf(key model.VSKey) (model.ServiceName, bool) {
	n, ok := d.vsOwner[key]
	return n, ok
}

// servicesBinding returns the Services that want an address bound.
func (d *desiredState) servicesBinding(a netip.Addr) []model.ServiceName {
	var out []model.ServiceName
	for n, s := range d.services {
		if s.Bind[a] {
			out = append(out, n)
		}
	}
	return out
}

func sortAddrs(a []netip.Addr) {
	sort.Slice(a, func(i, j int) bool { return a[i].Less(a[j]) })
}
