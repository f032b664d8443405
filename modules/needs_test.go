package modules

import (
	"slices"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/firewall"
)

func TestForProxy(t *testing.T) {
	needs := ForProxy("wrr", []SchedulerUse{{Name: "sh", NamedBy: "ns/a"}})
	var names, required []string
	for _, n := range needs {
		names = append(names, n.Module)
		if n.Required {
			required = append(required, n.Module)
		}
		if n.For == "" {
			t.Errorf("%s: no feature named", n.Module)
		}
	}
	want := []string{"ip_vs", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack", "dummy", "ip_set",
		"ip_set_hash_ipport", "ip_set_hash_ipportip", "ip_set_hash_ipportnet", "ip_set_hash_ip", "ip_set_hash_net", "ip_set_bitmap_port",
		"xt_set", "xt_ipvs"}
	slices.Sort(want[6:12])
	got := slices.Clone(names)
	slices.Sort(got[6:12]) // the set types come in the firewall's first-use order
	if !slices.Equal(got, want) {
		t.Errorf("modules %v, want %v", names, want)
	}
	if !slices.Equal(required, []string{"ip_vs", "ip_vs_wrr", "nf_conntrack", "ip_set"}) {
		t.Errorf("required %v", required)
	}
	if n := needs[2]; n.For != "scheduler sh, named by ns/a" {
		t.Errorf("other scheduler: %+v", n)
	}
	if !slices.Equal(ForScheduler("mh"), []string{"ip_vs", "ip_vs_mh"}) {
		t.Errorf("ForScheduler(mh) = %v", ForScheduler("mh"))
	}
}

func TestSetTypeModules(t *testing.T) {
	want := map[firewall.SetType]string{
		firewall.HashIPPort: "ip_set_hash_ipport", firewall.HashIPPortIP: "ip_set_hash_ipportip",
		firewall.HashIPPortNet: "ip_set_hash_ipportnet", firewall.HashIP: "ip_set_hash_ip",
		firewall.BitmapPort: "ip_set_bitmap_port",
	}
	for typ, m := range want {
		if got := ForSetType(typ); got != m {
			t.Errorf("%s: module %s, want %s", typ, got, m)
		}
	}
	for m, opt := range map[string]string{
		"ip_set_hash_ipportnet": "CONFIG_IP_SET_HASH_IPPORTNET", "ip_vs_mh": "CONFIG_IP_VS_MH",
		"xt_ipvs": "CONFIG_NETFILTER_XT_MATCH_IPVS", "veth": "CONFIG_VETH",
	} {
		if got := KernelOption(m); got != opt {
			t.Errorf("KernelOption(%s) = %s, want %s", m, got, opt)
		}
	}
}
