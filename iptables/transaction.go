package iptables

import (
	"fmt"
	"strconv"
	"strings"
)

// Chain names a chain in a table.
type Chain struct {
	Table, Name string
}

// Rule is a rule of a chain: Spec is what follows "-A <chain> " (matches and target).
type Rule struct {
	Table, Chain, Spec string
}

// OpKind is what one line of restore input does.
type OpKind int

const (
	// OpDeclare is ":<chain> - [0:0]": creates the chain, or flushes it if it exists.
	OpDeclare     OpKind = iota
	OpAppend             // -A <chain> <spec>
	OpInsert             // -I <chain> [<pos>] <spec>
	OpDelete             // -D <chain> <spec>
	OpFlush              // -F <chain>
	OpDeleteChain        // -X <chain>
	OpComment            // # <text>
	opTable              // *<table>, only while parsing
	opCommit             // COMMIT, only while parsing
)

// Op is one line of restore input.
type Op struct {
	Kind  OpKind
	Table string
	Chain string
	Pos   int    // OpInsert's position, 0 when the line gives none (first)
	Spec  string // the rule of OpAppend, OpInsert and OpDelete; the text of OpComment
	Line  int    // the input line it was parsed from, 0 when built
}

// isJump reports whether op is "-I <built-in> 1 ...": a rule kept first in a built-in
// chain (see Reconcile).
func (op Op) isJump() bool { return op.Kind == OpInsert && op.Pos == 1 && IsBuiltin(op.Chain) }

func (op Op) String() string {
	switch op.Kind {
	case OpDeclare:
		return ":" + op.Chain + " - [0:0]"
	case OpAppend:
		return joinLine("-A", op.Chain, op.Spec)
	case OpInsert:
		if op.Pos == 0 {
			return joinLine("-I", op.Chain, op.Spec)
		}
		return joinLine("-I", op.Chain, strconv.Itoa(op.Pos), op.Spec)
	case OpDelete:
		return joinLine("-D", op.Chain, op.Spec)
	case OpFlush:
		return "-F " + op.Chain
	case OpDeleteChain:
		return "-X " + op.Chain
	case OpComment:
		return "#" + op.Spec
	case opTable:
		return "*" + op.Table
	}
	return "COMMIT"
}

func joinLine(parts ...string) string {
	if parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	return strings.Join(parts, " ")
}

// Transaction is one iptables-restore --noflush input for one family, built from plain
// values: callers add chains and rules in the order they must be applied; only Tools
// touches the kernel. Each table's part is committed as one unit by the tool.
type Transaction struct {
	preamble []string // comment lines before the first table
	blocks   []*block
}

// block is one "*table ... COMMIT" part.
type block struct {
	table string
	ops   []Op
	line  int // the input line of "*table", 0 when built
}

// NewTransaction returns an empty transaction.
func NewTransaction() *Transaction { return &Transaction{} }

// Table makes sure the table has a part in the transaction (committed even if empty), and
// returns the transaction for chaining.
func (t *Transaction) Table(name string) *Transaction {
	t.block(name)
	return t
}

func (t *Transaction) block(table string) *block {
	for _, b := range t.blocks {
		if b.table == table {
			return b
		}
	}
	b := &block{table: table}
	t.blocks = append(t.blocks, b)
	return b
}

func (t *Transaction) add(op Op) {
	b := t.block(op.Table)
	b.ops = append(b.ops, op)
}

// Declare creates a chain, or flushes it when it exists.
func (t *Transaction) Declare(c Chain) { t.add(Op{Kind: OpDeclare, Table: c.Table, Chain: c.Name}) }

// Flush removes every rule of a chain.
func (t *Transaction) Flush(c Chain) { t.add(Op{Kind: OpFlush, Table: c.Table, Chain: c.Name}) }

// DeleteChain deletes an empty, unreferenced chain.
func (t *Transaction) DeleteChain(c Chain) {
	t.add(Op{Kind: OpDeleteChain, Table: c.Table, Chain: c.Name})
}

// Append adds a rule at the end of its chain.
func (t *Transaction) Append(r Rule) {
	t.add(Op{Kind: OpAppend, Table: r.Table, Chain: r.Chain, Spec: r.Spec})
}

// Insert adds a rule at a position of its chain (1 is first).
func (t *Transaction) Insert(r Rule, pos int) {
	t.add(Op{Kind: OpInsert, Table: r.Table, Chain: r.Chain, Pos: pos, Spec: r.Spec})
}

// Jump adds a rule of a built-in chain that jumps to one of ours and must stay first: it
// is inserted at position 1, so of several jumps into one chain the last one added ends
// up first. Reconcile keeps jumps first and present once.
func (t *Transaction) Jump(r Rule) { t.Insert(r, 1) }

// Delete deletes a rule, given as -save prints it.
func (t *Transaction) Delete(r Rule) {
	t.add(Op{Kind: OpDelete, Table: r.Table, Chain: r.Chain, Spec: r.Spec})
}

// Empty reports whether the transaction has no table part: restoring it would do nothing.
func (t *Transaction) Empty() bool { return t == nil || len(t.blocks) == 0 }

// String renders the restore input.
func (t *Transaction) String() string {
	if t == nil {
		return ""
	}
	var b strings.Builder
	for _, c := range t.preamble {
		b.WriteString("#" + c + "\n")
	}
	for _, blk := range t.blocks {
		b.WriteString("*" + blk.table + "\n")
		for _, op := range blk.ops {
			b.WriteString(op.String() + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// ParseTransaction reads restore input (what String renders, and what the IPVS mode's
// rules are rendered as). Each op keeps its input line. Every table must end with COMMIT.
func ParseTransaction(text string) (*Transaction, error) {
	t := &Transaction{}
	var cur *block
	for i, raw := range strings.Split(text, "\n") {
		n := i + 1
		line := strings.TrimSpace(raw)
		if line == "" {
			continue
		}
		op, err := parseOp(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		op.Line = n
		switch {
		case op.Kind == opTable:
			if cur != nil {
				return nil, fmt.Errorf("line %d: table %s starts before COMMIT", n, op.Table)
			}
			cur = &block{table: op.Table, line: n}
			t.blocks = append(t.blocks, cur)
		case op.Kind == OpComment && cur == nil:
			t.preamble = append(t.preamble, op.Spec)
		case cur == nil:
			return nil, fmt.Errorf("line %d: %q outside a table", n, line)
		case op.Kind == opCommit:
			cur = nil
		default:
			op.Table = cur.table
			cur.ops = append(cur.ops, op)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("table %s ends without COMMIT", cur.table)
	}
	return t, nil
}

// parseLine is parseOp for readers that skip what they do not understand.
func parseLine(line string) (Op, bool) {
	if line == "" {
		return Op{}, false
	}
	op, err := parseOp(line)
	return op, err == nil
}

// parseOp reads one non-empty, trimmed line of save or restore input.
func parseOp(line string) (Op, error) {
	switch {
	case line[0] == '#':
		return Op{Kind: OpComment, Spec: line[1:]}, nil
	case line[0] == '*':
		return Op{Kind: opTable, Table: line[1:]}, nil
	case line == "COMMIT":
		return Op{Kind: opCommit}, nil
	case line[0] == ':':
		f := strings.Fields(line[1:])
		if len(f) == 0 {
			return Op{}, fmt.Errorf("chain declaration without a name")
		}
		return Op{Kind: OpDeclare, Chain: f[0]}, nil
	}
	cmd, rest, _ := strings.Cut(line, " ")
	chain, spec, _ := strings.Cut(strings.TrimLeft(rest, " "), " ")
	if chain == "" {
		return Op{}, fmt.Errorf("%q without a chain", cmd)
	}
	op := Op{Chain: chain, Spec: spec}
	switch cmd {
	case "-A":
		op.Kind = OpAppend
	case "-I":
		op.Kind = OpInsert
		if p, after, _ := strings.Cut(spec, " "); p != "" && p[0] >= '0' && p[0] <= '9' {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 {
				return Op{}, fmt.Errorf("bad position %q", p)
			}
			op.Pos, op.Spec = n, after
		}
	case "-D":
		op.Kind = OpDelete
	case "-F":
		op.Kind, op.Spec = OpFlush, ""
	case "-X":
		op.Kind, op.Spec = OpDeleteChain, ""
	default:
		return Op{}, fmt.Errorf("unsupported command %s", cmd)
	}
	return op, nil
}
