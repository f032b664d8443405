package preflight

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/kube-ipvs/kube-ipvs/internal/oplog"
	"github.com/kube-ipvs/kube-ipvs/modules"
)

// Fake is an in-memory node for tests: modules that are loaded, built in, or loadable,
// modprobe that loads them with their dependencies, and probes that succeed unless told
// otherwise. It logs every modprobe ("modprobe ip_vs") and probe ("probe vs rr"); TakeOps
// returns the log.
type Fake struct {
	oplog.Log
	mu sync.Mutex
	// Loaded, Builtin and Files (module -> file under /lib/modules) describe the modules.
	Loaded  map[string]bool
	Builtin map[string]bool
	Files   map[string]string
	// ModprobeErr makes modprobe of that module (also as a dependency) fail.
	ModprobeErr map[string]error
	// NoOpLoad makes modprobe of that module exit 0 without loading it (an install line).
	NoOpLoad map[string]bool
	// Depends lists the dependencies modprobe loads first.
	Depends map[string][]string
	// ProbeErr makes a probe fail: keys "ipvs", "vs <scheduler>", "ipset", "iptables",
	// "dummy", "sysctl <name>".
	ProbeErr map[string]error
	// Autoload lists, per probe key, the modules the kernel loads on demand during it.
	Autoload map[string][]string
	// Sysctls holds the current values; a sysctl that is absent does not exist.
	Sysctls map[string]string
}

// NewFake returns a node where every module the proxy needs is loadable and nothing is
// loaded yet, with the usual dependencies and the sysctls present.
func NewFake() *Fake {
	f := &Fake{
		Loaded: map[string]bool{}, Builtin: map[string]bool{}, Files: map[string]string{},
		ModprobeErr: map[string]error{}, NoOpLoad: map[string]bool{}, ProbeErr: map[string]error{},
		Autoload: map[string][]string{},
		Depends: map[string][]string{
			"ip_vs":   {"nf_conntrack"},
			"xt_ipvs": {"ip_vs"},
			"xt_set":  {"ip_set"},
		},
		Sysctls: map[string]string{
			"net.ipv4.ip_forward": "0", "net.ipv4.vs.conntrack": "0", "net.ipv4.vs.expire_nodest_conn": "0",
			"net.ipv4.vs.expire_quiescent_template": "0", "net.ipv4.vs.conn_reuse_mode": "1",
			"net.ipv4.conf.all.arp_ignore": "0", "net.ipv4.conf.all.arp_announce": "0",
		},
	}
	mods := []string{"ip_vs", "nf_conntrack", "dummy", "ip_set", "xt_set", "xt_ipvs"}
	for _, s := range []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "mh", "twos"} {
		mods = append(mods, "ip_vs_"+s)
		f.Depends["ip_vs_"+s] = []string{"ip_vs"}
	}
	for _, t := range modules.SetTypes() {
		mods = append(mods, modules.ForSetType(t))
		f.Depends[modules.ForSetType(t)] = []string{"ip_set"}
	}
	for _, m := range mods {
		f.Files[m] = "kernel/net/" + m + ".ko.xz"
	}
	return f
}

// LoadAll marks every loadable module loaded.
func (f *Fake) LoadAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for m := range f.Files {
		f.Loaded[m] = true
	}
}

// Deps returns Deps backed by the fake.
func (f *Fake) Deps() *Deps {
	return &Deps{
		Module:             f.module,
		Modprobe:           f.modprobe,
		IPVSFamily:         func() (string, error) { return "IPVS family answers", f.probe("ipvs", "ip_vs") },
		ProbeVirtualServer: func(s string) error { return f.probe("vs "+s, "ip_vs", "ip_vs_"+s) },
		IpsetProtocol:      func() (string, error) { return "ipset protocol 7", f.probe("ipset", "ip_set") },
		Iptables:           func() (string, error) { return "backend nft", f.probe("iptables") },
		DummyLink:          func(string) error { return f.probe("dummy", "dummy") },
		Sysctl:             f.sysctl,
		KernelRelease:      "6.1.0-57-amd64",
		OSID:               "debian",
	}
}

func (f *Fake) module(name string) modules.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return modules.State{Loaded: f.Loaded[name], Builtin: f.Builtin[name], File: f.Files[name]}
}

func (f *Fake) modprobe(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Record("modprobe " + name)
	return f.load(name)
}

// load loads a module after its dependencies, as modprobe does (mu held).
func (f *Fake) load(name string) error {
	if f.Loaded[name] || f.Builtin[name] {
		return nil
	}
	if err := f.ModprobeErr[name]; err != nil {
		return err
	}
	if f.Files[name] == "" {
		return fmt.Errorf("modprobe: FATAL: Module %s not found in directory /lib/modules/6.1.0-57-amd64", name)
	}
	for _, d := range f.Depends[name] {
		if err := f.load(d); err != nil {
			return err
		}
	}
	if !f.NoOpLoad[name] {
		f.Loaded[name] = true
	}
	return nil
}

// probe records a probe, applies its autoloads, then fails if told to or if a module it
// needs is absent.
func (f *Fake) probe(key string, needs ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Record("probe " + key)
	for _, m := range f.Autoload[key] {
		f.Loaded[m] = true
	}
	if err := f.ProbeErr[key]; err != nil {
		return err
	}
	for _, m := range needs {
		if !f.Loaded[m] && !f.Builtin[m] {
			return fmt.Errorf("%s: module %s is not loaded", key, m)
		}
	}
	return nil
}

func (f *Fake) sysctl(name string) (string, error) {
	perr := f.probe("sysctl " + name)
	f.mu.Lock()
	defer f.mu.Unlock()
	if perr != nil {
		// As the real probe: the value is read before the open for writing fails.
		return f.Sysctls[name], perr
	}
	v, ok := f.Sysctls[name]
	if strings.HasPrefix(name, "net.ipv4.vs.") && !f.Loaded["ip_vs"] && !f.Builtin["ip_vs"] {
		ok = false // the kernel has these only while ip_vs is loaded
	}
	if !ok {
		return "", fmt.Errorf("open /proc/sys/%s: %w", name, fs.ErrNotExist)
	}
	return v, nil
}

// LoadedModules lists the loaded modules, sorted.
func (f *Fake) LoadedModules() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.Loaded))
}
