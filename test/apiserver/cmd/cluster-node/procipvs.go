package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/moby/ipvs"
)

// ipvsTables reads the node's IPVS table over netlink (moby/ipvs) and its connections from
// /proc/net/ip_vs_conn, and writes them as ipvsadm -Ln and ipvsadm -Lnc would, with "=="
// between. The operator checks poll it every 100 ms during the scaling: a netlink dump and
// a file read cost the emulated node little, where running ipvsadm twice a poll (a fork and
// an exec each) took a share of the CPU the Pods under test needed. The table is not read
// from /proc/net/ip_vs: with the nodes' namespaces in one kernel, that file's reader skips
// and repeats services once its output passes a page (its position counts the services of
// every namespace, its start only its own), and the checks saw virtual servers missing.
func ipvsTables() (string, error) {
	table, err := netlinkTable()
	if err != nil {
		return "", err
	}
	conns, err := os.ReadFile("/proc/net/ip_vs_conn")
	if err != nil {
		return "", err
	}
	return table + "==\n" + connsAsIpvsadm(string(conns)), nil
}

// netlinkTable lists this network namespace's virtual servers and their real servers as
// ipvsadm -Ln prints them.
func netlinkTable() (string, error) {
	h, err := ipvs.New("")
	if err != nil {
		return "", err
	}
	defer h.Close()
	svcs, err := h.GetServices()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("Prot LocalAddress:Port Scheduler Flags\n")
	b.WriteString("  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n")
	for _, svc := range svcs {
		if svc.FWMark != 0 {
			fmt.Fprintf(&b, "FWM %d %s\n", svc.FWMark, svc.SchedName)
		} else {
			fmt.Fprintf(&b, "%s %s %s\n", protoName(svc.Protocol), hostPort(svc.Address, svc.Port), svc.SchedName)
		}
		dests, err := h.GetDestinations(svc)
		if err != nil {
			return "", err
		}
		for _, d := range dests {
			fmt.Fprintf(&b, "  -> %s %s %d %d %d\n", hostPort(d.Address, d.Port), forwardName(d.ConnectionFlags),
				d.Weight, d.ActiveConnections, d.InactiveConnections)
		}
	}
	return b.String(), nil
}

func hostPort(ip net.IP, port uint16) string {
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
}

func protoName(p uint16) string {
	switch p {
	case 6:
		return "TCP"
	case 17:
		return "UDP"
	case 132:
		return "SCTP"
	}
	return strconv.Itoa(int(p))
}

// forwardName is ipvsadm's name of the forwarding method in a destination's flags.
func forwardName(flags uint32) string {
	switch flags & 0x7 {
	case 0:
		return "Masq"
	case 1:
		return "Local"
	case 2:
		return "Tunnel"
	case 3:
		return "Route"
	}
	return "?"
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
