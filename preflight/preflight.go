// Package preflight checks whether this node can run kube-ipvs in IPVS mode: the kernel
// modules it needs (loading missing ones with modprobe unless told not to), and functional
// probes of the kernel interfaces it programs (IPVS and ipset netlink, a probe virtual
// server per scheduler, a dummy link, iptables, the sysctls it sets).
//
// Run and Check return a Report: one Row per check, each ok, missing, failed, skipped
// or info, with a detail and the fix to apply. The decision logic is independent of the
// kernel: every kernel access goes through Deps, which tests replace with fakes; HostDeps
// is the real node.
//
// IPVS is usable when every required row is ok. The required rows are the modules ip_vs,
// ip_vs_<default scheduler>, nf_conntrack and ip_set, the IPVS generic netlink family, and
// the probe virtual server with the default scheduler. Everything else (annotation-only
// schedulers, set types, xt_set, xt_ipvs, dummy, ipset netlink, iptables, sysctls) can fail
// without making IPVS unusable: Services asking for an unavailable scheduler fall back to
// the default one, and the rest degrades single features, which the proxy logs loudly.
package preflight

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/modules"
	"github.com/kube-ipvs/kube-ipvs/proxy"
	"github.com/kube-ipvs/kube-ipvs/sysctl"
)

// Status is the outcome of one check. The values are part of the JSON schema.
type Status string

const (
	// OK: present, loaded, or the probe worked.
	OK Status = "ok"
	// Missing: absent and not loaded (--no-modprobe, or nothing to load it from).
	Missing Status = "missing"
	// Failed: loading or probing was tried and did not work.
	Failed Status = "failed"
	// Skipped: not tried, because something it needs is absent (named in the detail).
	Skipped Status = "skipped"
	// Info: not a check, a note (for example: Services were not looked at).
	Info Status = "info"
)

// Row is one row of the report (one check). The JSON field names are a stable schema.
type Row struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix"`
	// Required rows decide IPVSUsable: all of them must be ok.
	Required bool `json:"-"`
}

// Report is the result of a preflight run.
type Report struct {
	// IPVSUsable is true when every required check is ok: `kube-ipvs run` can program IPVS.
	IPVSUsable bool  `json:"ipvsUsable"`
	Checks     []Row `json:"checks"`
}

// ExitCode is the preflight command's exit code for the report: 0 when IPVS mode can run,
// 1 when it cannot (the proxy would fall back).
func (r Report) ExitCode() int {
	if r.IPVSUsable {
		return 0
	}
	return 1
}

// Blocking returns the required checks that are not ok: why IPVS is not usable.
func (r Report) Blocking() []Row {
	var out []Row
	for _, c := range r.Checks {
		if c.Required && c.Status != OK {
			out = append(out, c)
		}
	}
	return out
}

// Find returns the check with that name.
func (r Report) Find(name string) (Row, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Row{}, false
}

// ServiceScan is what a look at the cluster's Services found, in plain values: the caller
// lists the Services and reads them with proxy.ScanServices, the proxy's own rules.
type ServiceScan struct {
	// Source says where the Services came from, e.g. "--manifests examples/".
	Source string
	// Services is how many Services the proxy would handle.
	Services int
	// Schedulers maps each valid scheduler named by an annotation to the Services
	// ("namespace/name") naming it.
	Schedulers map[string][]string
	// Invalid lists annotations that name no IPVS scheduler: `namespace/name: "value"`.
	Invalid []string
	// Err is set when the Services could not be listed; the fields above are then empty.
	Err error
	// Partial is set when some of them could not be read (broken manifest documents);
	// the fields above hold the ones that could.
	Partial error
}

// Options configure a preflight run.
type Options struct {
	// DefaultScheduler is --scheduler; "rr" when empty.
	DefaultScheduler string
	// Services is the result of listing the Services once; nil when neither --kubeconfig
	// nor --manifests was given (the report then has an info row and checks only the
	// default scheduler).
	Services *ServiceScan
	// NoModprobe: never run modprobe, and skip the probes whose modules are absent so
	// the kernel does not load them on demand either.
	NoModprobe bool
	// StrictARP adds the --strict-arp sysctls to the checked ones.
	StrictARP bool
	// RateEstimation adds net.ipv4.vs.run_estimation when it is on or off.
	RateEstimation sysctl.RateEstimation
	// Deps is the kernel and tools; nil means HostDeps().
	Deps *Deps
}

// Deps are the kernel and tool accesses, injectable so the decision logic is testable.
// A nil function makes its checks fail with "not available".
type Deps struct {
	// Module looks a kernel module up now (it is called again after loads).
	Module func(name string) modules.State
	// Modprobe loads a module and its dependencies; the error includes modprobe's output.
	Modprobe func(ctx context.Context, name string) error
	// IPVSFamily asks the kernel for the IPVS generic netlink family; a detail on success.
	IPVSFamily func() (string, error)
	// ProbeVirtualServer creates the probe virtual server with the scheduler and deletes
	// it again, also when something failed in between.
	ProbeVirtualServer func(scheduler string) error
	// IpsetProtocol asks the ipset netlink protocol for its version; a detail on success.
	IpsetProtocol func() (string, error)
	// Iptables finds iptables-restore and the backend in use; a detail on success.
	Iptables func() (string, error)
	// DummyLink creates a dummy link of that name and removes it.
	DummyLink func(name string) error
	// Sysctl opens a sysctl for writing without writing and returns its current value.
	Sysctl func(name string) (current string, err error)
	// KernelRelease is uname -r, for sysctl.ForProxy and the fixes.
	KernelRelease string
	// OSID is the ID from /etc/os-release (debian, ubuntu, fedora, ...), to name packages.
	OSID string
}

// ProbeVSAddress is the probe virtual server: TCP on a TEST-NET-2 address (RFC 5737), which
// no real network uses, so no Service and no other software owns it.
const ProbeVSAddress = "198.51.100.254:1"

// ProbeLinkName is the dummy link the dummy probe creates and removes.
const ProbeLinkName = "kipvs-probe0"

// Check runs the preflight checks and reports whether IPVS mode can run. It prints
// nothing; `kube-ipvs run --mode=auto` calls it before choosing a mode.
func Check(ctx context.Context, o Options) (bool, Report) {
	r := Run(ctx, o)
	return r.IPVSUsable, r
}

// Run runs every check, in order: Services, kernel modules (loading missing ones unless
// NoModprobe), then the functional probes.
func Run(ctx context.Context, o Options) Report {
	if o.Deps == nil {
		o.Deps = HostDeps()
	}
	r := &runner{o: o, d: o.Deps, mods: map[string]int{}}
	r.run(ctx)
	rep := Report{Checks: r.checks, IPVSUsable: true}
	for _, c := range rep.Checks {
		if c.Required && c.Status != OK {
			rep.IPVSUsable = false
		}
	}
	return rep
}

type runner struct {
	o      Options
	d      *Deps
	checks []Row
	mods   map[string]int // module name -> index of its row
}

func (r *runner) add(c Row) int {
	r.checks = append(r.checks, c)
	return len(r.checks) - 1
}

func (r *runner) defaultScheduler() string {
	if r.o.DefaultScheduler == "" {
		return "rr"
	}
	return r.o.DefaultScheduler
}

// extraSchedulers are the valid schedulers named only by annotations, sorted.
func (r *runner) extraSchedulers() []string {
	if r.o.Services == nil {
		return nil
	}
	var out []string
	for s := range r.o.Services.Schedulers {
		if s != r.defaultScheduler() {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

func (r *runner) run(ctx context.Context) {
	r.services()
	def := r.defaultScheduler()
	if !slices.Contains(proxy.Schedulers(), def) {
		r.add(Row{Name: "scheduler " + def, Status: Failed, Required: true,
			Detail: fmt.Sprintf("--scheduler=%q is not an IPVS scheduler", def),
			Fix:    "use one of " + strings.Join(proxy.Schedulers(), ", ")})
	}

	// Kernel modules, in load order.
	var others []modules.SchedulerUse
	for _, s := range r.extraSchedulers() {
		others = append(others, modules.SchedulerUse{Name: s, NamedBy: servicesText(r.o.Services.Schedulers[s])})
	}
	for _, n := range modules.ForProxy(def, others) {
		r.module(ctx, n.Module, n.Required, n.For)
	}

	// Functional probes.
	famOK := r.ipvsFamily()
	r.probeVS(def, true, famOK)
	for _, s := range r.extraSchedulers() {
		r.probeVS(s, false, famOK)
	}
	r.simpleProbe("ipset netlink", []string{modules.IPSet}, r.d.IpsetProtocol,
		"the ipset protocol must answer for the proxy to create its sets: load ip_set")
	r.iptables()
	r.dummy()
	r.sysctls()
	r.kernel()
	r.recheckModules()
}

func servicesText(svcs []string) string {
	if len(svcs) <= 3 {
		return strings.Join(svcs, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(svcs[:3], ", "), len(svcs)-3)
}

func (r *runner) services() {
	s := r.o.Services
	switch {
	case s == nil:
		r.add(Row{Name: "services", Status: Info,
			Detail: "Services not looked at: only the default scheduler is checked",
			Fix:    "give --kubeconfig or --manifests to also check the schedulers Services name in " + proxy.AnnotationScheduler})
		return
	case s.Err != nil:
		r.add(Row{Name: "services", Status: Failed,
			Detail: fmt.Sprintf("listing Services (%s) failed: %v; only the default scheduler is checked", s.Source, s.Err),
			Fix:    "check the API server is reachable and the credentials may list Services"})
		return
	}
	var named []string
	for _, sch := range sortedKeys(s.Schedulers) {
		named = append(named, fmt.Sprintf("%s (%d)", sch, len(s.Schedulers[sch])))
	}
	detail := fmt.Sprintf("%d Services from %s", s.Services, s.Source)
	if len(named) > 0 {
		detail += "; schedulers named: " + strings.Join(named, ", ")
	} else {
		detail += "; none names a scheduler"
	}
	if s.Partial != nil {
		r.add(Row{Name: "services", Status: Failed,
			Detail: detail + "; some documents could not be read: " + oneLine(s.Partial.Error()),
			Fix:    "fix the documents named in the detail"})
	} else {
		r.add(Row{Name: "services", Status: OK, Detail: detail})
	}
	if len(s.Invalid) > 0 {
		r.add(Row{Name: "scheduler annotations", Status: Failed,
			Detail: fmt.Sprintf("not IPVS schedulers (those Services use the default): %s", strings.Join(s.Invalid, "; ")),
			Fix:    "set " + proxy.AnnotationScheduler + " to one of " + strings.Join(proxy.Schedulers(), ", ")})
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// module checks one kernel module and loads it when absent (unless NoModprobe).
func (r *runner) module(ctx context.Context, name string, required bool, why string) {
	if _, done := r.mods[name]; done {
		return
	}
	c := Row{Name: "module " + name, Required: required}
	st := r.lookup(name)
	switch {
	case st.Builtin:
		c.Status, c.Detail = OK, "built into the kernel"
	case st.Loaded:
		c.Status, c.Detail = OK, "loaded"
	case r.o.NoModprobe:
		c.Status = Missing
		c.Detail = "not loaded (--no-modprobe); " + r.fileText(st)
		c.Fix = r.moduleFix(name, st, false)
	case r.d.Modprobe == nil:
		c.Status, c.Detail, c.Fix = Failed, "not loaded, and no modprobe is available", r.moduleFix(name, st, false)
	default:
		err := r.d.Modprobe(ctx, name)
		after := r.lookup(name)
		switch {
		case err == nil && after.Present():
			c.Status, c.Detail = OK, "loaded now by modprobe "+name
		case err == nil:
			c.Status = Failed
			c.Detail = "modprobe " + name + " succeeded but the module is not loaded (an install or blacklist line in /etc/modprobe.d?)"
			c.Fix = "remove the install/blacklist line for " + name + " from /etc/modprobe.d, then modprobe " + name
		default:
			c.Status = Failed
			c.Detail = fmt.Sprintf("modprobe failed: %s; %s", oneLine(err.Error()), r.fileText(after))
			c.Fix = r.moduleFix(name, after, true)
		}
	}
	if c.Status != OK {
		c.Detail += "; needed for " + why
	}
	r.mods[name] = r.add(c)
}

func (r *runner) lookup(name string) modules.State {
	if r.d.Module == nil {
		return modules.State{Err: fmt.Errorf("no module lookup available")}
	}
	return r.d.Module(name)
}

func (r *runner) fileText(st modules.State) string {
	switch {
	case st.Err != nil:
		return "module index unreadable: " + oneLine(st.Err.Error())
	case st.File != "":
		return "module file " + st.File
	}
	return "the running kernel " + r.release() + " has no module file for it"
}

func (r *runner) release() string {
	if r.d.KernelRelease == "" {
		return "(unknown release)"
	}
	return r.d.KernelRelease
}

// moduleFix says how to get a module: modprobe when the kernel has a file for it, else the
// package that ships it (or the kernel option to build it). tried: modprobe already failed.
func (r *runner) moduleFix(name string, st modules.State, tried bool) string {
	if st.File != "" && tried {
		return "see why modprobe " + name + " failed (detail, dmesg; an install or blacklist line in /etc/modprobe.d?), fix it, then modprobe " + name
	}
	if st.File != "" {
		return "modprobe " + name
	}
	if st.Err != nil {
		return "modprobe " + name + " on the node, or mount the host's /lib/modules read-only into this container"
	}
	if fix := r.tooOldFix(name); fix != "" {
		return fix
	}
	pkg := modules.Package(r.d.OSID, r.release())
	opt := modules.KernelOption(name)
	return fmt.Sprintf("install %s, then modprobe %s; or use a kernel built with %s", pkg, name, opt)
}

// needs decides whether a probe that needs modules can run. With NoModprobe a probe whose
// module is absent is skipped: the kernel would load the module on demand, which the
// operator asked not to happen. Otherwise it runs even when loading failed (the kernel may
// still load the module itself, e.g. when this container has no modprobe but the host has).
func (r *runner) needs(c *Row, modules []string) bool {
	var absent []string
	for _, m := range modules {
		if !r.lookup(m).Present() {
			absent = append(absent, m)
		}
	}
	if len(absent) == 0 || !r.o.NoModprobe {
		return true
	}
	c.Status = Skipped
	c.Detail = "not run: module " + strings.Join(absent, ", ") + " is not loaded and --no-modprobe keeps the kernel from loading it"
	c.Fix = "modprobe " + strings.Join(absent, " && modprobe ")
	return false
}

// absentFix is the fix of a failed probe whose module is absent: fix the module first.
func (r *runner) absentFix(modules []string) string {
	for _, m := range modules {
		if !r.lookup(m).Present() {
			return "load module " + m + " first (see its row)"
		}
	}
	return ""
}

// recheckModules turns module rows that failed into ok when a probe made the kernel load
// the module on demand after all.
func (r *runner) recheckModules() {
	for name, i := range r.mods {
		c := &r.checks[i]
		if c.Status == OK || c.Status == Info {
			continue
		}
		if st := r.lookup(name); st.Present() {
			c.Detail = "loaded by the kernel on demand during the probes (" + c.Detail + ")"
			c.Status, c.Fix = OK, ""
		}
	}
}

// oneLine keeps a table row on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
