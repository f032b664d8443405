package controller

import (
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/metrics"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// FirewallResult reports one firewall step.
type FirewallResult struct {
	SetWrites int // ipset netlink requests
	Restores  int // iptables-restore / ip6tables-restore runs
	Entries   int // set entries desired after the step
	Err       error
}

// Firewall keeps the ipsets and the constant iptables rules (packages firewall, ipset and
// iptables, behind an adapter). Stage records what changed; Open runs before IPVS changes
// (new set entries, rules in place), Close after them (old entries), so no packet meets a
// half-built path.
type Firewall interface {
	// SetNodeIPs gives the node's own addresses (they shape source-range rules).
	SetNodeIPs(ips []netip.Addr)
	// Stage records the resolved desired state of one changed Service (nil: gone).
	Stage(name model.ServiceName, st *model.ServiceState)
	Open() FirewallResult
	Close() FirewallResult
	// Resync applies everything staged and repairs sets and rules against the kernel.
	Resync() FirewallResult
}

func (c *Controller) fwOpen() FirewallResult {
	if c.fw == nil {
		return FirewallResult{}
	}
	return c.fw.Open()
}

func (c *Controller) fwClose() FirewallResult {
	if c.fw == nil {
		return FirewallResult{}
	}
	return c.fw.Close()
}

// noteFirewall accounts for a firewall step. A failed step asks for a full sync (with
// backoff), whose Resync repairs sets and rules from the desired state.
func (c *Controller) noteFirewall(r FirewallResult, st *Stats, op string) {
	st.SetWrites += r.SetWrites
	st.Restores += r.Restores
	if m := c.obs.Metrics; m != nil {
		m.AddNetlinkWrites(metrics.SubsystemIPSet, op, r.SetWrites)
		m.AddNetlinkWrites(metrics.SubsystemIPTables, op, r.Restores)
		if r.Err != nil {
			m.AddKernelErrors(metrics.SubsystemIPSet, 1)
		}
	}
	c.fwEntries = r.Entries
	if r.Err != nil {
		st.Errors++
		c.log.Error("ipset or iptables step failed; a full repair follows", "err", r.Err)
		if l, ok := c.ipvs.(FirewallFailureListener); ok {
			l.FirewallFailed()
		}
		c.mu.Lock()
		c.fullDue = true
		c.mu.Unlock()
	}
}
