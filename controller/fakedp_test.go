package controller

import (
	"context"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// fakeDP is a dataplane in maps: it keeps what the controller asked for and counts one
// write per virtual server or address changed. The kernel orders and repairs of a real mode
// are tested with that mode (package dataplane/ipvsmode, package iptproxy).
type fakeDP struct {
	vs        map[model.VSKey]*model.VirtualServer
	bound     map[netip.Addr]bool
	services  map[model.ServiceName]*model.ServiceState // the resolved states it was given
	failNext  map[model.VSKey]error                     // fail one virtual server's next write
	applyErr  error                                     // fail the next Apply as a whole
	repairErr error                                     // fail the next (whole) repair as a whole
	applies   []dataplane.Change
	repairs   int
	// cidrs are the last repair's Service CIDRs; other goroutines read them (Run tests).
	cidrs atomic.Pointer[[]netip.Prefix]
}

func newFakeDP() *fakeDP {
	return &fakeDP{vs: map[model.VSKey]*model.VirtualServer{}, bound: map[netip.Addr]bool{},
		services: map[model.ServiceName]*model.ServiceState{}, failNext: map[model.VSKey]error{}}
}

var _ dataplane.Dataplane = (*fakeDP)(nil)

func (f *fakeDP) Apply(ch dataplane.Change) dataplane.Result {
	f.applies = append(f.applies, ch)
	var res dataplane.Result
	for name, st := range ch.Services {
		f.stage(name, st)
	}
	res.Writes.Addresses += f.bind(ch.Bind, true)
	f.applyVSes(ch.VSes, &res)
	res.Writes.Addresses += f.bind(ch.Unbind, false)
	if f.applyErr != nil {
		res.Err, f.applyErr = f.applyErr, nil
	}
	return res
}

func (f *fakeDP) repairWhole(s dataplane.Snapshot) dataplane.Result {
	f.repairs++
	cidrs := slices.Clone(s.ServiceCIDRs)
	f.cidrs.Store(&cidrs)
	var res dataplane.Result
	f.services = map[model.ServiceName]*model.ServiceState{}
	for name, st := range s.Services {
		f.stage(name, st)
	}
	ch := map[model.VSKey]*model.VirtualServer{}
	for k := range f.vs {
		if s.VSes[k] == nil {
			ch[k] = nil
		}
	}
	for k, v := range s.VSes {
		ch[k] = v
	}
	f.applyVSes(ch, &res)
	var bind, unbind []netip.Addr
	for a := range s.Binds {
		bind = append(bind, a)
	}
	for a := range f.bound {
		if !s.Binds[a] {
			unbind = append(unbind, a)
		}
	}
	res.Writes.Addresses += f.bind(bind, true) + f.bind(unbind, false)
	if f.repairErr != nil {
		res.Err, f.repairErr = f.repairErr, nil
	}
	return res
}

func (f *fakeDP) Tick() (dataplane.Result, time.Duration) { return dataplane.Result{}, 0 }

// BeginRepair repairs everything: the fake's repair is one step (steppedDP cuts one not
// asked to be whole into steps).
func (f *fakeDP) BeginRepair(l dataplane.Live) dataplane.Result { return f.repairWhole(l.Snapshot()) }

func (f *fakeDP) RepairStep(dataplane.Live, int) (dataplane.Result, bool) {
	return dataplane.Result{}, true
}

// The fake hears no drift; its weights are in backendchecks_test.go.

func (f *fakeDP) WatchDrift(context.Context, func())          {}
func (f *fakeDP) RepairDrift(dataplane.Live) dataplane.Result { return dataplane.Result{} }
func (f *fakeDP) Watching() bool                              { return true }

func (f *fakeDP) stage(name model.ServiceName, st *model.ServiceState) {
	if st == nil {
		delete(f.services, name)
		return
	}
	f.services[name] = st
}

func (f *fakeDP) applyVSes(ch map[model.VSKey]*model.VirtualServer, res *dataplane.Result) {
	for k, v := range ch {
		if e := f.failNext[k]; e != nil {
			delete(f.failNext, k)
			res.FailVS(k, e)
			continue
		}
		old := f.vs[k]
		switch {
		case v == nil && old != nil:
			delete(f.vs, k)
			res.Writes.IPVS++
		case v != nil && (old == nil || !old.Equal(v)):
			f.vs[k] = v
			res.Writes.IPVS++
		}
	}
}

// bind adds (on) or removes addresses and returns how many changed.
func (f *fakeDP) bind(as []netip.Addr, on bool) int {
	n := 0
	for _, a := range as {
		if f.bound[a] != on {
			n++
		}
		if on {
			f.bound[a] = true
		} else {
			delete(f.bound, a)
		}
	}
	return n
}
