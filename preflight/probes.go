package preflight

// The functional probes: each one asks the kernel to do what the proxy will do (an IPVS
// virtual server per scheduler, a dummy link, iptables, the sysctls) and adds one row.

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/modules"
	"github.com/kube-ipvs/kube-ipvs/sysctl"
)

// ipvsFamily checks that the IPVS generic-netlink family answers.
func (r *runner) ipvsFamily() bool {
	c := Row{Name: "ipvs netlink", Required: true}
	defer func() { r.add(c) }()
	mods := []string{modules.IPVS}
	if !r.needs(&c, mods) {
		return false
	}
	if r.d.IPVSFamily == nil {
		c.Status, c.Detail = Failed, "no IPVS netlink probe available"
		return false
	}
	detail, err := r.d.IPVSFamily()
	if err != nil {
		c.Status = Failed
		c.Detail = "the IPVS generic netlink family does not answer: " + oneLine(err.Error())
		c.Fix = r.absentFix(mods)
		if c.Fix == "" {
			c.Fix = "run in the host network namespace with CAP_NET_ADMIN; check dmesg for IPVS errors"
		}
		return false
	}
	c.Status, c.Detail = OK, detail
	return true
}

func (r *runner) probeVS(sched string, required, famOK bool) {
	c := Row{Name: "ipvs probe " + sched, Required: required}
	defer func() { r.add(c) }()
	mods := modules.ForScheduler(sched)
	if !r.needs(&c, mods) {
		return
	}
	if !famOK {
		c.Status = Skipped
		c.Detail = "not run: the IPVS netlink family does not answer"
		c.Fix = "see the rows of module ip_vs and ipvs netlink"
		return
	}
	if r.d.ProbeVirtualServer == nil {
		c.Status, c.Detail = Failed, "no IPVS probe available"
		return
	}
	if err := r.d.ProbeVirtualServer(sched); err != nil {
		c.Status = Failed
		c.Detail = fmt.Sprintf("virtual server TCP %s with scheduler %s: %s", ProbeVSAddress, sched, oneLine(err.Error()))
		c.Fix = r.absentFix(mods)
		if c.Fix == "" {
			c.Fix = "modprobe ip_vs_" + sched + "; if the virtual server is left over, ipvsadm -D -t " + ProbeVSAddress
		}
		if !required {
			c.Detail += " (Services naming it fall back to the default scheduler)"
		}
		return
	}
	c.Status = OK
	c.Detail = fmt.Sprintf("created and deleted virtual server TCP %s with scheduler %s", ProbeVSAddress, sched)
}

func (r *runner) simpleProbe(name string, mods []string, probe func() (string, error), fix string) {
	c := Row{Name: name}
	defer func() { r.add(c) }()
	if !r.needs(&c, mods) {
		return
	}
	if probe == nil {
		c.Status, c.Detail = Failed, "no probe available"
		return
	}
	detail, err := probe()
	if err != nil {
		c.Status, c.Detail = Failed, oneLine(err.Error())
		c.Fix = r.absentFix(mods)
		if c.Fix == "" {
			c.Fix = fix
		}
		return
	}
	c.Status, c.Detail = OK, detail
}

func (r *runner) iptables() {
	c := Row{Name: "iptables"}
	defer func() { r.add(c) }()
	if r.d.Iptables == nil {
		c.Status, c.Detail = Failed, "no iptables probe available"
		return
	}
	detail, err := r.d.Iptables()
	if err != nil {
		c.Status, c.Detail = Failed, oneLine(err.Error())
		c.Fix = "install iptables with both backends' tools (Debian/Ubuntu: apt-get install iptables; Fedora/RHEL: dnf install iptables-nft iptables-legacy)"
		return
	}
	c.Status, c.Detail = OK, detail
}

func (r *runner) dummy() {
	c := Row{Name: "dummy link"}
	defer func() { r.add(c) }()
	if !r.needs(&c, []string{modules.Dummy}) {
		return
	}
	if r.d.DummyLink == nil {
		c.Status, c.Detail = Failed, "no dummy link probe available"
		return
	}
	if err := r.d.DummyLink(ProbeLinkName); err != nil {
		c.Status, c.Detail = Failed, "create and remove dummy link "+ProbeLinkName+": "+oneLine(err.Error())
		c.Fix = r.absentFix([]string{modules.Dummy})
		if c.Fix == "" {
			c.Fix = "run with CAP_NET_ADMIN in the host network namespace; if " + ProbeLinkName + " is left over, ip link del " + ProbeLinkName
		}
		return
	}
	c.Status, c.Detail = OK, "created and removed dummy link "+ProbeLinkName
}

func (r *runner) sysctls() {
	for _, s := range sysctl.ForProxy(r.d.KernelRelease, sysctl.Options{StrictARP: r.o.StrictARP, RateEstimation: r.o.RateEstimation}) {
		r.sysctlRow(s)
	}
}

func (r *runner) sysctlRow(s sysctl.Setting) {
	c := Row{Name: "sysctl " + s.Name}
	defer func() { r.add(c) }()
	var mods []string
	if strings.HasPrefix(s.Name, "net.ipv4.vs.") {
		mods = []string{modules.IPVS}
	}
	if !r.needs(&c, mods) {
		return
	}
	if r.d.Sysctl == nil {
		c.Status, c.Detail = Failed, "no sysctl probe available"
		return
	}
	cur, err := r.d.Sysctl(s.Name)
	if err != nil && cur == s.Value && !errors.Is(err, fs.ErrNotExist) {
		// The proxy container that is not privileged: `run --init-only` set it, and the
		// proxy only checks it.
		c.Status, c.Detail = OK, "read-only here ("+oneLine(err.Error())+"); already "+cur
		return
	}
	if err != nil {
		c.Status, c.Detail, c.Fix = sysctlFailure(err)
		c.Detail = oneLine(c.Detail) + " (needed to " + s.Why + ")"
		if f := r.absentFix(mods); f != "" {
			c.Fix = f
		}
		return
	}
	c.Status = OK
	if cur == s.Value {
		c.Detail = "writable; already " + cur
	} else {
		c.Detail = fmt.Sprintf("writable; now %s, the proxy sets %s", cur, s.Value)
	}
}
