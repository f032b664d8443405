package preflight

import (
	"fmt"
	"sort"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/modules"
	"github.com/kube-ipvs/kube-ipvs/proxy"
	"github.com/kube-ipvs/kube-ipvs/sysctl"
)

// kernel adds the info row that says what depends on the running kernel's release: which
// version-dependent sysctls the proxy sets and which schedulers this release predates.
func (r *runner) kernel() {
	rel := r.d.KernelRelease
	if _, _, ok := sysctl.Version(rel); !ok {
		r.add(Row{Name: "kernel", Status: Info,
			Detail: fmt.Sprintf("release %q not understood: version-dependent settings are not applied", rel)})
		return
	}
	var notes []string
	if sysctl.ConnReuseModeStalls(rel) {
		notes = append(notes, "net.ipv4.vs.conn_reuse_mode is set to 0 (4.1-5.8 stall reused source ports with 1)")
	} else {
		notes = append(notes, "net.ipv4.vs.conn_reuse_mode is left as it is (the proxy sets 0 only on 4.1-5.8)")
	}
	var older []string
	for _, s := range proxy.Schedulers() {
		if v := modules.SchedulerNeedsKernel(s, rel); v != "" {
			older = append(older, s+" (needs "+v+")")
		}
	}
	sort.Strings(older)
	if len(older) > 0 {
		notes = append(notes, "schedulers this kernel predates: "+strings.Join(older, ", "))
	} else {
		notes = append(notes, "every IPVS scheduler kube-ipvs knows exists in this release")
	}
	r.add(Row{Name: "kernel", Status: Info, Detail: "Linux " + rel + ": " + strings.Join(notes, "; ")})
}

// tooOldFix is the fix for a scheduler module the kernel has no file for because its release
// predates the scheduler; "" for any other module.
func (r *runner) tooOldFix(module string) string {
	sched, ok := strings.CutPrefix(module, "ip_vs_")
	if !ok {
		return ""
	}
	v := modules.SchedulerNeedsKernel(sched, r.d.KernelRelease)
	if v == "" {
		return ""
	}
	return fmt.Sprintf("scheduler %s exists from Linux %s (%s) on; this kernel is %s: use a newer kernel, or another scheduler",
		sched, v, modules.KernelOption(module), r.release())
}
