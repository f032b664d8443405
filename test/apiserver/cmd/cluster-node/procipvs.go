package main

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// ipvsTables reads the kernel's IPVS table and connections from /proc/net/ip_vs and
// /proc/net/ip_vs_conn and writes them as ipvsadm -Ln and ipvsadm -Lnc would, with "=="
// between. The operator checks poll the table every 100 ms during the scaling; reading two
// files costs the emulated node nothing, where running ipvsadm twice a poll (a fork and an
// exec each) took a share of the CPU the Pods under test needed.
func ipvsTables() (string, error) {
	table, err := os.ReadFile("/proc/net/ip_vs")
	if err != nil {
		return "", err
	}
	conns, err := os.ReadFile("/proc/net/ip_vs_conn")
	if err != nil {
		return "", err
	}
	return tableAsIpvsadm(string(table)) + "==\n" + connsAsIpvsadm(string(conns)), nil
}

// tableAsIpvsadm rewrites /proc/net/ip_vs' hexadecimal IPv4 ADDR:PORT fields as ipvsadm -Ln
// prints them; every other field is kept.
func tableAsIpvsadm(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if strings.HasPrefix(line, "IP Virtual Server") {
			continue
		}
		f := strings.Fields(line)
		for i, w := range f {
			if ap, ok := hexAddrPort(w); ok {
				f[i] = ap
			}
		}
		if strings.HasPrefix(line, "  ->") {
			b.WriteString("  ")
		}
		b.WriteString(strings.Join(f, " "))
		b.WriteString("\n")
	}
	return b.String()
}

// connsAsIpvsadm rewrites /proc/net/ip_vs_conn's lines ("TCP 0AF40006 E052 0A60906C 2328
// 0AF40005 2328 TIME_WAIT 119") as ipvsadm -Lnc's ("TCP 01:59 TIME_WAIT 10.244.0.6:57426
// 10.96.144.108:9000 10.244.0.5:9000"). IPv6 lines are left out: the cluster is IPv4.
func connsAsIpvsadm(s string) string {
	var b strings.Builder
	b.WriteString("pro expire state source virtual destination\n")
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] == "Pro" {
			continue
		}
		var addrs []string
		for i := 1; i+1 < 7; i += 2 {
			ap, ok := hexAddrPort(f[i] + ":" + f[i+1])
			if !ok {
				break
			}
			addrs = append(addrs, ap)
		}
		secs, err := strconv.Atoi(f[8])
		if len(addrs) != 3 || err != nil {
			continue
		}
		fmt.Fprintf(&b, "%s %02d:%02d %s %s %s %s\n", f[0], secs/60, secs%60, f[7], addrs[0], addrs[1], addrs[2])
	}
	return b.String()
}

// hexAddrPort turns "0A60906C:2328" into "10.96.144.108:9000".
func hexAddrPort(w string) (string, bool) {
	a, p, ok := strings.Cut(w, ":")
	if !ok || len(a) != 8 || len(p) != 4 {
		return "", false
	}
	ip, err1 := strconv.ParseUint(a, 16, 32)
	port, err2 := strconv.ParseUint(p, 16, 16)
	if err1 != nil || err2 != nil {
		return "", false
	}
	addr := netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)})
	return netip.AddrPortFrom(addr, uint16(port)).String(), true
}
