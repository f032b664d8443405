//go:build guest

package ipvs

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// scaleVS is virtual server i of the scale tests: 10.98.x.y:80 with n real servers.
func scaleVS(i, n int) *model.VirtualServer {
	v := &model.VirtualServer{
		Key:   model.VSKey{Addr: netip.AddrFrom4([4]byte{10, 98, byte(i >> 8), byte(i)}), Proto: model.TCP, Port: 80},
		Spec:  model.VSSpec{Scheduler: "rr"},
		Reals: map[model.RSKey]uint32{},
	}
	for j := range n {
		v.Reals[model.RSKey{Addr: netip.AddrFrom4([4]byte{10, 99, byte(j >> 8), byte(j)}), Port: uint16(8000 + i%1000)}] = 1
	}
	return v
}

// Thousands of writes in one Apply go out in batches of many per system call; the dumps that
// read them back span many netlink messages (the service table, and one virtual server
// with 2,000 real servers, far more than one 64 KiB read); and applying the same again
// writes nothing.
func TestGuestLargeBatchAndLargeDumps(t *testing.T) {
	k := newKernel(t)
	r := NewReconciler(k)
	want := map[model.VSKey]*model.VirtualServer{}
	keys := []model.VSKey{}
	for i := range 2000 {
		v := scaleVS(i, 5)
		want[v.Key] = v
		keys = append(keys, v.Key)
	}
	big := scaleVS(4000, 2000)
	want[big.Key] = big
	keys = append(keys, big.Key)
	t.Cleanup(func() {
		del := map[model.VSKey]*model.VirtualServer{}
		for _, k := range keys {
			del[k] = nil
		}
		r.Apply(del)
	})

	start := time.Now()
	res := r.Apply(want)
	expectClean(t, res, 2000*6+2001)
	t.Logf("%d writes in %s (%s per write)", res.Writes, time.Since(start), time.Since(start)/time.Duration(res.Writes))

	start = time.Now()
	all := listed(t, k)
	t.Logf("dumped %d virtual servers in %s", len(all), time.Since(start))
	for key, v := range want {
		if got := all[key]; got == nil || !got.Equal(v) {
			t.Fatalf("dump of %s: %d real servers, want %d", key, len(got.Reals), len(v.Reals))
		}
	}
	expectClean(t, resync(r, want, func(k model.VSKey) bool { return want[k] != nil }), 0)
}

// More failures in one batch than the socket's receive buffer holds answers for: the kernel
// drops answers (ENOBUFS). Every write is still accounted for, as failed or of unknown
// outcome, the socket carries no stale answer into the next exchange, and the reconciler
// re-reads what it could not know, so a retry completes the state.
func TestGuestReceiveBufferOverrun(t *testing.T) {
	k := newKernel(t)
	nk := k.(*netlinkKernel)
	if err := nk.g.setReceiveBuffer(4096); err != nil {
		t.Fatal(err)
	}

	// Directly: 300 real servers for virtual servers that do not exist.
	nk.StartBatch()
	for i := range 300 {
		if err := k.NewDestination(scaleVS(6000+i, 0).Key, model.RSKey{Addr: netip.MustParseAddr("10.99.0.1"), Port: 80}, 1); err != nil {
			t.Fatalf("queueing: %v", err)
		}
	}
	lost, failed := 0, 0
	n := nk.FlushBatch(func(i int, err error) {
		failed++
		switch {
		case errors.Is(err, unix.ENOBUFS):
			lost++
		case !errors.Is(err, ErrNotFound):
			t.Fatalf("write %d: %v, want not found or ENOBUFS", i, err)
		}
	})
	if n != 300 || failed != 300 {
		t.Fatalf("%d writes accounted for, %d failed; want 300 and 300", n, failed)
	}
	t.Logf("%d of 300 answers dropped by the kernel", lost)
	if lost == 0 {
		t.Error("a 4 KiB receive buffer held 300 answers: the overrun was not provoked")
	}
	// The next exchange gets its own answer, not a stale one.
	probe := scaleVS(7000, 1)
	if err := k.NewService(probe.Key, probe.Spec); err != nil {
		t.Fatalf("write after the overrun: %v", err)
	}
	deleteAtEnd(t, k, probe.Key)

	// Through the reconciler: 300 virtual servers with a scheduler the kernel lacks, next to
	// 20 good ones, in one Apply.
	r := NewReconciler(k)
	want := map[model.VSKey]*model.VirtualServer{}
	var keys []model.VSKey
	for i := range 320 {
		v := scaleVS(8000+i, 2)
		if i < 300 {
			v.Spec.Scheduler = "nosuch"
		}
		want[v.Key] = v
		keys = append(keys, v.Key)
	}
	deleteAtEnd(t, k, keys...)
	res := r.Apply(want)
	for i, key := range keys {
		// A good one sent with failing ones may have lost its acknowledgement: its outcome is
		// then unknown, and reported as such.
		err := res.Errors[key]
		if (i < 300 && err == nil) || (i >= 300 && err != nil && !errors.Is(err, unix.ENOBUFS)) {
			t.Errorf("%s: error %v", key, err)
		}
	}
	for i, key := range keys {
		got, ok := r.Applied(key)
		inKernel, err := ReadVirtualServer(k, key)
		switch {
		case i < 300 && (ok || !errors.Is(err, ErrNotFound)):
			t.Errorf("%s: cached %v, in the kernel %v (%v); want neither", key, got, inKernel, err)
		case i >= 300 && (!ok || err != nil || !got.Equal(normalize(inKernel))):
			t.Errorf("%s: cached %v, in the kernel %v (%v)", key, got, inKernel, err)
		}
	}
	for i := range 300 {
		want[keys[i]].Spec.Scheduler = "rr"
	}
	if res := r.Apply(want); len(res.Errors) != 0 || res.Writes != 300*3 {
		t.Errorf("the retry: %d writes (want 900), errors %v", res.Writes, res.Errors)
	}
	for _, key := range keys {
		mustEqual(t, k, want[key])
	}
	expectClean(t, r.Apply(want), 0)
}
