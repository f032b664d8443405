package modules

import (
	"slices"

	"github.com/kube-ipvs/kube-ipvs/firewall"
)

// The modules the proxy's features are built on, by their kernel names.
const (
	IPVS      = "ip_vs"        // IP Virtual Server itself
	Conntrack = "nf_conntrack" // IPVS NAT and the masquerade rules
	Dummy     = "dummy"        // the kube-ipvs0 link
	IPSet     = "ip_set"       // the ipsets behind the iptables rules
	XTSet     = "xt_set"       // iptables -m set
	XTIPVS    = "xt_ipvs"      // iptables -m ipvs
)

// Scheduler is the module of an IPVS scheduler: ip_vs_rr for rr.
func Scheduler(name string) string { return "ip_vs_" + name }

// ForScheduler lists the modules a virtual server with that scheduler needs.
func ForScheduler(name string) []string { return []string{IPVS, Scheduler(name)} }

// Need is one module a feature of the proxy needs.
type Need struct {
	Module string
	// Required: IPVS mode cannot run without it. Without the others single features
	// degrade (a Service's scheduler falls back to the default one, a rule is left out).
	Required bool
	// For names the feature, as an operator reads it.
	For string
}

// SchedulerUse is a scheduler beside the default one, and who asks for it.
type SchedulerUse struct {
	Name    string
	NamedBy string // e.g. "ns/a, ns/b"
}

// ForProxy lists the modules IPVS mode needs, in the order to load them (ip_vs before the
// schedulers and xt_ipvs that depend on it): with default scheduler def, and the other
// schedulers Services name.
func ForProxy(def string, others []SchedulerUse) []Need {
	needs := []Need{
		{IPVS, true, "IPVS itself"},
		{Scheduler(def), true, "the default scheduler (--scheduler=" + def + ")"},
	}
	for _, s := range others {
		needs = append(needs, Need{Scheduler(s.Name), false, "scheduler " + s.Name + ", named by " + s.NamedBy})
	}
	needs = append(needs,
		Need{Conntrack, true, "IPVS NAT and the masquerade rules"},
		Need{Dummy, false, "the kube-ipvs0 interface that holds the Service addresses"},
		Need{IPSet, true, "the ipsets behind the iptables rules"})
	for _, t := range SetTypes() {
		needs = append(needs, Need{ForSetType(t), false, "ipset type " + string(t)})
	}
	return append(needs,
		Need{XTSet, false, "iptables rules that match ipsets (-m set)"},
		Need{XTIPVS, false, "iptables rules that match IPVS connections (-m ipvs)"})
}

// SetTypes returns the ipset types the proxy's rules use, in first-use order.
func SetTypes() []firewall.SetType {
	var out []firewall.SetType
	for _, d := range firewall.Sets(firewall.Config{}) {
		if !slices.Contains(out, d.Type) {
			out = append(out, d.Type)
		}
	}
	return out
}
