package adapters

import (
	"errors"
	"net/netip"
	"slices"

	"github.com/kube-ipvs/kube-ipvs/controller"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// Firewall drives packages firewall (pure), ipset and iptables for the controller. Only the
// controller's sync goroutine calls it.
type Firewall struct {
	cfg     firewall.Config
	tracker *firewall.Tracker
	sets    *ipset.Reconciler
	rules   *iptables.Runner
	// staged are the changed Services' entries, packed: at a cold start that is every entry
	// of the cluster at once.
	staged  map[model.ServiceName][]firewall.Member
	scratch []firewall.Member
	del     firewall.Changes // removals waiting for Close
}

var _ controller.Firewall = (*Firewall)(nil)

// NewFirewall validates cfg and opens the ipset netlink interface of the current network
// namespace; iptables runs on backend ("" detects the node's).
func NewFirewall(cfg firewall.Config, backend iptables.Backend) (*Firewall, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	k, err := ipset.NewKernel()
	if err != nil {
		return nil, err
	}
	return NewFirewallWith(cfg, ipset.New(k), iptables.New(iptables.OSExec{}, iptables.Config{Backend: backend})), nil
}

// NewFirewallWith builds the adapter over given reconcilers (fakes in tests); cfg must be
// valid.
func NewFirewallWith(cfg firewall.Config, sets *ipset.Reconciler, rules *iptables.Runner) *Firewall {
	return &Firewall{
		cfg:     cfg,
		tracker: firewall.NewTracker(),
		sets:    sets,
		rules:   rules,
		staged:  map[model.ServiceName][]firewall.Member{},
	}
}

func (f *Firewall) SetNodeIPs(ips []netip.Addr) {
	f.cfg.NodeIPs = slices.Clone(ips)
}

func (f *Firewall) Stage(name model.ServiceName, st *model.ServiceState) {
	// Built in a reused buffer; kept, in a slice of exactly their number (the Tracker holds it
	// as long as the Service lives), only when they changed: a full sync stages every Service,
	// and holding all their entries a second time would double the memory of a large cluster.
	f.scratch = firewall.SortMembers(firewall.AppendMembers(f.scratch[:0], st, f.cfg))
	if f.tracker.Same(name, f.scratch) {
		delete(f.staged, name)
		return
	}
	f.staged[name] = slices.Clone(f.scratch)
}

// take moves the staged Services into the tracker and, withChanges, returns what to add and
// delete.
func (f *Firewall) take(withChanges bool) (add, del firewall.Changes) {
	if len(f.staged) == 0 {
		return nil, nil
	}
	add, del = f.tracker.UpdateMembers(f.staged, withChanges)
	f.staged = map[model.ServiceName][]firewall.Member{}
	return add, del
}

func (f *Firewall) Open() controller.FirewallResult {
	add, del := f.take(true)
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

func (f *Firewall) Close() controller.FirewallResult {
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

func (f *Firewall) Resync() controller.FirewallResult {
	f.take(false)
	f.del = nil // the resync below removes whatever is no longer desired
	var out controller.FirewallResult
	r := f.sets.ResyncSets(firewall.Sets(f.cfg), f.tracker)
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
func (f *Firewall) entries() int {
	n := 0
	for _, d := range firewall.Sets(f.cfg) {
		n += f.tracker.Count(d.Name)
	}
	return n
}

// Sets returns the ipset reconciler (for tests and the bench).
func (f *Firewall) Sets() *ipset.Reconciler { return f.sets }

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
