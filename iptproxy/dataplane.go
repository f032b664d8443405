package iptproxy

import (
	"context"
	"log/slog"
	"time"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// Dataplane is the iptables fallback mode: the rules of every Service (Proxy) and the
// clearing of stale UDP conntrack entries (FlowTracker). Nothing is bound and nothing
// drains. Only the controller's sync goroutine calls it.
type Dataplane struct {
	rules *Proxy
	flows *FlowTracker
	ct    dataplane.Conntrack
	log   *slog.Logger
}

var _ dataplane.Dataplane = (*Dataplane)(nil)

// NewDataplane returns the mode over ex (iptables.OSExec{} on a node, iptables.NewFakeExec()
// in tests); ct clears conntrack entries (nil: none).
func NewDataplane(ex iptables.Exec, cfg Config, ct dataplane.Conntrack, log *slog.Logger) (*Dataplane, error) {
	p, err := New(ex, cfg)
	if err != nil {
		return nil, err
	}
	return &Dataplane{rules: p, flows: NewFlowTracker(), ct: ct, log: log}, nil
}

// Rules returns the rules' writer (for kube-ipvs cleanup and tests).
func (d *Dataplane) Rules() *Proxy { return d.rules }

// rulesResult reports one write of the rules.
type rulesResult struct {
	Restores, Entries int
	Err               error
}

// Apply writes the changed Services' rules in one transaction per family, then clears the
// UDP flows the change made stale. A flow cleared while the rules still send it the old way
// (their restore failed) would be recreated the old way, so after a failure the repair
// that follows clears again.
func (d *Dataplane) Apply(ch dataplane.Change) dataplane.Result {
	for name, st := range ch.Services {
		d.rules.Stage(name, st)
	}
	r := d.rules.Open()
	if r.Err != nil {
		d.flows.FirewallFailed()
	}
	dataplane.ClearUDPFlows(d.ct, d.log, d.flows.Apply(ch.VSes))
	return result(r)
}

// repairWhole renders every Service and rewrites the rules when anything of ours drifted.
func (d *Dataplane) repairWhole(s dataplane.Snapshot) dataplane.Result {
	start := time.Now()
	d.rules.SetNodeIPs(s.NodeIPs)
	d.rules.SetServiceCIDRs(s.ServiceCIDRs)
	d.rules.StageAll(s.Services)
	r := d.rules.Resync()
	if r.Err != nil {
		d.flows.FirewallFailed()
	}
	dataplane.ClearUDPFlows(d.ct, d.log, d.flows.Resync(s.VSes))
	res := result(r)
	res.Phases.Firewall = time.Since(start)
	return res
}

// BeginRepair repairs everything (repairWhole), whether l.Whole asks it or not: the
// fallback's repair is one step. Its rules are one iptables-restore of the chains that
// drifted, with nothing to list in steps.
func (d *Dataplane) BeginRepair(l dataplane.Live) dataplane.Result {
	return d.repairWhole(l.Snapshot())
}

// RepairStep reports the repair done: BeginRepair did all of it.
func (d *Dataplane) RepairStep(dataplane.Live, int) (dataplane.Result, bool) {
	return dataplane.Result{}, true
}

// WatchDrift returns at once: the fallback hears of no drift (it binds nothing, and its
// rules drift only as far as the next repair finds).
func (d *Dataplane) WatchDrift(context.Context, func()) {}

// RepairDrift has nothing to repair: no drift is ever heard.
func (d *Dataplane) RepairDrift(dataplane.Live) dataplane.Result { return dataplane.Result{} }

// Watching is true: there are no notifications to wait for.
func (d *Dataplane) Watching() bool { return true }

// RealWeights returns no weights: the fallback's rules weigh no real servers (an endpoint is
// in a Service's chain or not), so after a restart every checked endpoint starts healthy.
func (d *Dataplane) RealWeights([]model.VSKey) (map[model.VSKey]map[model.RSKey]uint32, error) {
	return nil, nil
}

// Tick has nothing to do: nothing drains in iptables mode.
func (d *Dataplane) Tick() (dataplane.Result, time.Duration) { return dataplane.Result{}, 0 }

func result(r rulesResult) dataplane.Result {
	res := dataplane.Result{Writes: dataplane.Writes{Restores: r.Restores}, Err: r.Err, SetEntries: r.Entries}
	res.AddOp(dataplane.SubsystemIPTables, dataplane.OpUpdate, r.Restores)
	if r.Err != nil {
		res.AddFailures(dataplane.SubsystemIPTables, 1)
	}
	return res
}
