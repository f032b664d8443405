// Package guestbench proves the guest test bench end to end: IPVS, the dummy device, ipsets,
// iptables-restore and real traffic through an IPVS virtual server, all on the guest's real
// kernel. Its tests carry the build tag "guest"; make guest-test runs them.
package guestbench
