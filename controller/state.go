package controller

import (
	"fmt"
	"net/netip"
	"sort"

	"github.com/kube-ipvs/kube-ipvs/metrics"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
)

// desiredState merges the per-Service desired states into the node's desired kernel state and
// turns one Service's change into the minimal set of kernel changes. It is pure bookkeeping.
//
// Invariants: every virtual server key has at most one owner (the first Service that claimed
// it; others that want it get a Problem and are retried when it is released); an address is
// bound while at least one Service wants it.
//
// Everything a sync needs per change is kept up to date here by update, so that an
// incremental sync costs the same with 100 Services as with 100,000: nothing on that path
// copies or walks the whole state (allVSes and allBinds are for full syncs only).
type desiredState struct {
	services   map[model.ServiceName]*model.ServiceState
	vsOwner    map[model.VSKey]model.ServiceName
	contenders map[model.VSKey]map[model.ServiceName]bool
	bindRefs   map[netip.Addr]int
	// reals is the number of real servers over every owned virtual server.
	reals int
	// noLocal counts, per family, the Services whose Local traffic policies have endpoints
	// in the cluster but none on this node (model.ServiceState.NoLocal).
	noLocal [2]metrics.NoLocalEndpoints
	// healthChecked are the Services with a health-check node port: usually a handful, so
	// the health servers are synced from them rather than from every Service.
	healthChecked map[model.ServiceName]*model.ServiceState
}

func newDesiredState() *desiredState {
	return &desiredState{
		services:      map[model.ServiceName]*model.ServiceState{},
		vsOwner:       map[model.VSKey]model.ServiceName{},
		contenders:    map[model.VSKey]map[model.ServiceName]bool{},
		bindRefs:      map[netip.Addr]int{},
		healthChecked: map[model.ServiceName]*model.ServiceState{},
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

	// Virtual servers: changed or new ones from next, released ones from prev.
	if next != nil {
		d.claim(name, next)
		d.changedVSes(&ch, prev, next)
	}
	if prev != nil {
		d.release(&ch, prev, next)
	}
	if next == nil {
		d.stopContending(name)
	}
	d.rebind(&ch, prev, next)
	sort.Slice(ch.requeue, func(i, j int) bool { return ch.requeue[i].String() < ch.requeue[j].String() })

	d.reals += countReals(next) - countReals(prev)
	d.countNoLocal(prev, -1)
	d.countNoLocal(next, 1)
	if next == nil {
		delete(d.services, name)
	} else {
		d.services[name] = next
	}
	if next != nil && next.HealthCheckNodePort != 0 {
		d.healthChecked[name] = next
	} else {
		delete(d.healthChecked, name)
	}
	return ch
}

// countNoLocal adds s's Local policies without a local endpoint to noLocal, times sign.
func (d *desiredState) countNoLocal(s *model.ServiceState, sign int) {
	if s == nil {
		return
	}
	for f, gap := range s.NoLocal {
		if gap.Internal {
			d.noLocal[f].Internal += sign
		}
		if gap.External {
			d.noLocal[f].External += sign
		}
	}
}

// claim takes each virtual server next wants that no other Service owns, and contests the
// others: they leave next's state, with a Problem, until their owner lets go.
func (d *desiredState) claim(name model.ServiceName, next *model.ServiceState) {
	for key := range next.VSes {
		owner, owned := d.vsOwner[key]
		if owned && owner != name {
			delete(next.VSes, key)
			if d.contenders[key] == nil {
				d.contenders[key] = map[model.ServiceName]bool{}
			}
			d.contenders[key][name] = true
			next.Reasons = append(next.Reasons, model.Problem{
				Reason:  proxy.ReasonVirtualServerConflict,
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

// changedVSes adds to ch the virtual servers of next that are new or differ from prev's.
func (d *desiredState) changedVSes(ch *change, prev, next *model.ServiceState) {
	for key, vs := range next.VSes {
		var old *model.VirtualServer
		if prev != nil {
			old = prev.VSes[key]
		}
		if old != nil && old.Equal(vs) {
			// Unchanged: keep the object the IPVS reconciler may already hold as its
			// cache, and let the new one go (a full sync rebuilds every Service).
			if old.PortName == vs.PortName && old.Kind == vs.Kind {
				next.VSes[key] = old
			}
			continue
		}
		ch.vs[key] = vs
	}
}

// release deletes the virtual servers of prev that next (nil: gone) no longer has, and
// requeues the Services that contended for them.
func (d *desiredState) release(ch *change, prev, next *model.ServiceState) {
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

// stopContending drops a Service that went away from every contest (this walks only the
// contended keys, normally none).
func (d *desiredState) stopContending(name model.ServiceName) {
	for key, cs := range d.contenders {
		delete(cs, name)
		if len(cs) == 0 {
			delete(d.contenders, key)
		}
	}
}

// rebind adds to ch the addresses to bind and unbind, reference-counted across Services
// (externalIPs and LB IPs may be shared).
func (d *desiredState) rebind(ch *change, prev, next *model.ServiceState) {
	for _, a := range bindList(next) {
		if prev == nil || !prev.Binds(a) {
			if d.bindRefs[a] == 0 {
				ch.bind = append(ch.bind, a)
			}
			d.bindRefs[a]++
		}
	}
	for _, a := range bindList(prev) {
		if next == nil || !next.Binds(a) {
			d.bindRefs[a]--
			if d.bindRefs[a] <= 0 {
				delete(d.bindRefs, a)
				ch.unbind = append(ch.unbind, a)
			}
		}
	}
	sortAddrs(ch.bind)
	sortAddrs(ch.unbind)
}

// countReals is the number of real servers over a Service's (owned) virtual servers.
func countReals(s *model.ServiceState) int {
	if s == nil {
		return 0
	}
	n := 0
	for _, vs := range s.VSes {
		n += len(vs.Reals)
	}
	return n
}

// desiredVS returns the desired state of one virtual server, nil if no Service wants it.
func (d *desiredState) desiredVS(key model.VSKey) *model.VirtualServer {
	owner, ok := d.vsOwner[key]
	if !ok {
		return nil
	}
	if s := d.services[owner]; s != nil {
		return s.VSes[key]
	}
	return nil
}

// bound reports whether some Service wants the address bound.
func (d *desiredState) bound(a netip.Addr) bool { return d.bindRefs[a] > 0 }

func bindList(s *model.ServiceState) []netip.Addr {
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
		if s.Binds(a) {
			out = append(out, n)
		}
	}
	return out
}

func sortAddrs(a []netip.Addr) {
	sort.Slice(a, func(i, j int) bool { return a[i].Less(a[j]) })
}
