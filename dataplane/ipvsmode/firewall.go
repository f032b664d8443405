package ipvsmode

import (
	"errors"
	"net/netip"
	"slices"
	"time"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// firewallPart drives packages firewall (pure), ipset and iptables: stage records the
// changed Services' entries, open adds new entries and keeps the rules in place before
// the IPVS changes, close removes old entries after them.
type firewallPart struct {
	cfg     firewall.Config
	tracker *firewall.Tracker
	sets    *ipset.Reconciler
	rules   *iptables.Runner
	// staged are the changed Services' entries, packed: at a cold start that is every entry
	// of the cluster at once.
	staged  map[model.ServiceName][]firewall.Member
	scratch []firewall.Member
	del     firewall.Changes // removals waiting for close
	// cidrs are the Service CIDR sets' entries, from the last repair's snapshot.
	cidrs firewall.EntryMap
	// derived is what cfg alone decides (the sets, the rules' text), computed once per cfg:
	// every Apply needs it, and rendering the rules on each one was a fifth of what a
	// repair cycle allocated at 50,000 Services. nil: to compute (setNodeIPs resets it).
	derived *cfgDerived
}

// cfgDerived is what firewallPart.cfg decides.
type cfgDerived struct {
	sets    []firewall.SetDef
	rulesV4 string
	rulesV6 string
}

// fromCfg returns what cfg decides, computing it on first use.
func (f *firewallPart) fromCfg() *cfgDerived {
	if f.derived == nil {
		v4, v6 := firewall.RenderRules(f.cfg)
		f.derived = &cfgDerived{sets: firewall.Sets(f.cfg), rulesV4: v4, rulesV6: v6}
	}
	return f.derived
}

// setNodeIPs changes the node addresses the rules and sets are made for.
func (f *firewallPart) setNodeIPs(ips []netip.Addr) {
	f.cfg.NodeIPs = ips
	f.derived = nil
}

func newFirewallPart(cfg firewall.Config, sets *ipset.Reconciler, rules *iptables.Runner) *firewallPart {
	return &firewallPart{cfg: cfg, tracker: firewall.NewTracker(), sets: sets, rules: rules,
		staged: map[model.ServiceName][]firewall.Member{}}
}

// stage records a Service's resolved state (nil: gone). The entries are built in a reused
// buffer and kept, in a slice of exactly their number (the Tracker holds it as long as the
// Service lives), only when they changed: a repair stages every Service, and holding all
// their entries a second time would double the memory of a large cluster.
func (f *firewallPart) stage(name model.ServiceName, st *model.ServiceState) {
	f.scratch = firewall.SortMembers(firewall.AppendMembers(f.scratch[:0], st, f.cfg))
	if f.tracker.Same(name, f.scratch) {
		delete(f.staged, name)
		return
	}
	f.staged[name] = slices.Clone(f.scratch)
}

// take moves the staged Services into the tracker and, withChanges, returns what to add and
// delete.
func (f *firewallPart) take(withChanges bool) (add, del firewall.Changes) {
	if len(f.staged) == 0 {
		return nil, nil
	}
	add, del = f.tracker.UpdateMembers(f.staged, withChanges)
	f.staged = map[model.ServiceName][]firewall.Member{}
	return add, del
}

// applyAdditions writes what a sync adds before its virtual servers exist: the staged
// Services' new set entries and any change of the rules. The entries they lose are kept
// for applyRemovals.
func (f *firewallPart) applyAdditions() dataplane.Result {
	add, del := f.take(true)
	f.del = mergeChanges(f.del, del)
	var res dataplane.Result
	if len(add) > 0 {
		res.Merge(setsResult(f.sets.Apply(add), dataplane.OpAdd))
	}
	res.Merge(f.applyRules())
	res.SetEntries = f.entries()
	return res
}

// applyRemovals deletes the set entries the sync's Services lost, once IPVS no longer
// sends packets that need them.
func (f *firewallPart) applyRemovals() dataplane.Result {
	var res dataplane.Result
	if len(f.del) > 0 {
		res.Merge(setsResult(f.sets.Apply(f.del), dataplane.OpDelete))
		f.del = nil
	}
	res.SetEntries = f.entries()
	return res
}

// repair applies everything staged and repairs sets and rules against the kernel.
func (f *firewallPart) repair() dataplane.Result {
	start := time.Now()
	f.take(false)
	f.del = nil // the repair below removes whatever is no longer desired
	res := setsResult(f.sets.ResyncSets(f.fromCfg().sets, f.desired()), dataplane.OpUpdate)
	res.Merge(f.applyRules())
	rr := f.rules.Resync()
	res.Merge(rulesResult(rr.Restores, rr.Err))
	res.SetEntries = f.entries()
	res.Phases.Firewall = time.Since(start)
	return res
}

// applyRules keeps the constant rules in place; it runs nothing unless their text changed.
func (f *firewallPart) applyRules() dataplane.Result {
	d := f.fromCfg()
	r := f.rules.Apply(d.rulesV4, d.rulesV6)
	return rulesResult(r.Restores, r.Err)
}

// desired is every set's desired content: the Services' entries and the Service CIDRs.
func (f *firewallPart) desired() firewall.DesiredSets {
	return firewall.WithServiceCIDRs(f.tracker, f.cidrs)
}

// entries counts the desired set entries without copying them: it runs on every sync.
func (f *firewallPart) entries() int {
	n := 0
	desired := f.desired()
	for _, d := range f.fromCfg().sets {
		n += desired.Count(d.Name)
	}
	return n
}

func setsResult(r ipset.Result, op string) dataplane.Result {
	var errs []error
	for _, e := range r.Errors {
		errs = append(errs, e)
	}
	res := dataplane.Result{Writes: dataplane.Writes{SetEntries: r.Writes}, Err: errors.Join(append(errs, r.Err)...)}
	res.AddOp(dataplane.SubsystemIPSet, op, r.Writes)
	if res.Err != nil {
		res.AddFailures(dataplane.SubsystemIPSet, 1)
	}
	return res
}

func rulesResult(restores int, err error) dataplane.Result {
	res := dataplane.Result{Writes: dataplane.Writes{Restores: restores}, Err: err}
	res.AddOp(dataplane.SubsystemIPTables, dataplane.OpUpdate, restores)
	if err != nil {
		res.AddFailures(dataplane.SubsystemIPTables, 1)
	}
	return res
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
