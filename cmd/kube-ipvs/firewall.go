package main

import (
	"github.com/kube-ipvs/kube-ipvs/controller/adapters"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/iptables"
)

// newFirewall drives packages firewall, ipset and iptables for the controller (see package
// adapters).
func newFirewall(cfg firewall.Config, backend iptables.Backend) (*adapters.Firewall, error) {
	return adapters.NewFirewall(cfg, backend)
}
