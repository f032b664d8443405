package proxy

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// ParseIP parses one address from a Service or EndpointSlice field. It returns the address
// unmapped (::ffff:a.b.c.d becomes a.b.c.d) so that the family check and map keys agree.
// The firewall entries and the iptables proxier read Service addresses with it too, so
// that every part of the proxy agrees on which addresses a Service has.
func ParseIP(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		// Old API servers accepted IPv4 with leading zeros ("010.0.0.1") and Kubernetes
		// still reads them as decimal; such objects can outlive upgrades, so do the same.
		if legacy, ok := parseLegacyIPv4(s); ok {
			return legacy, nil
		}
		return netip.Addr{}, fmt.Errorf("is not an IP address")
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("has a zone, which a Service address cannot have")
	}
	return a.Unmap(), nil
}

// parseLegacyIPv4 reads a dotted quad whose fields may have leading zeros, as decimal.
func parseLegacyIPv4(s string) (netip.Addr, bool) {
	fields := strings.Split(s, ".")
	if len(fields) != 4 {
		return netip.Addr{}, false
	}
	var b [4]byte
	for i, f := range fields {
		if len(f) == 0 || len(f) > 3 || strings.TrimLeft(f, "0123456789") != "" {
			return netip.Addr{}, false
		}
		n, err := strconv.Atoi(f)
		if err != nil || n > 255 {
			return netip.Addr{}, false
		}
		b[i] = byte(n)
	}
	return netip.AddrFrom4(b), true
}

// parseVIP parses an address that would become a virtual server bound to kube-ipvs0. Beyond
// parsing, it refuses addresses that must never be hijacked or cannot be a destination:
// unspecified, multicast, broadcast, loopback (a virtual server on 127.0.0.1 would capture
// the node's own local traffic) and link-local ones (169.254.1.1 is the pods' gateway in
// routed CNIs, fe80::/10 is on every link: binding one cuts pods or neighbours off).
func parseVIP(s string) (netip.Addr, error) {
	a, err := ParseIP(s)
	if err != nil {
		return a, err
	}
	switch {
	case a.IsUnspecified():
		return netip.Addr{}, fmt.Errorf("is the unspecified address")
	case a.IsMulticast():
		return netip.Addr{}, fmt.Errorf("is a multicast address")
	case a == limitedBroadcast:
		return netip.Addr{}, fmt.Errorf("is the broadcast address")
	case a.IsLoopback():
		return netip.Addr{}, fmt.Errorf("is a loopback address")
	case a.IsLinkLocalUnicast():
		return netip.Addr{}, fmt.Errorf("is a link-local address")
	}
	return a, nil
}

var limitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// serviceVIPs are the virtual addresses of a Service, grouped by where they come from
// because each source has its own traffic policy.
type serviceVIPs struct {
	cluster  []netip.Addr
	external []netip.Addr
	lb       []netip.Addr
	// nodeOwn are those that are addresses of the node itself (Config.HostAddrs): they get
	// their virtual servers, as in kube-proxy, but are neither bound to kube-ipvs0 nor
	// filtered as VIPs, so the node's own processes stay reachable on them.
	nodeOwn map[netip.Addr]bool
}

// collectVIPs reads the ClusterIPs, externalIPs and load-balancer ingress IPs of the Service.
// Bad values are reported and skipped, so one typo in externalIPs does not take the whole
// Service down.
func collectVIPs(svc *v1.Service, cfg *Config, probs *problems) serviceVIPs {
	var v serviceVIPs
	add := func(list *[]netip.Addr, field, value string) {
		a, err := parseVIP(value)
		if err != nil {
			probs.add(ReasonInvalidIP, "%s %s %v; no virtual server is created for it", field, quoteValue(value), err)
			return
		}
		if slices.Contains(*list, a) {
			return
		}
		*list = append(*list, a)
		if cfg.HostAddrs[a] && !v.nodeOwn[a] {
			if v.nodeOwn == nil {
				v.nodeOwn = map[netip.Addr]bool{}
			}
			v.nodeOwn[a] = true
			probs.add(ReasonNodeAddress, "%s %s is an address of this node: its virtual servers are kept, but it is not bound to %s nor filtered, so the node's own services stay reachable on it",
				field, a, "kube-ipvs0")
		}
	}

	// spec.clusterIPs supersedes spec.clusterIP (its first entry always equals clusterIP);
	// objects written before dual-stack may only have the singular field.
	if len(svc.Spec.ClusterIPs) > 0 {
		for i, s := range svc.Spec.ClusterIPs {
			add(&v.cluster, fmt.Sprintf("spec.clusterIPs[%d]", i), s)
		}
	} else if svc.Spec.ClusterIP != "" {
		add(&v.cluster, "spec.clusterIP", svc.Spec.ClusterIP)
	}

	for i, s := range svc.Spec.ExternalIPs {
		add(&v.external, fmt.Sprintf("spec.externalIPs[%d]", i), s)
	}

	// Only a LoadBalancer Service owns its ingress IPs: after a type change a stale status
	// may still list an address the cloud has already given to someone else.
	if svc.Spec.Type == v1.ServiceTypeLoadBalancer {
		for i, ing := range svc.Status.LoadBalancer.Ingress {
			// Hostname-only ingress (some cloud LBs) has nothing for us to bind.
			if ing.IP == "" {
				continue
			}
			// ipMode Proxy: the load balancer proxies to the node itself and traffic does
			// not arrive with the LB IP as destination, so binding it would only make the
			// node answer for an address that is not its own.
			if ing.IPMode != nil && *ing.IPMode == v1.LoadBalancerIPModeProxy {
				continue
			}
			add(&v.lb, fmt.Sprintf("status.loadBalancer.ingress[%d].ip", i), ing.IP)
		}
	}
	return v
}

// serviceFamilies are the address families of the Service (index 0 IPv4, 1 IPv6): those of
// spec.ipFamilies and of its ClusterIPs. Its NodePorts exist only in these families: a
// single-stack IPv4 Service has no endpoints to offer at the node's IPv6 address, and a
// virtual server there would only refuse what a node process listens for.
func serviceFamilies(svc *v1.Service, cluster []netip.Addr) [2]bool {
	var f [2]bool
	for _, fam := range svc.Spec.IPFamilies {
		switch fam {
		case v1.IPv4Protocol:
			f[0] = true
		case v1.IPv6Protocol:
			f[1] = true
		}
	}
	for _, a := range cluster {
		f[b2i(a.Is6())] = true
	}
	return f
}

// nodeVIPs returns the configured node IPs of the given families, unmapped and without
// duplicates or invalid values, so a sloppy Config cannot produce two virtual servers for
// one address.
func nodeVIPs(cfg *Config, families [2]bool) []netip.Addr {
	out := make([]netip.Addr, 0, len(cfg.NodeIPs))
	seen := make(map[netip.Addr]bool, len(cfg.NodeIPs))
	for _, a := range cfg.NodeIPs {
		if !a.IsValid() {
			continue
		}
		a = a.Unmap()
		if !seen[a] && families[b2i(a.Is6())] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// AddrSet is the set of the addresses in list that ParseIP accepts (surrounding spaces
// trimmed); the others are left out, as BuildService reports them.
func AddrSet(list []string) map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	for _, s := range list {
		if a, err := ParseIP(strings.TrimSpace(s)); err == nil {
			m[a] = true
		}
	}
	return m
}
