package main

import (
	"fmt"
	"log/slog"

	"github.com/kube-ipvs/kube-ipvs/conntrack"
	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/dataplane/ipvsmode"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/iptproxy"
)

// newDataplane opens the kernel state of the chosen mode in the current network namespace.
// The scale bench (package bench) builds its IPVS mode with the same ipvsmode.New.
func newDataplane(o runOptions, mode string, log *slog.Logger) (dataplane.Dataplane, error) {
	backend := iptables.Backend(o.IPTablesBackend)
	if mode == modeIPVS {
		dp, err := ipvsmode.New(o.ipvsMode, o.DummyInterface, o.DrainTimeout, backend, conntrack.Cleaner{}, log)
		if err != nil {
			return nil, fmt.Errorf("IPVS mode: %w (is the ip_vs kernel module loaded?)", err)
		}
		return dp, nil
	}
	fw := o.ipvsMode.Firewall
	dp, err := iptproxy.NewDataplane(iptables.OSExec{}, iptproxy.Config{IPv4: true, IPv6: fw.IPv6,
		ClusterCIDRs: fw.ClusterCIDRs, LocalInterface: fw.LocalInterface, MasqueradeAll: fw.MasqueradeAll,
		MasqueradeMark: fw.MasqueradeMark, Tools: iptables.Config{Backend: backend}}, conntrack.Cleaner{}, log)
	if err != nil {
		return nil, fmt.Errorf("iptables proxier: %w", err)
	}
	return dp, nil
}
