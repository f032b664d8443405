package iptables

import "slices"

// Reconcile turns desired, the complete state of our chains in one family (every chain of
// ours declared, its rules, and the jumps into them from built-in chains), into the
// restore input that makes the listing have match it, leaving everything not ours alone:
//
//   - Jumps (Transaction.Jump) are kept first and present once. A built-in chain that
//     already starts with exactly its jumps, and has no other rule jumping to ours, keeps
//     them: its jumps are dropped from the input, so the chain is never without them.
//     Elsewhere every rule jumping to ours is deleted, right after the table starts, and
//     the jumps are inserted again by the input.
//   - Chains of ours that desired does not declare (an older version's, the other mode's)
//     are flushed and deleted at the end of their table's part, once nothing refers to
//     them; tables desired does not mention get a part of their own when they hold
//     something of ours.
//
// With desired nil it removes everything of ours; the result is then Empty when there is
// nothing to remove.
func Reconcile(desired *Transaction, have *Ruleset) *Transaction {
	if desired == nil {
		desired = &Transaction{}
	}
	out := &Transaction{preamble: slices.Clone(desired.preamble)}
	fixes := map[string]*tableFix{}
	for _, t := range have.Tables {
		fixes[t.Name] = fixTable(t, desired)
	}
	done := map[string]bool{}
	for _, blk := range desired.blocks {
		nb := &block{table: blk.table}
		out.blocks = append(out.blocks, nb)
		fix := fixes[blk.table]
		if done[blk.table] || fix == nil {
			fix = &tableFix{}
		}
		done[blk.table] = true
		nb.ops = append(nb.ops, fix.deletes...)
		for _, op := range blk.ops {
			if op.isJump() && fix.jumpsInPlace[op.Chain] {
				continue
			}
			nb.ops = append(nb.ops, op)
		}
		nb.ops = append(nb.ops, fix.removals(nb.table)...)
	}
	for _, t := range have.Tables {
		fix := fixes[t.Name]
		if done[t.Name] || (len(fix.deletes) == 0 && len(fix.stale) == 0) {
			continue
		}
		nb := &block{table: t.Name, ops: fix.deletes}
		nb.ops = append(nb.ops, fix.removals(nb.table)...)
		out.blocks = append(out.blocks, nb)
	}
	return out
}

// tableFix is what one listed table needs besides the desired input.
type tableFix struct {
	jumpsInPlace map[string]bool // built-in chains whose jumps are right
	deletes      []Op            // rules jumping to ours in the other built-in chains
	stale        []string        // chains of ours not declared
}

func fixTable(t *Table, desired *Transaction) *tableFix {
	declared := map[string]bool{}
	jumps := map[string][]string{} // built-in chain -> jumps in kernel order
	for _, blk := range desired.blocks {
		if blk.table != t.Name {
			continue
		}
		for _, op := range blk.ops {
			switch {
			case op.Kind == OpDeclare:
				declared[op.Chain] = true
			case op.isJump():
				// "-I c 1" pushes down what was inserted before it: the last is first.
				jumps[op.Chain] = append([]string{op.Spec}, jumps[op.Chain]...)
			}
		}
	}
	fix := &tableFix{jumpsInPlace: map[string]bool{}}
	for _, c := range t.Chains {
		if !IsBuiltin(c) {
			continue
		}
		if t.JumpsFirst(c, jumps[c]) {
			fix.jumpsInPlace[c] = true
			continue
		}
		for _, spec := range t.Rules[c] {
			if jumpsToOurs(spec) {
				fix.deletes = append(fix.deletes, Op{Kind: OpDelete, Table: t.Name, Chain: c, Spec: spec})
			}
		}
	}
	fix.stale = t.Stale(func(c string) bool { return declared[c] })
	return fix
}

// removals flushes the stale chains, then deletes them: flushing all first lets one stale
// chain refer to another.
func (f *tableFix) removals(table string) []Op {
	var ops []Op
	for _, c := range f.stale {
		ops = append(ops, Op{Kind: OpFlush, Table: table, Chain: c})
	}
	for _, c := range f.stale {
		ops = append(ops, Op{Kind: OpDeleteChain, Table: table, Chain: c})
	}
	return ops
}

// changesOurs reports whether tx would insert, delete or remove anything beyond
// declaring and appending: whether the kernel's jumps or chains are out of place.
func (t *Transaction) changesOurs() bool {
	for _, blk := range t.blocks {
		for _, op := range blk.ops {
			switch op.Kind {
			case OpInsert, OpDelete, OpFlush, OpDeleteChain:
				return true
			}
		}
	}
	return false
}
