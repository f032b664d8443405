package ipvs

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// A handover encodes and decodes every kind of virtual server exactly; anything but a whole
// handover of this version is refused.
func TestHandoverRoundTrip(t *testing.T) {
	fw := model.VSKey{Addr: netip.IPv4Unspecified(), FWMark: 7}
	in := changes(
		withSpec(vs(kA, "sh", "10.244.0.1:8080", 1, "10.244.0.2:8080", 0),
			model.VSSpec{Scheduler: "sh", Flags: model.FlagSchedFallbk | model.FlagPersistent, Timeout: 120}),
		vs(kB, "rr"),
		vs(k6, "wrr", "[fd00:244::1]:8080", 3),
		vs(fw, "lc", "10.244.0.9:80", 2),
	)
	var buf bytes.Buffer
	if err := WriteHandover(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadHandover(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("%d virtual servers back, want %d", len(out), len(in))
	}
	for key, v := range in {
		if got := out[key]; got == nil || got.Spec != v.Spec || !got.Equal(v) {
			t.Errorf("%s: got %v, want %v", key, got, v)
		}
	}
	for _, bad := range [][]byte{nil, buf.Bytes()[:len(buf.Bytes())-3], append([]byte("KIPVSHO9"), buf.Bytes()[8:]...)} {
		if _, err := ReadHandover(bytes.NewReader(bad)); err == nil {
			t.Errorf("a handover of %d bytes (of %d) was taken", len(bad), buf.Len())
		}
	}
}

// A restart with a handover lists the services and reads the real servers only of virtual
// servers the handover does not hold with the listed spec: a matching kernel costs one
// listing and no write; what changed in the API meanwhile is written; a spec changed behind
// the proxy's back is read and repaired; a virtual server deleted meanwhile is created
// again. Real servers changed behind its back under an unchanged spec are what it trusts:
// the next Resync, without a handover, reads them and repairs them.
func TestResyncWithAHandoverReadsOnlyWhatItCannotTrust(t *testing.T) {
	f := NewFakeKernel()
	a := vs(kA, "rr", "10.244.0.1:8080", 1, "10.244.0.2:8080", 1)
	b := vs(kB, "rr", "10.244.0.5:53", 1)
	c := vs(kC, "rr", "10.244.0.7:8443", 1)
	d := vs(kD, "rr", "10.244.0.8:80", 1)
	before := NewReconciler(f)
	before.ShareDesired()
	expectClean(t, before.Apply(changes(a, b, c, d)), 9)
	var buf bytes.Buffer
	if err := WriteHandover(&buf, before.Handover()); err != nil {
		t.Fatal(err)
	}
	handover, err := ReadHandover(&buf)
	if err != nil {
		t.Fatal(err)
	}

	// Between the two processes: b's scheduler and d's real server changed behind the
	// proxy's back, c deleted; in the API, a gained an endpoint.
	f.Put(withSpec(b, model.VSSpec{Scheduler: "lc"}))
	f.Put(vs(kD, "rr", "10.244.0.99:80", 1))
	f.Drop(kC)
	a2 := vs(kA, "rr", "10.244.0.1:8080", 1, "10.244.0.2:8080", 1, "10.244.0.3:8080", 1)
	f.TakeOps()

	after := NewReconciler(f)
	after.ShareDesired()
	after.TakeHandover(handover)
	desired := changes(a2, b, c, d)
	res := resync(after, desired, owned("10.96.0.0/16"))
	expectClean(t, res, 4) // a's new real server; b's spec; c and its real server
	ops := f.TakeOps()
	if ops[0] != "list-services" || !strings.HasPrefix(ops[1], "get-reals "+kB.String()) || strings.HasPrefix(ops[2], "get-reals") {
		t.Errorf("kernel calls %q; want the listing, then b's real servers alone read", ops)
	}
	if n := after.HandoverReads(); n != 1 {
		t.Errorf("HandoverReads() = %d, want 1 (b)", n)
	}
	expectDump(t, f, a2, b, c, vs(kD, "rr", "10.244.0.99:80", 1))

	// The next Resync reads everything: d is repaired.
	expectClean(t, resync(after, desired, owned("10.96.0.0/16")), 2)
	expectDump(t, f, a2, b, c, d)
	if n := after.HandoverReads(); n != 1 {
		t.Errorf("HandoverReads() = %d after a Resync without a handover, want the last one's 1", n)
	}
}

// A handover the kernel cannot be listed with (the listing fails) is dropped: the Resync
// reads the kernel whole.
func TestResyncWithAHandoverFallsBackWhenTheListingFails(t *testing.T) {
	f := NewFakeKernel()
	a := vs(kA, "rr", "10.244.0.1:8080", 1)
	f.Put(vs(kA, "rr", "10.244.0.9:8080", 1)) // not what the handover says
	listings := 0
	f.Fail = func(op string, _ model.VSKey) error {
		if op == "list-services" {
			if listings++; listings == 1 {
				return ErrDumpInterrupted
			}
		}
		return nil
	}
	r := NewReconciler(f)
	r.TakeHandover(changes(a))
	expectClean(t, resync(r, changes(a), owned("10.96.0.0/16")), 2)
	expectDump(t, f, a)
}
