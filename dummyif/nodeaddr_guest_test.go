//go:build guest

package dummyif

import (
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// NodeAddresses lists every interface's addresses but those of the VIP link, in the real
// kernel: an address that is also on another link still counts as the node's.
func TestGuestNodeAddressesSkipTheVIPLink(t *testing.T) {
	const vipLink, hostLink = "kt-na-vip", "kt-na-host"
	fresh(t, vipLink)
	fresh(t, hostLink)
	if err := New(vipLink).EnsureLink(); err != nil {
		t.Fatal(err)
	}
	addVeth(t, hostLink, "kt-na-peer")
	addAddr(t, vipLink, "10.96.53.1/32", 0)
	addAddr(t, vipLink, "fd00:96:53::1/128", unix.IFA_F_NODAD)
	addAddr(t, vipLink, "10.96.53.5/32", 0) // on both links
	addAddr(t, hostLink, "10.96.53.5/24", 0)
	addAddr(t, hostLink, "fd00:96:53::5/64", unix.IFA_F_NODAD)

	has := func(list []netip.Addr, a string) bool { return slices.Contains(list, netip.MustParseAddr(a)) }
	got, err := NodeAddresses(vipLink)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"10.96.53.5", "fd00:96:53::5", "127.0.0.1"} {
		if !has(got, a) {
			t.Errorf("NodeAddresses(%s) lacks the node address %s: %v", vipLink, a, got)
		}
	}
	for _, a := range []string{"10.96.53.1", "fd00:96:53::1"} {
		if has(got, a) {
			t.Errorf("NodeAddresses(%s) holds the VIP %s: %v", vipLink, a, got)
		}
	}
	if n := len(slices.DeleteFunc(slices.Clone(got), func(a netip.Addr) bool { return a != netip.MustParseAddr("10.96.53.5") })); n != 1 {
		t.Errorf("10.96.53.5 listed %d times, want once (from %s only)", n, hostLink)
	}

	// No link to skip (a first start, before kube-ipvs0 exists): everything is listed.
	for _, skip := range []string{"", "kt-na-none"} {
		all, err := NodeAddresses(skip)
		if err != nil {
			t.Fatalf("NodeAddresses(%q): %v", skip, err)
		}
		if !has(all, "10.96.53.1") || !has(all, "fd00:96:53::1") || !has(all, "10.96.53.5") {
			t.Errorf("NodeAddresses(%q) = %v; want the addresses of every link", skip, all)
		}
	}
}
