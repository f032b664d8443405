package modules

import (
	"strings"

	"github.com/kube-ipvs/kube-ipvs/firewall"
)

// ForSetType returns the kernel module of an ipset type: hash:ip,port is
// ip_set_hash_ipport, bitmap:port is ip_set_bitmap_port.
func ForSetType(t firewall.SetType) string {
	s := strings.ReplaceAll(string(t), ":", "_")
	return "ip_set_" + strings.ReplaceAll(s, ",", "")
}

// Package names the package that ships the kernel's netfilter/IPVS modules.
func Package(osID, release string) string {
	switch osID {
	case "ubuntu":
		return "linux-modules-extra-" + release
	case "debian":
		return "linux-image-" + release
	case "fedora", "rhel", "centos", "rocky", "almalinux", "ol", "amzn":
		return "kernel-modules-extra-" + release + " (and kernel-modules-" + release + ")"
	case "sles", "opensuse-leap", "opensuse-tumbleweed":
		return "kernel-default (the full one, not kernel-default-base)"
	case "arch":
		return "linux (the full kernel package)"
	}
	return "the modules package of kernel " + release + " (Ubuntu: linux-modules-extra-" + release +
		"; Debian: linux-image-" + release + "; Fedora/RHEL: kernel-modules-extra)"
}

var kernelOptions = map[string]string{
	"ip_vs":        "CONFIG_IP_VS",
	"nf_conntrack": "CONFIG_NF_CONNTRACK",
	"dummy":        "CONFIG_DUMMY",
	"ip_set":       "CONFIG_IP_SET",
	"xt_set":       "CONFIG_NETFILTER_XT_SET",
	"xt_ipvs":      "CONFIG_NETFILTER_XT_MATCH_IPVS",
}

// KernelOption is the kernel configuration option that builds a module.
func KernelOption(name string) string {
	if o, ok := kernelOptions[name]; ok {
		return o
	}
	if s, ok := strings.CutPrefix(name, "ip_vs_"); ok {
		return "CONFIG_IP_VS_" + strings.ToUpper(s)
	}
	if s, ok := strings.CutPrefix(name, "ip_set_"); ok {
		// ip_set_hash_ipport -> CONFIG_IP_SET_HASH_IPPORT
		return "CONFIG_IP_SET_" + strings.ToUpper(s)
	}
	return "CONFIG_" + strings.ToUpper(name)
}
