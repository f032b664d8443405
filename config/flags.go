package config

import (
	"fmt"
	"net/netip"
)

// Defaults that run and cleanup share: cleanup must find what run made.
const (
	DefaultDummyInterface = "kube-ipvs0"
	DefaultNodePortRange  = "30000-32767"
)

// The checks of Validate, for commands that take a few of run's flags without the whole of
// Options (kube-ipvs cleanup): the same rules, the errors naming the flag.

// FlagCIDRs reads a list flag of CIDRs, masked.
func FlagCIDRs(flag string, l []string) ([]netip.Prefix, error) {
	return cidrs(l, func(int) string { return "--" + flag })
}

// FlagNodePortAddresses reads --nodeport-addresses: CIDRs (masked) and the keywords
// primary and all (see Parsed.NodePortPrimary).
func FlagNodePortAddresses(l []string) (primary bool, out []netip.Prefix, err error) {
	return nodePortAddresses(l, func(int) string { return "--nodeport-addresses" })
}

// FlagNodePortRange reads --service-node-port-range, LOW-HIGH.
func FlagNodePortRange(s string) (lo, hi uint16, err error) {
	lo, hi, err = portRange(s)
	if err != nil {
		return 0, 0, fmt.Errorf("--service-node-port-range=%q: %v", s, err)
	}
	return lo, hi, nil
}
