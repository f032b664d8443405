package main

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/config"
)

// The flag values run and cleanup share, parsed one way for both.

// Defaults of the flags run and cleanup share: cleanup must find what run made.
const (
	defaultDummyInterface = "kube-ipvs0"
	defaultNodePortRange  = "30000-32767"
)

// parseCIDRs parses a list flag of CIDRs, masked; the error names the flag.
func parseCIDRs(flag string, list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, c := range list {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return nil, fmt.Errorf("--%s: %q is not a CIDR: %v", flag, c, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// parseNodePortAddresses parses --nodeport-addresses: CIDRs, or "primary" alone.
func parseNodePortAddresses(list []string) (cidrs []netip.Prefix, primary bool, err error) {
	for _, c := range list {
		if strings.TrimSpace(c) == config.NodePortAddressesPrimary {
			if len(list) > 1 {
				return nil, false, fmt.Errorf("--nodeport-addresses: %q cannot be combined with CIDRs", c)
			}
			return nil, true, nil
		}
	}
	cidrs, err = parseCIDRs("nodeport-addresses", list)
	return cidrs, false, err
}

// parseNodePortRange parses --service-node-port-range, LOW-HIGH.
func parseNodePortRange(s string) (lo, hi uint16, err error) {
	l, h, ok := strings.Cut(s, "-")
	low, err1 := strconv.ParseUint(strings.TrimSpace(l), 10, 16)
	high, err2 := strconv.ParseUint(strings.TrimSpace(h), 10, 16)
	if !ok || err1 != nil || err2 != nil || low == 0 || low > high {
		return 0, 0, fmt.Errorf("--service-node-port-range=%q: want LOW-HIGH, e.g. 30000-32767", s)
	}
	return uint16(low), uint16(high), nil
}
