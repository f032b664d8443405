package main

import (
	"errors"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/controller"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// firewallAdapter drives packages firewall (pure), ipset and iptables for the controller.
// Only the controller's sync goroutine calls it.
type firewallAdapter struct {
	cfg     firewall.Config
	tracker *firewall.Tracker
	sets    *ipset.Reconciler
	rules   *iptables.Runner
	staged  map[model.ServiceName]map[firewall.SetName]map[firewall.Entry]bool
	del     firewall.Changes // removals waiting for Close
}

func newFirewall(cfg firewall.Config, backend iptables.Backend) (*firewallAdapter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	k, err := ipset.NewKernel()
	if err != nil {
		return nil, err
	}
	return &firewallAdapter{
		cfg:     cfg,
		tracker: firewall.NewTracker(),
		sets:    ipset.New(k),
		rules:   iptables.New(iptables.OSExec{}, iptables.Config{Backend: backend}),
		staged:  map[model.ServiceName]map[firewall.SetName]map[firewall.Entry]bool{},
	}, nil
}

func (f *firewallAdapter) SetNodeIPs(ips []netip.Addr) {
	f.cfg.NodeIPs = slices.Clone(ips)
}

func (f *firewallAdapter) Stage(name model.ServiceName, svc *corev1.Service, st *model.ServiceState) {
	f.staged[name] = firewall.ServiceEntries(svc, st, f.cfg)
}

// take moves the staged Services into the tracker and returns what to add and delete.
func (f *firewallAdapter) take() (add, del firewall.Changes) {
	if len(f.staged) == 0 {
		return nil, nil
	}
	add, del = f.tracker.UpdateMany(f.staged)
	f.staged = map[model.ServiceName]map[firewall.SetName]map[firewall.Entry]bool{}
	return add, del
}

func (f *firewallAdapter) Open() controller.FirewallResult {
	add, del := f.take()
	f.del = mergeChanges(f.del, del)
	var out controller.FirewallResult
	var errs []error
	if len(add) > 0 {
		r := f.sets.Apply(add)
		out.SetWrites += r.Writes
		errs = append(errs, r.Err, setErrs(r.Errors))
	}
	v4, v6 := firewall.RenderRules(f.cfg)
	rr := f.rules.Apply(v4, v6) // runs nothing unless the text changed
	out.Restores += rr.Restores
	errs = append(errs, rr.Err)
	out.Entries = f.entries()
	out.Err = errors.Join(errs...)
	return out
}

func (f *firewallAdapter) Close() controller.FirewallResult {
	var out controller.FirewallResult
	if len(f.del) > 0 {
		r := f.sets.Apply(f.del)
		out.SetWrites += r.Writes
		out.Err = errors.Join(r.Err, setErrs(r.Errors))
		f.del = nil
	}
	out.Entries = f.entries()
	return out
}

func (f *firewallAdapter) Resync() controller.FirewallResult {
	f.take()
	f.del = nil // the resync below removes whatever is no longer desired
	var out controller.FirewallResult
	r := f.sets.Resync(firewall.Sets(f.cfg), f.tracker.Desired())
	out.SetWrites += r.Writes
	errs := []error{r.Err, setErrs(r.Errors)}
	v4, v6 := firewall.RenderRules(f.cfg)
	ar := f.rules.Apply(v4, v6)
	rr := f.rules.Resync()
	out.Restores += ar.Restores + rr.Restores
	errs = append(errs, ar.Err, rr.Err)
	out.Entries = f.entries()
	out.Err = errors.Join(errs...)
	return out
}

// entries counts the desired set entries without copying them: it runs on every sync.
func (f *firewallAdapter) entries() int {
	n := 0
	for _, d := range firewall.Sets(f.cfg) {
		n += f.tracker.Count(d.Name)
	}
	return n
}

func setErrs(m map[firewall.SetName]error) error {
	var errs []error
	for _, e := range m {
		errs = append(errs, e)
	}
	return errors.Join(errs...)
}

func mergeChanges(a, b firewall.Changes) firewall.Changes {
	if a == nil {
		return b
	}
	for n, es := range b {
		if a[n] == nil {
			a[n] = map[firewall.Entry]bool{}
		}
		for e, v := range es {
			a[n][e] = v
		}
	}
	return a
}
