package iptproxy

import (
	"slices"
	"sort"

	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// tx is one incremental iptables-restore --noflush input: the chains and dispatch rules of
// the Services that changed, nothing else.
type tx struct {
	tables map[string]*txTable
}

// txTable is one table's part, written in this order so that every line is valid where
// it stands: chains to (re)write are declared (created, or flushed, which also drops their
// jumps to endpoint chains that go away), chains that go away are flushed, dispatch rules
// that go away are deleted, the declared chains get their rules, new dispatch rules are
// added, and the chains that went away, no longer referenced, are deleted.
type txTable struct {
	declares, flushes, removes []iptables.Chain
	deletes, rules, adds       []iptables.Rule
}

func newTx() *tx { return &tx{tables: map[string]*txTable{}} }

// table returns the part of table name, created on first use.
func (t *tx) table(name string) *txTable {
	if t.tables[name] == nil {
		t.tables[name] = &txTable{}
	}
	return t.tables[name]
}

func (k chainKey) chain() iptables.Chain { return iptables.Chain{Table: k.table, Name: k.name} }

func (d dispatchRule) rule() iptables.Rule {
	return iptables.Rule{Table: d.table, Chain: d.chain, Spec: d.spec}
}

// diff adds what turns one Service's old rules into its new ones (either may be nil).
func (t *tx) diff(old, cur *svcRules) {
	oldChains := map[chainKey][]string{}
	if old != nil {
		for _, c := range old.chains {
			oldChains[c.chainKey] = c.rules
		}
	}
	newChains := map[chainKey]bool{}
	if cur != nil {
		for _, c := range cur.chains {
			newChains[c.chainKey] = true
			if prev, ok := oldChains[c.chainKey]; ok && slices.Equal(prev, c.rules) {
				continue
			}
			tt := t.table(c.table)
			tt.declares = append(tt.declares, c.chain())
			for _, r := range c.rules {
				tt.rules = append(tt.rules, iptables.Rule{Table: c.table, Chain: c.name, Spec: r})
			}
		}
	}
	if old != nil {
		for _, c := range old.chains {
			if !newChains[c.chainKey] {
				tt := t.table(c.table)
				tt.flushes = append(tt.flushes, c.chain())
				tt.removes = append(tt.removes, c.chain())
			}
		}
	}
	oldD, newD := map[dispatchRule]bool{}, map[dispatchRule]bool{}
	if old != nil {
		for _, d := range old.dispatch {
			oldD[d] = true
		}
	}
	if cur != nil {
		for _, d := range cur.dispatch {
			newD[d] = true
			if !oldD[d] {
				tt := t.table(d.table)
				tt.adds = append(tt.adds, d.rule())
			}
		}
	}
	if old != nil {
		for _, d := range old.dispatch {
			if !newD[d] {
				tt := t.table(d.table)
				tt.deletes = append(tt.deletes, d.rule())
			}
		}
	}
}

func (t *tx) empty() bool { return len(t.tables) == 0 }

// transaction is the restore input, nat first.
func (t *tx) transaction() *iptables.Transaction {
	out := iptables.NewTransaction()
	for _, name := range []string{tableNAT, tableFilter} {
		tt := t.tables[name]
		if tt == nil {
			continue
		}
		out.Table(name)
		for _, c := range tt.declares {
			out.Declare(c)
		}
		for _, c := range tt.flushes {
			out.Flush(c)
		}
		for _, r := range tt.deletes {
			out.Delete(r)
		}
		for _, r := range tt.rules {
			out.Append(r)
		}
		for _, r := range tt.adds {
			addDispatch(out, r)
		}
		for _, c := range tt.removes {
			out.DeleteChain(c)
		}
	}
	return out
}

// dispatchChains are the shared chains that hold Services' dispatch rules.
var dispatchChains = map[chainKey]bool{
	{tableNAT, ChainServices}:     true,
	{tableNAT, ChainNodePorts}:    true,
	{tableFilter, ChainServices}:  true,
	{tableFilter, ChainFirewall}:  true,
	{tableFilter, ChainNodePorts}: true,
}

// addDispatch adds one dispatch rule: nat KIPVS-SERVICES ends with its jump to
// KIPVS-NODEPORTS, so rules go before it; elsewhere they are appended.
func addDispatch(t *iptables.Transaction, r iptables.Rule) {
	if r.Table == tableNAT && r.Chain == ChainServices {
		t.Insert(r, 1)
		return
	}
	t.Append(r)
}

// fullRules is a family's complete desired state: every chain of ours with its rules in
// order (the shared chains first, with the Services' dispatch rules before their fixed
// rules), and the jumps from the built-in chains.
type fullRules struct {
	chains []chainRules
	jumps  []dispatchRule
}

func fullState(f family, rc *renderConfig, services map[model.ServiceName]*svcRules) *fullRules {
	static, jumps := staticChains(f, rc)
	names := make([]model.ServiceName, 0, len(services))
	for n := range services {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].String() < names[j].String() })
	dispatch := map[chainKey][]string{}
	var own []chainRules
	for _, n := range names {
		r := services[n]
		for _, d := range r.dispatch {
			k := chainKey{d.table, d.chain}
			dispatch[k] = append(dispatch[k], d.spec)
		}
		own = append(own, r.chains...)
	}
	full := &fullRules{jumps: jumps}
	for _, c := range static {
		full.chains = append(full.chains, chainRules{c.chainKey, append(dispatch[c.chainKey], c.rules...)})
	}
	full.chains = append(full.chains, own...)
	return full
}

// desired is the family's complete state as restore input: every chain of ours declared
// and written, and the jumps from the built-in chains (the last inserted first).
func (fr *fullRules) desired() *iptables.Transaction {
	t := iptables.NewTransaction()
	for _, tn := range []string{tableNAT, tableFilter} {
		t.Table(tn)
		for _, c := range fr.chains {
			if c.table == tn {
				t.Declare(c.chain())
			}
		}
		for _, c := range fr.chains {
			if c.table != tn {
				continue
			}
			for _, r := range c.rules {
				t.Append(iptables.Rule{Table: tn, Chain: c.name, Spec: r})
			}
		}
		// "-I c 1" pushes down what was inserted before: insert the last jump first.
		for i := len(fr.jumps) - 1; i >= 0; i-- {
			if j := fr.jumps[i]; j.table == tn {
				t.Jump(j.rule())
			}
		}
	}
	return t
}

// repair returns the restore input that turns the kernel's state s into this one, nil
// when s already is this state: the same chains of ours in every table with the same
// rules (in order; in any order in the dispatch chains, where -I and -A interleave them),
// and in the built-in chains our jumps first, once, and no other rule jumping to ours.
// Otherwise every chain of ours is declared and rewritten, and iptables.Reconcile puts the
// jumps first again and removes chains of ours no longer wanted, in every table.
func (fr *fullRules) repair(s *iptables.Ruleset) *iptables.Transaction {
	if fr.matches(s) {
		return nil
	}
	return iptables.Reconcile(fr.desired(), s)
}

func (fr *fullRules) matches(s *iptables.Ruleset) bool {
	want := map[string]map[string][]string{} // table -> chain -> rules
	for _, c := range fr.chains {
		if want[c.table] == nil {
			want[c.table] = map[string][]string{}
		}
		want[c.table][c.name] = c.rules
	}
	jumps := map[chainKey][]string{}
	for _, j := range fr.jumps {
		k := chainKey{j.table, j.chain}
		jumps[k] = append(jumps[k], j.spec)
	}
	for tn := range want {
		if s.Table(tn) == nil {
			return false
		}
	}
	for k := range jumps {
		if !s.Table(k.table).Has(k.name) {
			return false
		}
	}
	for _, t := range s.Tables {
		have := 0
		for _, c := range t.Chains {
			switch {
			case iptables.IsOurs(c):
				rules, ok := want[t.Name][c]
				if !ok || !sameRules(rules, t.Rules[c], dispatchChains[chainKey{t.Name, c}]) {
					return false
				}
				have++
			case iptables.IsBuiltin(c):
				if !t.JumpsFirst(c, jumps[chainKey{t.Name, c}]) {
					return false
				}
			}
		}
		if have != len(want[t.Name]) {
			return false
		}
	}
	return true
}

func sameRules(want, have []string, anyOrder bool) bool {
	if len(want) != len(have) {
		return false
	}
	w := make([]string, len(want))
	h := make([]string, len(have))
	for i := range want {
		w[i], h[i] = iptables.Normalize(want[i]), iptables.Normalize(have[i])
	}
	if anyOrder {
		sort.Strings(w)
		sort.Strings(h)
	}
	return slices.Equal(w, h)
}
