//go:build guest

package ipvs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// The text table and netlink list the same: every field of crossCheckVSes, with a foreign
// firewall-mark service (skipped by both) in the table.
func TestGuestProcTableListsAsNetlinkDoes(t *testing.T) {
	k := newKernel(t)
	nk := k.(*netlinkKernel)
	if nk.proc == nil {
		t.Fatalf("%s could not be opened in the guest", procIPVSPath)
	}
	want := crossCheckVSes()
	for _, v := range want {
		deleteAtEnd(t, k, v.Key)
	}
	expectClean(t, NewReconciler(k).Apply(changes(want...)), 7+11)
	ipvsadm(t, "-A", "-f", "77", "-s", "rr")
	ipvsadm(t, "-a", "-f", "77", "-r", "10.244.30.9:80", "-m")
	t.Cleanup(func() { ipvsadm(t, "-D", "-f", "77") })

	served := nk.procServed
	fromProc := listed(t, k)
	if nk.procServed != served+1 {
		t.Fatalf("the listing did not come from the text table (served %d -> %d, failures %d)", served, nk.procServed, nk.procFails)
	}
	nk.procFails = procMaxFails // netlink only from here
	fromNetlink := listed(t, k)
	nk.procFails = 0
	if len(fromProc) != len(fromNetlink) {
		t.Errorf("the table lists %d virtual servers, netlink %d", len(fromProc), len(fromNetlink))
	}
	for key, n := range fromNetlink {
		if p := fromProc[key]; p == nil || !p.Equal(n) {
			t.Errorf("%s: the table has %v, netlink %v", key, p, n)
		}
	}
	for _, v := range want {
		if got := fromProc[v.Key]; got == nil || !got.Equal(v) {
			t.Errorf("%s: the table has %v, want %v", v.Key, got, v)
		}
	}
}

// A table that cannot be read as expected costs one attempt: the listing is still right,
// read over netlink, and after procMaxFails listings the table is no longer tried.
func TestGuestProcTableFallsBackToNetlink(t *testing.T) {
	k := newKernel(t)
	nk := k.(*netlinkKernel)
	a := vs(key("10.97.31.1:80", model.TCP), "rr", "10.244.31.1:80", 1, "10.244.31.2:80", 2)
	deleteAtEnd(t, k, a.Key)
	expectClean(t, NewReconciler(k).Apply(changes(a)), 3)

	for name, text := range map[string]string{
		"garbage":       "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\nTCP  nonsense rr\n",
		"missing a VS":  "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n",
		"an unknown VS": "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\nTCP  0A61FF01:0050 rr \n",
	} {
		path := filepath.Join(t.TempDir(), "ip_vs")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		real := nk.proc
		nk.proc, nk.procFails = openProcTable(path), 0
		got := listed(t, k)
		nk.proc.close()
		nk.proc = real
		if g := got[a.Key]; g == nil || !g.Equal(a) {
			t.Errorf("%s: listed %v, want %v", name, g, a)
		}
		if nk.procFails != 1 {
			t.Errorf("%s: %d failures of the table counted, want 1", name, nk.procFails)
		}
	}
	nk.procFails = procMaxFails
	served := nk.procServed
	listed(t, k)
	if nk.procServed != served {
		t.Error("the table was read after failing procMaxFails times")
	}
	nk.procFails = 0
}
