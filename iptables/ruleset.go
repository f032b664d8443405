package iptables

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Ruleset is one family's tables as iptables-save lists them.
type Ruleset struct {
	Tables []*Table // in listing order
}

// Table is one table of a listing.
type Table struct {
	Name   string
	Chains []string            // declared chains, in order (built-in ones included)
	Rules  map[string][]string // chain -> rule specs (what follows "-A <chain> "), in order
}

// builtinChains are the chains each table has from the start, in the order the kernel lists
// them. They are the only chains not ours that kube-ipvs writes to, and only jump rules.
var builtinChains = map[string][]string{
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
	"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"mangle": {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
	"raw":    {"PREROUTING", "OUTPUT"},
}

// IsBuiltin reports whether chain is a built-in chain of some table.
func IsBuiltin(chain string) bool {
	switch chain {
	case "PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING":
		return true
	}
	return false
}

// IsOurs reports whether a chain is one kube-ipvs owns.
func IsOurs(chain string) bool { return strings.HasPrefix(chain, Prefix) }

// jumpsToOurs reports whether a rule spec jumps (or goes) to one of our chains.
func jumpsToOurs(spec string) bool { return IsOurs(Target(Tokens(spec))) }

// ParseSave reads an iptables-save listing (counters, policies and comments are ignored).
// It reads restore input the same way, keeping only chain declarations and -A rules.
func ParseSave(out []byte) *Ruleset {
	s := &Ruleset{}
	var cur *Table
	for _, line := range strings.Split(string(out), "\n") {
		op, ok := parseLine(strings.TrimSpace(line))
		switch {
		case !ok:
		case op.Kind == opTable:
			if cur = s.Table(op.Table); cur == nil {
				cur = &Table{Name: op.Table, Rules: map[string][]string{}}
				s.Tables = append(s.Tables, cur)
			}
		case cur == nil:
		case op.Kind == OpDeclare:
			cur.Chains = append(cur.Chains, op.Chain)
		case op.Kind == OpAppend:
			cur.Rules[op.Chain] = append(cur.Rules[op.Chain], op.Spec)
		}
	}
	return s
}

// Table returns the named table, nil when the listing has none.
func (s *Ruleset) Table(name string) *Table {
	if i := slices.IndexFunc(s.Tables, func(t *Table) bool { return t.Name == name }); i >= 0 {
		return s.Tables[i]
	}
	return nil
}

// Has reports whether the table declares chain.
func (t *Table) Has(chain string) bool { return t != nil && slices.Contains(t.Chains, chain) }

// RuleCount is the number of rules in all tables.
func (s *Ruleset) RuleCount() int {
	n := 0
	for _, t := range s.Tables {
		for _, rs := range t.Rules {
			n += len(rs)
		}
	}
	return n
}

// String renders the listing as iptables-save does: built-in chains with policy ACCEPT,
// ours with "-", rules grouped by chain in declaration order.
func (s *Ruleset) String() string {
	var b strings.Builder
	for _, t := range s.Tables {
		b.WriteString("*" + t.Name + "\n")
		for _, c := range t.Chains {
			policy := "-"
			if slices.Contains(builtinChains[t.Name], c) {
				policy = "ACCEPT"
			}
			b.WriteString(":" + c + " " + policy + " [0:0]\n")
		}
		for _, c := range t.Chains {
			for _, spec := range t.Rules[c] {
				b.WriteString("-A " + c + " " + spec + "\n")
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// Ours renders our part of the listing canonically (sorted, so that two listings of the
// same rules compare equal): our chains with their rules, and every rule of another chain
// that jumps to ours, with its position.
func (s *Ruleset) Ours() string {
	var b strings.Builder
	tables := slices.Clone(s.Tables)
	sort.Slice(tables, func(i, j int) bool { return tables[i].Name < tables[j].Name })
	for _, t := range tables {
		var lines []string
		mine := slices.DeleteFunc(slices.Clone(t.Chains), func(c string) bool { return !IsOurs(c) })
		sort.Strings(mine)
		for _, c := range mine {
			lines = append(lines, ":"+c)
			for _, spec := range t.Rules[c] {
				lines = append(lines, "-A "+c+" "+spec)
			}
		}
		others := make([]string, 0, len(t.Rules))
		for c := range t.Rules {
			if !IsOurs(c) {
				others = append(others, c)
			}
		}
		sort.Strings(others)
		for _, c := range others {
			for i, spec := range t.Rules[c] {
				if jumpsToOurs(spec) {
					lines = append(lines, fmt.Sprintf("-A %s#%d %s", c, i+1, spec))
				}
			}
		}
		if len(lines) > 0 {
			b.WriteString("*" + t.Name + "\n" + strings.Join(lines, "\n") + "\n")
		}
	}
	return b.String()
}

// JumpsFirst reports whether a built-in chain starts with exactly the jumps want (in
// kernel order), compared as SameRule does, and has no other rule that jumps to one of our
// chains.
func (t *Table) JumpsFirst(chain string, want []string) bool {
	var have []string
	if t != nil {
		have = t.Rules[chain]
	}
	if len(have) < len(want) {
		return false
	}
	for i, w := range want {
		if !SameRule(w, have[i]) {
			return false
		}
	}
	for _, h := range have[len(want):] {
		if jumpsToOurs(h) {
			return false
		}
	}
	return true
}

// Stale returns the chains of ours the table declares that keep(chain) rejects, in
// listing order.
func (t *Table) Stale(keep func(chain string) bool) []string {
	var out []string
	if t == nil {
		return nil
	}
	for _, c := range t.Chains {
		if IsOurs(c) && !keep(c) {
			out = append(out, c)
		}
	}
	return out
}
