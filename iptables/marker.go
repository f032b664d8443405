package iptables

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// markerChain holds one rule whose comment is a hash of the applied rule text: a restarted
// proxy that renders the same text finds it and, if our chains are intact, adopts them
// instead of restoring them again.
const markerChain = Prefix + "RULES-HASH"

func rulesHash(text string) string {
	sum := sha256.Sum256([]byte(text))
	return "sha256:" + hex.EncodeToString(sum[:12])
}

// withMarker adds the marker chain and rule, carrying text's hash, at the end of the first
// table of desired (at the end, so line numbers in restore errors still match the rendered
// text up to there).
func withMarker(desired *Transaction, text string) {
	if len(desired.blocks) == 0 {
		return
	}
	b := desired.blocks[0]
	b.ops = append(b.ops,
		Op{Kind: OpDeclare, Table: b.table, Chain: markerChain},
		Op{Kind: OpAppend, Table: b.table, Chain: markerChain, Spec: "-m comment --comment " + rulesHash(text) + " -j RETURN"})
}

// parseOurs parses the rendered text and refuses input that would write outside our
// chains: every rule must be in one of them, except "-I <chain> 1 ... -j <ours>" jumps.
func parseOurs(text string) (*Transaction, error) {
	tx, err := ParseTransaction(text)
	if err != nil {
		return nil, err
	}
	for _, b := range tx.blocks {
		for _, op := range b.ops {
			if err := checkOwned(op); err != nil {
				return nil, fmt.Errorf("line %d: %w", op.Line, err)
			}
		}
	}
	return tx, nil
}

func checkOwned(op Op) error {
	switch {
	case op.Kind == OpComment:
	case op.Kind == OpDeclare && !IsOurs(op.Chain):
		return fmt.Errorf("declares chain %s, which is not ours", op.Chain)
	case op.Kind == OpInsert && !IsOurs(op.Chain) && (op.Pos != 1 || !jumpsToOurs(op.Spec)):
		return fmt.Errorf("only jumps to our chains may go into %s, as \"-I %s 1 ... -j %s...\"", op.Chain, op.Chain, Prefix)
	case op.Kind != OpInsert && !IsOurs(op.Chain):
		return fmt.Errorf("%s on chain %s, which is not ours", strings.Fields(op.String())[0], op.Chain)
	}
	return nil
}

// adoptable reports whether the kernel already holds desired (with its marker) exactly as
// a previous Apply left it: the marker carries this text's hash, every chain of ours has as
// many rules as desired gives it, no chain of ours is stale and every jump rule is in place.
func adoptable(desired *Transaction, s *Ruleset) bool {
	if len(desired.blocks) == 0 {
		return false
	}
	hash := ""
	for _, b := range desired.blocks {
		want := map[string]int{} // our chain -> rules
		for _, op := range b.ops {
			switch op.Kind {
			case OpDeclare:
				want[op.Chain] += 0
			case OpAppend:
				want[op.Chain]++
				if op.Chain == markerChain {
					hash = markerHash(op.Spec)
				}
			}
		}
		t := s.Table(b.table)
		if t == nil {
			return false
		}
		for c, n := range want {
			if !t.Has(c) || len(t.Rules[c]) != n {
				return false
			}
		}
	}
	m := s.Table(desired.blocks[0].table).Rules[markerChain]
	if hash == "" || len(m) != 1 || !strings.Contains(m[0], hash) {
		return false
	}
	// Nothing to fix: no jump to insert or delete, no stale chain of ours.
	return !Reconcile(desired, s).changesOurs()
}

func markerHash(spec string) string {
	for _, tok := range Tokens(spec) {
		if strings.HasPrefix(tok, "sha256:") {
			return tok
		}
	}
	return ""
}
