package iptables

// RemoveChains returns the restore input that removes, from every table of the listing,
// the chains match selects and the rules that jump to them (Table.RemoveChains), one
// table part per table that has any. It is Empty when nothing matches.
func RemoveChains(have *Ruleset, match func(chain string) bool) *Transaction {
	out := &Transaction{}
	for _, t := range have.Tables {
		out.blocks = append(out.blocks, t.RemoveChains(match).blocks...)
	}
	return out
}

// RemoveChains returns the restore input that removes from this table the chains match
// selects (never a built-in chain) and every rule of another chain that jumps or goes to
// one of them: first those rules, then the chains are flushed, then deleted, so that no
// removed chain is still referenced when it is deleted. Nothing else is touched: rules of
// other chains that target no removed chain stay, and so do the chains match rejects. The
// result is Empty when nothing matches; restored, it is one commit of one table.
func (t *Table) RemoveChains(match func(chain string) bool) *Transaction {
	out := &Transaction{}
	removed := map[string]bool{}
	var chains []string
	for _, c := range t.Chains {
		if !IsBuiltin(c) && match(c) && !removed[c] {
			removed[c] = true
			chains = append(chains, c)
		}
	}
	if len(chains) == 0 {
		return out
	}
	b := out.block(t.Name)
	for _, c := range t.Chains {
		if removed[c] {
			continue
		}
		for _, spec := range t.Rules[c] {
			if removed[Target(Tokens(spec))] {
				b.ops = append(b.ops, Op{Kind: OpDelete, Table: t.Name, Chain: c, Spec: spec})
			}
		}
	}
	fix := tableFix{stale: chains}
	b.ops = append(b.ops, fix.removals(t.Name)...)
	return out
}

// Ops returns the transaction's operations in order, every table's in turn.
func (t *Transaction) Ops() []Op {
	var ops []Op
	for _, b := range t.blocks {
		ops = append(ops, b.ops...)
	}
	return ops
}
