//go:build guest

package ipvs

import (
	"fmt"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/foreground"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// A dump through a background handle (the repair's Lister) parks at the foreground gate
// while it is up and lists the whole table once it is lowered; one through the sync loop's
// own handle never parks, or a change's sync would wait for itself.
func TestGuestBackgroundListingParks(t *testing.T) {
	const n = 600 // virtual servers: many dump datagrams
	k := newKernel(t)
	gate := foreground.NewGateHolding(time.Hour) // parked until lowered, however slow the guest
	bg, err := NewBackgroundKernel(gate)
	if err != nil {
		t.Fatalf("NewBackgroundKernel: %v", err)
	}
	t.Cleanup(func() { bg.(interface{ Close() error }).Close() })
	var all []*model.VirtualServer
	for i := range n {
		all = append(all, vs(key(fmt.Sprintf("10.98.%d.%d:80", i>>8, i&0xff), model.TCP), "rr", "10.244.30.1:80", 1))
	}
	desired := changes(all...)
	for key := range desired {
		deleteAtEnd(t, k, key)
	}
	expectClean(t, NewReconciler(k).Apply(desired), 2*n)
	t.Cleanup(gate.Lower)

	gate.Raise()
	before := gate.Parks()
	if got, err := k.(ServiceLister).ListServices(); err != nil || len(got) < n {
		t.Fatalf("the loop's handle listed %d virtual servers (%v), want at least %d", len(got), err, n)
	}
	if p := gate.Parks() - before; p != 0 {
		t.Fatalf("a dump through the loop's own handle parked %d times", p)
	}

	type listed struct {
		specs map[model.VSKey]model.VSSpec
		err   error
	}
	out := make(chan listed, 1)
	go func() {
		specs, err := bg.(ServiceLister).ListServices()
		out <- listed{specs, err}
	}()
	for deadline := time.Now().Add(10 * time.Second); gate.Parks() == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a background dump with the gate up never parked")
		}
	}
	gate.Lower()
	l := <-out
	if l.err != nil {
		t.Fatalf("the background dump: %v", l.err)
	}
	for key := range desired {
		if _, ok := l.specs[key]; !ok {
			t.Fatalf("the background dump lacks %s", key)
		}
	}
}
