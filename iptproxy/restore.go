package iptproxy

import (
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

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
	declares, flushes, deletes, rules, adds, removes []string
}

func newTx() *tx { return &tx{tables: map[string]*txTable{}} }

func (t *tx) table(name string) *txTable {
	tt := t.tables[name]
	if tt == nil {
		tt = &txTable{}
		t.tables[name] = tt
	}
	return tt
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
			tt.declares = append(tt.declares, ":"+c.name+" - [0:0]")
			for _, r := range c.rules {
				tt.rules = append(tt.rules, "-A "+c.name+" "+r)
			}
		}
	}
	if old != nil {
		for _, c := range old.chains {
			if !newChains[c.chainKey] {
				tt := t.table(c.table)
				tt.flushes = append(tt.flushes, "-F "+c.name)
				tt.removes = append(tt.removes, "-X "+c.name)
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
				tt.adds = append(tt.adds, d.addLine())
			}
		}
	}
	if old != nil {
		for _, d := range old.dispatch {
			if !newD[d] {
				tt := t.table(d.table)
				tt.deletes = append(tt.deletes, "-D "+d.chain+" "+d.spec)
			}
		}
	}
}

func (t *tx) empty() bool { return len(t.tables) == 0 }

func (t *tx) text() string {
	var b strings.Builder
	for _, name := range []string{tableNAT, tableFilter} {
		tt := t.tables[name]
		if tt == nil {
			continue
		}
		b.WriteString("*" + name + "\n")
		for _, part := range [][]string{tt.declares, tt.flushes, tt.deletes, tt.rules, tt.adds, tt.removes} {
			for _, l := range part {
				b.WriteString(l + "\n")
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
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

// builtins are the only chains not ours that we write to, and only our jumps.
var builtins = map[string]bool{"PREROUTING": true, "INPUT": true, "FORWARD": true, "OUTPUT": true, "POSTROUTING": true}

// repair returns the restore input that turns the kernel's state s into this one, or ""
// when s already is this state: the same chains of ours in every table with the same
// rules (in order; in any order in the dispatch chains, where -I and -A interleave them),
// and in the built-in chains our jumps first, once, and no other rule jumping to ours.
func (fr *fullRules) repair(s saved) string {
	if fr.matches(s) {
		return ""
	}
	var b strings.Builder
	stale := func(t *savedTable) []string {
		var out []string
		if t == nil {
			return nil
		}
		want := map[string]bool{}
		for _, c := range fr.chains {
			if t.name == c.table {
				want[c.name] = true
			}
		}
		for _, c := range t.chains {
			if strings.HasPrefix(c, ownPrefix) && !want[c] {
				out = append(out, c)
			}
		}
		return out
	}
	jumpDeletes := func(t *savedTable) []string {
		var out []string
		if t == nil {
			return nil
		}
		for _, c := range t.chains {
			if !builtins[c] {
				continue
			}
			for _, spec := range t.rules[c] {
				if strings.HasPrefix(iptables.Target(iptables.Tokens(spec)), ownPrefix) {
					out = append(out, "-D "+c+" "+spec)
				}
			}
		}
		return out
	}
	for _, tn := range []string{tableNAT, tableFilter} {
		t := s.tables[tn]
		st := stale(t)
		b.WriteString("*" + tn + "\n")
		for _, c := range fr.chains {
			if c.table == tn {
				b.WriteString(":" + c.name + " - [0:0]\n")
			}
		}
		for _, l := range jumpDeletes(t) {
			b.WriteString(l + "\n")
		}
		for _, c := range st {
			b.WriteString("-F " + c + "\n")
		}
		for _, c := range fr.chains {
			if c.table != tn {
				continue
			}
			for _, r := range c.rules {
				b.WriteString("-A " + c.name + " " + r + "\n")
			}
		}
		// "-I c 1" pushes down what was inserted before: insert the last jump first.
		for i := len(fr.jumps) - 1; i >= 0; i-- {
			if j := fr.jumps[i]; j.table == tn {
				b.WriteString("-I " + j.chain + " 1 " + j.spec + "\n")
			}
		}
		for _, c := range st {
			b.WriteString("-X " + c + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	// Other tables (mangle, raw, ...) hold nothing of ours: remove what an older version
	// or the IPVS mode left there.
	for _, tn := range s.order {
		if tn == tableNAT || tn == tableFilter {
			continue
		}
		t := s.tables[tn]
		dels, st := jumpDeletes(t), stale(t)
		if len(dels) == 0 && len(st) == 0 {
			continue
		}
		b.WriteString("*" + tn + "\n")
		for _, l := range dels {
			b.WriteString(l + "\n")
		}
		for _, c := range st {
			b.WriteString("-F " + c + "\n")
		}
		for _, c := range st {
			b.WriteString("-X " + c + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

func (fr *fullRules) matches(s saved) bool {
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
		if s.tables[tn] == nil {
			return false
		}
	}
	for k := range jumps {
		if t := s.tables[k.table]; t == nil || !slices.Contains(t.chains, k.name) {
			return false
		}
	}
	for _, tn := range s.order {
		t := s.tables[tn]
		have := 0
		for _, c := range t.chains {
			switch {
			case strings.HasPrefix(c, ownPrefix):
				rules, ok := want[tn][c]
				if !ok || !sameRules(rules, t.rules[c], dispatchChains[chainKey{tn, c}]) {
					return false
				}
				have++
			case builtins[c]:
				if !jumpsFirst(jumps[chainKey{tn, c}], t.rules[c]) {
					return false
				}
			}
		}
		if have != len(want[tn]) {
			return false
		}
	}
	return true
}

// jumpsFirst reports whether a built-in chain starts with exactly our jumps and has no
// other rule that jumps to one of our chains.
func jumpsFirst(want, have []string) bool {
	if len(have) < len(want) {
		return false
	}
	for i, w := range want {
		if normalize(w) != normalize(have[i]) {
			return false
		}
	}
	for _, h := range have[len(want):] {
		if strings.HasPrefix(iptables.Target(iptables.Tokens(h)), ownPrefix) {
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
		w[i], h[i] = normalize(want[i]), normalize(have[i])
	}
	if anyOrder {
		sort.Strings(w)
		sort.Strings(h)
	}
	return slices.Equal(w, h)
}

// normalize reduces a rule to what it means, so that a rule as written and as -save prints
// it compare equal on both backends: its options with their values, "!" kept, module
// loads (-m) dropped, addresses as masked prefixes, lists and options sorted.
func normalize(spec string) string {
	toks := iptables.Tokens(spec)
	var opts []string
	neg := false
	for i := 0; i < len(toks); {
		t := toks[i]
		if t == "!" {
			neg = true
			i++
			continue
		}
		name := t
		i++
		var vals []string
		for i < len(toks) && toks[i] != "!" && !isOption(toks[i]) {
			vals = append(vals, toks[i])
			i++
		}
		if name == "-m" || name == "--match" {
			neg = false
			continue
		}
		switch name {
		case "--jump":
			name = "-j"
		case "--goto":
			name = "-g"
		case "--source", "--src":
			name = "-s"
		case "--destination", "--dst":
			name = "-d"
		case "--protocol":
			name = "-p"
		case "--destination-port":
			name = "--dport"
		}
		for j, v := range vals {
			vals[j] = normalValue(name, v)
		}
		o := name + "=" + strings.Join(vals, " ")
		if neg {
			o = "!" + o
			neg = false
		}
		opts = append(opts, o)
	}
	sort.Strings(opts)
	return strings.Join(opts, "\x00")
}

func isOption(t string) bool {
	return len(t) > 1 && t[0] == '-' && (t[1] < '0' || t[1] > '9')
}

func normalValue(opt, v string) string {
	switch opt {
	case "-s", "-d", "--ctorigdst", "--ctorigsrc":
		if p, err := netip.ParsePrefix(v); err == nil {
			return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p)).Masked().String()
		}
		if a, err := netip.ParseAddr(v); err == nil {
			return hostPrefix(a.Unmap())
		}
	case "--probability":
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return strconv.FormatFloat(f, 'f', 8, 64)
		}
	case "--ctstate", "--state":
		parts := strings.Split(v, ",")
		sort.Strings(parts)
		return strings.Join(parts, ",")
	case "-p":
		return strings.ToLower(v)
	}
	return v
}

// saved is a -save listing.
type saved struct {
	order  []string
	tables map[string]*savedTable
}

type savedTable struct {
	name   string
	chains []string            // declared chains, in order
	rules  map[string][]string // chain -> rule specs (after "-A <chain> "), in order
}

func parseSave(out string) saved {
	s := saved{tables: map[string]*savedTable{}}
	var cur *savedTable
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#' || line == "COMMIT":
		case line[0] == '*':
			name := line[1:]
			if s.tables[name] == nil {
				s.tables[name] = &savedTable{name: name, rules: map[string][]string{}}
				s.order = append(s.order, name)
			}
			cur = s.tables[name]
		case cur == nil:
		case line[0] == ':':
			if f := strings.Fields(line[1:]); len(f) > 0 {
				cur.chains = append(cur.chains, f[0])
			}
		case strings.HasPrefix(line, "-A "):
			chain, spec, _ := strings.Cut(line[3:], " ")
			cur.rules[chain] = append(cur.rules[chain], spec)
		}
	}
	return s
}
