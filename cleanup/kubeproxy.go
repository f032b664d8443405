package cleanup

import "strings"

// What kube-proxy v1.37 leaves on a node that kube-ipvs does not adopt, by exact name, so
// that other components' KUBE-* objects stay: kubelet's KUBE-FIREWALL (kube-proxy writes
// a copy of its rule but never deletes the chain), KUBE-KUBELET-CANARY and KUBE-MARK-DROP,
// and kube-router's KUBE-ROUTER-*, KUBE-NWPLCY-*, KUBE-POD-FW-*, KUBE-SRC-*, KUBE-DST-*.
// The names were read from kubernetes/kubernetes pkg/proxy/ipvs (proxier.go's chain
// constants and ipsetInfo, ipset.go's set names) and pkg/proxy/iptables (its chain
// constants and per-Service chain prefixes); kube-proxy removes iptables-mode leftovers
// when it starts in IPVS mode, but a node may have switched modes without a restart.

// kubeProxyChains are kube-proxy's fixed chains, in nat, filter and (the canary) mangle.
var kubeProxyChains = map[string]bool{
	// IPVS mode.
	"KUBE-SERVICES":               true,
	"KUBE-POSTROUTING":            true,
	"KUBE-NODE-PORT":              true,
	"KUBE-LOAD-BALANCER":          true,
	"KUBE-MARK-MASQ":              true,
	"KUBE-FORWARD":                true,
	"KUBE-PROXY-FIREWALL":         true,
	"KUBE-SOURCE-RANGES-FIREWALL": true,
	"KUBE-IPVS-FILTER":            true,
	"KUBE-IPVS-OUT-FILTER":        true,
	// iptables mode, besides the shared ones above.
	"KUBE-EXTERNAL-SERVICES": true,
	"KUBE-NODEPORTS":         true,
	"KUBE-PROXY-CANARY":      true,
}

// kubeProxyHashedPrefixes start iptables mode's per-Service-port and per-endpoint chains,
// each followed by 16 characters of base32 (a hash of the port or endpoint).
var kubeProxyHashedPrefixes = []string{"KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-"}

// kubeProxySetBases are IPVS mode's ipsets; the IPv6 twin of each is named by
// kubeProxyIPv6Set.
var kubeProxySetBases = []string{
	"KUBE-LOOP-BACK", "KUBE-CLUSTER-IP", "KUBE-EXTERNAL-IP", "KUBE-EXTERNAL-IP-LOCAL",
	"KUBE-LOAD-BALANCER", "KUBE-LOAD-BALANCER-FW", "KUBE-LOAD-BALANCER-LOCAL",
	"KUBE-LOAD-BALANCER-SOURCE-IP", "KUBE-LOAD-BALANCER-SOURCE-CIDR",
	"KUBE-NODE-PORT-TCP", "KUBE-NODE-PORT-LOCAL-TCP", "KUBE-NODE-PORT-UDP",
	"KUBE-NODE-PORT-LOCAL-UDP", "KUBE-NODE-PORT-SCTP-HASH", "KUBE-NODE-PORT-LOCAL-SCTP-HASH",
	"KUBE-HEALTH-CHECK-NODE-PORT", "KUBE-IPVS-IPS",
}

// maxSetName is the longest ipset name the kernel takes; kube-proxy cuts longer ones.
const maxSetName = 31

// kubeProxyIPv6Set is the name kube-proxy gives a set's IPv6 twin: "KUBE-" becomes
// "KUBE-6-", cut to 31 characters (KUBE-6-LOAD-BALANCER-SOURCE-CID).
func kubeProxyIPv6Set(base string) string {
	n := "KUBE-6-" + strings.TrimPrefix(base, "KUBE-")
	if len(n) > maxSetName {
		n = n[:maxSetName]
	}
	return n
}

var kubeProxySets = func() map[string]bool {
	m := map[string]bool{}
	for _, b := range kubeProxySetBases {
		m[b] = true
		m[kubeProxyIPv6Set(b)] = true
	}
	return m
}()

// IsKubeProxyChain reports whether a chain is one kube-proxy (IPVS or iptables mode) creates.
func IsKubeProxyChain(name string) bool {
	if kubeProxyChains[name] {
		return true
	}
	for _, p := range kubeProxyHashedPrefixes {
		if rest, ok := strings.CutPrefix(name, p); ok && isBase32(rest, 16) {
			return true
		}
	}
	return false
}

// IsKubeProxySet reports whether an ipset is one kube-proxy's IPVS mode creates.
func IsKubeProxySet(name string) bool { return kubeProxySets[name] }

// isBase32 reports whether s is n characters of the RFC 4648 alphabet (A-Z, 2-7).
func isBase32(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'A' || c > 'Z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}
