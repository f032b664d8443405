package iptproxy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"sync"

	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// Proxy is kube-ipvs' iptables-mode rules: Stage records changed Services, Open writes
// them, Resync repairs everything (Dataplane drives it). It is safe for concurrent use; calls are
// serialized.
type Proxy struct {
	mu      sync.Mutex
	cfg     Config
	tools   *iptables.Tools // the backend is detected on first use
	nodeIPs []netip.Addr
	// serviceCIDRs shape the static KIPVS-SERVICE-CIDRS chain (SetServiceCIDRs).
	serviceCIDRs []netip.Prefix
	inputs       map[model.ServiceName]*model.ServiceState // every Service with rules, as last staged
	dirty        map[model.ServiceName]bool                // staged since the last Open or Resync
	fams         []*famState
}

// famState is one family's view of the kernel.
type famState struct {
	f family
	// applied is what this process wrote and the kernel holds, per Service.
	applied map[model.ServiceName]*svcRules
	// synced: the static chains and jumps are in place and applied matches the kernel.
	// A failed restore clears it and sets failed; the next write is then a full rebuild.
	synced, failed bool
	// endpoints counts the KIPVS-SEP- chains of the desired state (rendered last).
	desiredEPs map[model.ServiceName]int
	totalEPs   int
}

// New returns a Proxy that runs the iptables tools through ex (iptables.OSExec{} on a node,
// iptables.NewFakeExec() in tests). Nothing runs before the first Open or Resync.
func New(ex iptables.Exec, cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.ClusterCIDRs = slices.Clone(cfg.ClusterCIDRs)
	p := &Proxy{cfg: cfg, tools: iptables.NewTools(ex, cfg.Tools), inputs: map[model.ServiceName]*model.ServiceState{}, dirty: map[model.ServiceName]bool{}}
	for _, f := range cfg.families() {
		p.fams = append(p.fams, &famState{f: f, applied: map[model.ServiceName]*svcRules{}, desiredEPs: map[model.ServiceName]int{}})
	}
	return p, nil
}

// SetNodeIPs gives the node's own addresses: a load balancer whose source ranges hold one of
// them admits the node with the load-balancer IP as source. Services with source ranges are
// re-rendered at the next Open when the addresses change.
func (p *Proxy) SetNodeIPs(ips []netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := make([]netip.Addr, 0, len(ips))
	for _, a := range ips {
		if a.IsValid() {
			next = append(next, a.Unmap())
		}
	}
	slices.SortFunc(next, func(a, b netip.Addr) int { return a.Compare(b) })
	next = slices.Compact(next)
	if slices.Equal(next, p.nodeIPs) {
		return
	}
	p.nodeIPs = next
	for name, st := range p.inputs {
		if st.SourceRanges.Set {
			p.dirty[name] = true
		}
	}
}

// SetServiceCIDRs gives the cluster's Service CIDRs. They change only the static chains,
// which the next Resync compares and rewrites; until then the old ones stay.
func (p *Proxy) SetServiceCIDRs(cidrs []netip.Prefix) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serviceCIDRs = slices.Clone(cidrs)
}

// Stage records the resolved desired state of one changed Service (nil: gone, or left to
// another proxy). Nothing is written before Open or Resync.
func (p *Proxy) Stage(name model.ServiceName, st *model.ServiceState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st == nil {
		delete(p.inputs, name)
	} else {
		p.inputs[name] = st
	}
	p.dirty[name] = true
}

// StageAll records every Service's resolved state at once (a repair): those it lacks are
// gone.
func (p *Proxy) StageAll(all map[model.ServiceName]*model.ServiceState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name := range p.inputs {
		if all[name] == nil {
			delete(p.inputs, name)
			p.dirty[name] = true
		}
	}
	for name, st := range all {
		if p.inputs[name] != st {
			p.inputs[name] = st
			p.dirty[name] = true
		}
	}
}

// Open writes the staged Services: per family, one iptables-restore --noflush with only
// their own chains (declared, so flushed, and rewritten when they changed; flushed and
// deleted when gone) and their own dispatch rules (-A/-I and -D lines). Unchanged
// Services write nothing; with nothing changed Open runs no process. A family whose
// static chains are not in place yet (or whose last write failed) is rebuilt whole.
func (p *Proxy) Open() rulesResult { return p.eachFamily(p.openFamily) }

// openFamily writes the Services names (taken from dirty) in one family's tables.
func (p *Proxy) openFamily(fs *famState, names []model.ServiceName, rc *renderConfig, out *rulesResult) error {
	desired := map[model.ServiceName]*svcRules{}
	for _, n := range names {
		desired[n] = p.render(fs, n, rc)
	}
	if !fs.synced {
		if len(names) == 0 && !fs.failed {
			return nil // nothing asked for yet: wait for Resync
		}
		return p.rebuild(fs, rc, out)
	}
	t := newTx()
	for _, n := range names {
		t.diff(fs.applied[n], desired[n])
	}
	if t.empty() {
		return nil
	}
	if err := p.restore(fs, t.transaction(), out); err != nil {
		fs.synced, fs.failed = false, true
		return err
	}
	for n, r := range desired {
		if r.empty() {
			delete(fs.applied, n)
		} else {
			fs.applied[n] = r
		}
	}
	return nil
}

// Resync renders every Service, reads each family's tables (one -save) and, when anything
// of ours differs from that (a chain flushed, deleted or edited, a rule added, a jump
// missing or no longer first, a KIPVS- chain we do not want), rebuilds all of it in one
// restore: every chain of ours declared and rewritten, and in each built-in chain whose
// jumps are not first and once, every jump to ours deleted and ours inserted first
// (iptables.Reconcile), stray KIPVS- chains removed. When everything is right it only
// reads, so a restarted proxy adopts intact rules.
func (p *Proxy) Resync() rulesResult {
	return p.eachFamily(func(fs *famState, _ []model.ServiceName, rc *renderConfig, out *rulesResult) error {
		return p.rebuild(fs, rc, out)
	})
}

// eachFamily takes the staged Services and calls write for every family with them, under
// the lock; the result gathers the families' restores and errors.
func (p *Proxy) eachFamily(write func(fs *famState, names []model.ServiceName, rc *renderConfig, out *rulesResult) error) rulesResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := p.takeDirty()
	rc := p.renderConfig()
	var out rulesResult
	var errs []error
	for _, fs := range p.fams {
		errs = append(errs, write(fs, names, rc, &out))
	}
	out.Entries = p.entries()
	out.Err = errors.Join(errs...)
	return out
}

// Cleanup removes every KIPVS- chain and every jump to one from all tables of both
// families, on every installed backend (iptables.Tools.RemoveOurs, as the IPVS mode's
// Cleanup), and forgets what was applied. For `kube-ipvs cleanup` and tests.
func (p *Proxy) Cleanup() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.tools.RemoveOurs()
	for _, fs := range p.fams {
		fs.applied = map[model.ServiceName]*svcRules{}
		fs.synced = false
	}
	return err
}

// Backend returns the iptables backend in use, detecting it on first use.
func (p *Proxy) Backend() (iptables.Backend, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tools.Backend()
}

func (p *Proxy) takeDirty() []model.ServiceName {
	names := make([]model.ServiceName, 0, len(p.dirty))
	for n := range p.dirty {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].String() < names[j].String() })
	p.dirty = map[model.ServiceName]bool{}
	return names
}

func (p *Proxy) renderConfig() *renderConfig {
	return newRenderConfig(p.cfg, p.nodeIPs, p.serviceCIDRs)
}

// render renders one Service for a family and records its endpoint count.
func (p *Proxy) render(fs *famState, name model.ServiceName, rc *renderConfig) *svcRules {
	var r *svcRules
	if in, ok := p.inputs[name]; ok {
		r = renderService(in, fs.f, rc)
	}
	n := 0
	if r != nil {
		n = r.endpoints
	}
	fs.totalEPs += n - fs.desiredEPs[name]
	if n == 0 {
		delete(fs.desiredEPs, name)
	} else {
		fs.desiredEPs[name] = n
	}
	return r
}

func (p *Proxy) entries() int {
	n := 0
	for _, fs := range p.fams {
		n += fs.totalEPs
	}
	return n
}

func (p *Proxy) restore(fs *famState, t *iptables.Transaction, out *rulesResult) error {
	if _, err := p.tools.Backend(); err != nil {
		return err
	}
	out.Restores++
	if err := p.tools.Restore(fs.f, t); err != nil {
		return fmt.Errorf("%s: %w", fs.f, err)
	}
	return nil
}

// rebuild renders every Service for the family and makes the kernel match: nothing is
// written when it already does.
func (p *Proxy) rebuild(fs *famState, rc *renderConfig, out *rulesResult) error {
	desired := map[model.ServiceName]*svcRules{}
	for n := range p.inputs {
		if r := p.render(fs, n, rc); !r.empty() {
			desired[n] = r
		}
	}
	// Services rendered before and gone now.
	for n := range fs.desiredEPs {
		if _, ok := p.inputs[n]; !ok {
			p.render(fs, n, rc)
		}
	}
	full := fullState(fs.f, rc, desired)
	s, err := p.tools.Save(fs.f)
	if err != nil {
		fs.synced, fs.failed = false, true
		return fmt.Errorf("%s: %w", fs.f, err)
	}
	if t := full.repair(s); t != nil {
		if err := p.restore(fs, t, out); err != nil {
			fs.synced, fs.failed = false, true
			return err
		}
	}
	fs.applied = desired
	fs.synced, fs.failed = true, false
	return nil
}
