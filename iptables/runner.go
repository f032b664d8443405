// Package iptables applies kube-ipvs' iptables rules (package firewall renders them) with
// iptables-restore --noflush and ip6tables-restore --noflush, on the backend the node
// already uses (legacy or nft).
//
// Invariants:
//   - Only chains whose names start with the prefix (KIPVS-) are written, and in built-in
//     chains only rules that jump to such chains. Everything else on the node stays.
//   - iptables-restore runs only when the rule text differs from what was last applied,
//     or when Resync finds our chains changed, missing, or our jump rules no longer first.
//     Steady state costs no process at all per sync and one -save per family per Resync.
//   - Jump rules, written as "-I <built-in> 1 ..." in the input, are kept first and present
//     once: before a restore, copies found elsewhere (or stale jumps to our chains) are
//     deleted in the same restore transaction, so the table is never without them.
//   - Chains with the prefix that the input no longer declares (an older version's) are
//     flushed and deleted in the same restore.
package iptables

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Backend is an iptables backend.
type Backend string

const (
	// Auto detects the backend: the one with more rules on the node, nft when both are
	// empty.
	Auto   Backend = ""
	Legacy Backend = "legacy"
	NFT    Backend = "nft"
)

// DefaultPrefix names the chains this package owns.
const DefaultPrefix = "KIPVS-"

// Config configures a Runner.
type Config struct {
	// Backend forces a backend; Auto (empty) detects it once, on first use.
	Backend Backend
	// Prefix is the prefix of the chains we own; DefaultPrefix when empty.
	Prefix string
	// WaitSeconds is how long iptables-restore waits for the xtables lock (-w); 5 when 0.
	WaitSeconds int
}

// Family selects iptables (V4) or ip6tables (V6).
type Family int

const (
	V4 Family = iota
	V6
)

func (f Family) String() string {
	if f == V6 {
		return "ip6tables"
	}
	return "iptables"
}

// Result reports one Apply, Resync or Cleanup.
type Result struct {
	// Execs is how many processes were run.
	Execs int
	// Restores is how many of them were iptables-restore or ip6tables-restore.
	Restores int
	// Err says what failed, per family; the other family was still done.
	Err error
}

// Runner applies rule text per family. It is safe for concurrent use; calls are serialized.
type Runner struct {
	mu      sync.Mutex
	ex      Exec
	cfg     Config
	backend Backend
	fam     [2]famState
	execs   atomic.Uint64
}

type famState struct {
	applied string // the input text last applied successfully
	saved   string // our part of -save right after it was applied
	cleared bool   // the family is unused and was found (or made) free of our rules
}

// New returns a Runner. Nothing runs before the first call.
func New(ex Exec, cfg Config) *Runner {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.WaitSeconds == 0 {
		cfg.WaitSeconds = 5
	}
	return &Runner{ex: ex, cfg: cfg}
}

// Execs returns the number of processes run so far.
func (r *Runner) Execs() uint64 { return r.execs.Load() }

func (r *Runner) run(res *Result, stdin []byte, name string, args ...string) ([]byte, error) {
	res.Execs++
	r.execs.Add(1)
	return r.ex.Run(stdin, name, args...)
}

func tool(f Family, b Backend, verb string) string {
	return fmt.Sprintf("%s-%s-%s", f, b, verb)
}

// Backend returns the backend in use, detecting it on first use: with Auto, it counts the
// rules iptables-legacy-save and iptables-nft-save (and the ip6tables ones) print and takes
// the backend with more, nft when they tie (a fresh node). A backend whose tools are not
// installed is never chosen.
func (r *Runner) Backend() (Backend, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var res Result
	return r.detect(&res)
}

func (r *Runner) detect(res *Result) (Backend, error) {
	if r.backend != "" {
		return r.backend, nil
	}
	installed := func(b Backend) bool {
		for _, f := range []Family{V4, V6} {
			for _, verb := range []string{"save", "restore"} {
				if _, err := r.ex.LookPath(tool(f, b, verb)); err != nil {
					return false
				}
			}
		}
		return true
	}
	if r.cfg.Backend != Auto {
		if r.cfg.Backend != Legacy && r.cfg.Backend != NFT {
			return "", fmt.Errorf("iptables backend %q: want legacy or nft", r.cfg.Backend)
		}
		if !installed(r.cfg.Backend) {
			return "", fmt.Errorf("iptables backend %s: its tools (%s...) are not installed", r.cfg.Backend, tool(V4, r.cfg.Backend, "restore"))
		}
		r.backend = r.cfg.Backend
		return r.backend, nil
	}
	counts := map[Backend]int{}
	var avail []Backend
	for _, b := range []Backend{Legacy, NFT} {
		if !installed(b) {
			continue
		}
		avail = append(avail, b)
		for _, f := range []Family{V4, V6} {
			out, err := r.run(res, nil, tool(f, b, "save"))
			if err != nil {
				return "", fmt.Errorf("detect iptables backend: %w", err)
			}
			counts[b] += countRules(out)
		}
	}
	switch {
	case len(avail) == 0:
		return "", errors.New("detect iptables backend: neither iptables-legacy-* nor iptables-nft-* (and ip6tables) tools are installed")
	case len(avail) == 1:
		r.backend = avail[0]
	case counts[Legacy] > counts[NFT]:
		r.backend = Legacy
	default:
		r.backend = NFT
	}
	return r.backend, nil
}

func countRules(save []byte) int {
	n := 0
	for _, l := range strings.Split(string(save), "\n") {
		if strings.HasPrefix(l, "-A ") {
			n++
		}
	}
	return n
}

// Apply makes the node's rules match the given iptables-restore inputs (v4 for iptables,
// v6 for ip6tables). A family whose text equals what was last applied successfully costs
// nothing; otherwise it is one -save (to place the jump rules), one restore, and one -save
// (to remember how the kernel shows our rules, for Resync). An empty text means the family
// is not used: the first time, our chains are removed from it if there are any (a node
// that was dual-stack before), so the sets they referenced can go; after that it costs
// nothing.
func (r *Runner) Apply(v4, v6 string) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := Result{}
	var errs []error
	for f, text := range [2]string{v4, v6} {
		st := &r.fam[f]
		switch {
		case text == "" && st.cleared:
		case text == "":
			if err := r.clear(Family(f), &res); err != nil {
				errs = append(errs, err)
				continue
			}
			*st = famState{cleared: true}
		case text != st.applied:
			st.cleared = false
			if err := r.apply(Family(f), text, &res); err != nil {
				errs = append(errs, err)
			}
		}
	}
	res.Err = errors.Join(errs...)
	return res
}

// Resync checks each family applied so far against -save and re-applies it when our chains
// differ from what was applied (rules changed, chains missing, flushed by someone) or our
// jump rules are no longer first or are duplicated. When all is right it only reads.
func (r *Runner) Resync() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := Result{}
	var errs []error
	for f := range r.fam {
		st := &r.fam[f]
		if st.applied == "" {
			continue
		}
		b, err := r.detect(&res)
		if err != nil {
			errs = append(errs, err)
			break
		}
		out, err := r.run(&res, nil, tool(Family(f), b, "save"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if r.ours(parseSave(out)) == st.saved {
			continue
		}
		if err := r.apply(Family(f), st.applied, &res); err != nil {
			errs = append(errs, err)
		}
	}
	res.Err = errors.Join(errs...)
	return res
}

// Cleanup removes our jump rules and chains from every table of both families, on both
// backends whose tools are installed (a node may have switched backends), and forgets what
// was applied. Nothing else is touched.
func (r *Runner) Cleanup() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := Result{}
	var errs []error
	for _, b := range []Backend{Legacy, NFT} {
		for _, f := range []Family{V4, V6} {
			if _, err := r.ex.LookPath(tool(f, b, "restore")); err != nil {
				continue
			}
			if _, err := r.ex.LookPath(tool(f, b, "save")); err != nil {
				continue
			}
			out, err := r.run(&res, nil, tool(f, b, "save"))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			input := r.prepare("", parseSave(out))
			if input == "" {
				continue
			}
			res.Restores++
			if _, err := r.run(&res, []byte(input), tool(f, b, "restore"), r.restoreArgs()...); err != nil {
				errs = append(errs, fmt.Errorf("remove %s chains: %w", r.cfg.Prefix, lineContext(err, input)))
			}
		}
	}
	r.fam = [2]famState{}
	res.Err = errors.Join(errs...)
	return res
}

// clear removes our rules from one family on the backend in use.
func (r *Runner) clear(f Family, res *Result) error {
	b, err := r.detect(res)
	if err != nil {
		return err
	}
	out, err := r.run(res, nil, tool(f, b, "save"))
	if err != nil {
		return err
	}
	input := r.prepare("", parseSave(out))
	if input == "" {
		return nil
	}
	res.Restores++
	if _, err := r.run(res, []byte(input), tool(f, b, "restore"), r.restoreArgs()...); err != nil {
		return fmt.Errorf("remove %s chains from %s: %w", r.cfg.Prefix, f, lineContext(err, input))
	}
	return nil
}

func (r *Runner) restoreArgs() []string {
	return []string{"-w", strconv.Itoa(r.cfg.WaitSeconds), "--noflush"}
}

func (r *Runner) apply(f Family, text string, res *Result) error {
	st := &r.fam[f]
	b, err := r.detect(res)
	if err != nil {
		return err
	}
	if err := r.checkInput(text); err != nil {
		return fmt.Errorf("%s rules: %w", f, err)
	}
	out, err := r.run(res, nil, tool(f, b, "save"))
	if err != nil {
		return err
	}
	marked := r.withMarker(text)
	if st.applied == "" && r.adoptable(marked, parseSave(out)) {
		// A previous process applied exactly this text and it is intact: adopt it, so a
		// restart rewrites nothing.
		st.applied, st.saved = text, r.ours(parseSave(out))
		return nil
	}
	input := r.prepare(marked, parseSave(out))
	res.Restores++
	if _, err := r.run(res, []byte(input), tool(f, b, "restore"), r.restoreArgs()...); err != nil {
		st.applied = ""
		return lineContext(err, input)
	}
	out, err = r.run(res, nil, tool(f, b, "save"))
	if err != nil {
		// Applied, but unverifiable: Resync will re-apply.
		st.applied, st.saved = text, ""
		return err
	}
	st.applied, st.saved = text, r.ours(parseSave(out))
	return nil
}

// markerChain holds one rule whose comment is a hash of the applied rule text: a restarted
// proxy that renders the same text finds it and, if our chains are intact, adopts them
// instead of restoring them again.
func (r *Runner) markerChain() string { return r.cfg.Prefix + "RULES-HASH" }

func rulesHash(text string) string {
	sum := sha256.Sum256([]byte(text))
	return "sha256:" + hex.EncodeToString(sum[:12])
}

// withMarker adds the marker chain and rule at the end of the first table of text (at the
// end, so line numbers in restore errors still match the rendered text).
func (r *Runner) withMarker(text string) string {
	if text == "" {
		return ""
	}
	var b strings.Builder
	inFirst, done := false, false
	for _, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "*") && !done {
			inFirst = true
		}
		if t == "COMMIT" && inFirst && !done {
			fmt.Fprintf(&b, ":%s - [0:0]\n-A %s -m comment --comment %s -j RETURN\n", r.markerChain(), r.markerChain(), rulesHash(text))
			done = true
		}
		b.WriteString(line + "\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// adoptable reports whether the kernel already holds marked exactly as a previous Apply
// left it: the marker carries this text's hash, every chain of ours has as many rules as
// the text gives it, no chain of ours is stale and every jump rule is in place.
func (r *Runner) adoptable(marked string, s save) bool {
	hash := ""
	want := map[string]map[string]int{} // table -> our chain -> rules
	cur := ""
	for _, line := range strings.Split(marked, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case t == "" || t[0] == '#' || t == "COMMIT":
		case t[0] == '*':
			cur = t[1:]
			if want[cur] == nil {
				want[cur] = map[string]int{}
			}
		case t[0] == ':':
			if f := strings.Fields(t[1:]); len(f) > 0 {
				want[cur][f[0]] += 0
			}
		case strings.HasPrefix(t, "-A "):
			f := strings.Fields(t)
			want[cur][f[1]]++
			if f[1] == r.markerChain() {
				for _, tok := range f {
					if strings.HasPrefix(tok, "sha256:") || strings.HasPrefix(tok, "\"sha256:") {
						hash = strings.Trim(tok, "\"")
					}
				}
			}
		}
	}
	for tn, chains := range want {
		t := s.tables[tn]
		if t == nil {
			return false
		}
		for c, n := range chains {
			if !slices.Contains(t.chains, c) || len(t.rules[c]) != n {
				return false
			}
		}
	}
	if m := s.tables[firstTable(marked)]; m == nil || len(m.rules[r.markerChain()]) != 1 ||
		!strings.Contains(m.rules[r.markerChain()][0], hash) || hash == "" {
		return false
	}
	// Nothing to fix: no jump to insert or delete, no stale chain of ours.
	for _, line := range strings.Split(r.prepare(marked, s), "\n") {
		if strings.HasPrefix(line, "-I ") || strings.HasPrefix(line, "-D ") || strings.HasPrefix(line, "-F ") || strings.HasPrefix(line, "-X ") {
			return false
		}
	}
	return true
}

func firstTable(text string) string {
	for _, line := range strings.Split(text, "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "*") {
			return t[1:]
		}
	}
	return ""
}

// checkInput refuses input that would write outside our chains: every rule must be in one
// of them, except "-I <chain> 1 ... -j <ours>" jump rules.
func (r *Runner) checkInput(text string) error {
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == '*' || line == "COMMIT" {
			continue
		}
		fields := tokens(line)
		switch {
		case line[0] == ':':
			if !strings.HasPrefix(line[1:], r.cfg.Prefix) {
				return fmt.Errorf("line %d declares chain %s, which is not ours", i+1, strings.Fields(line[1:])[0])
			}
		case len(fields) >= 2 && (fields[0] == "-A" || fields[0] == "-N" || fields[0] == "-F" || fields[0] == "-X" || fields[0] == "-D"):
			if !strings.HasPrefix(fields[1], r.cfg.Prefix) {
				return fmt.Errorf("line %d: %s on chain %s, which is not ours", i+1, fields[0], fields[1])
			}
		case len(fields) >= 3 && fields[0] == "-I":
			if !strings.HasPrefix(fields[1], r.cfg.Prefix) && (fields[2] != "1" || !strings.HasPrefix(target(fields), r.cfg.Prefix)) {
				return fmt.Errorf("line %d: only jumps to our chains may go into %s, as \"-I %s 1 ... -j %s...\"", i+1, fields[1], fields[1], r.cfg.Prefix)
			}
		default:
			return fmt.Errorf("line %d: unexpected %q", i+1, line)
		}
	}
	return nil
}

// table is one table of a -save listing.
type table struct {
	chains []string            // declared chains, in order
	rules  map[string][]string // chain -> rule specs (after "-A <chain> "), in order
}

type save struct {
	order  []string
	tables map[string]*table
}

func parseSave(out []byte) save {
	s := save{tables: map[string]*table{}}
	var cur *table
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#' || line == "COMMIT":
		case line[0] == '*':
			name := line[1:]
			if s.tables[name] == nil {
				s.tables[name] = &table{rules: map[string][]string{}}
				s.order = append(s.order, name)
			}
			cur = s.tables[name]
		case cur == nil:
		case line[0] == ':':
			if f := strings.Fields(line[1:]); len(f) > 0 {
				cur.chains = append(cur.chains, f[0])
			}
		case strings.HasPrefix(line, "-A "):
			rest := line[3:]
			chain, spec, _ := strings.Cut(rest, " ")
			cur.rules[chain] = append(cur.rules[chain], spec)
		}
	}
	return s
}

// ours renders our part of a listing, canonically: our chains with their rules, and every
// rule of another chain that jumps to ours, with its position.
func (r *Runner) ours(s save) string {
	var b strings.Builder
	names := slices.Clone(s.order)
	sort.Strings(names)
	for _, tn := range names {
		t := s.tables[tn]
		var lines []string
		var mine []string
		for _, c := range t.chains {
			if strings.HasPrefix(c, r.cfg.Prefix) {
				mine = append(mine, c)
			}
		}
		sort.Strings(mine)
		for _, c := range mine {
			lines = append(lines, ":"+c)
			for _, spec := range t.rules[c] {
				lines = append(lines, "-A "+c+" "+spec)
			}
		}
		others := make([]string, 0, len(t.rules))
		for c := range t.rules {
			if !strings.HasPrefix(c, r.cfg.Prefix) {
				others = append(others, c)
			}
		}
		sort.Strings(others)
		for _, c := range others {
			for i, spec := range t.rules[c] {
				if strings.HasPrefix(target(tokens(spec)), r.cfg.Prefix) {
					lines = append(lines, fmt.Sprintf("-A %s#%d %s", c, i+1, spec))
				}
			}
		}
		if len(lines) > 0 {
			b.WriteString("*" + tn + "\n" + strings.Join(lines, "\n") + "\n")
		}
	}
	return b.String()
}

// builtin chains are the only non-owned chains the runner ever writes, and only jump rules.
var builtin = map[string]bool{"PREROUTING": true, "INPUT": true, "FORWARD": true, "OUTPUT": true, "POSTROUTING": true}

// prepare turns the rendered text into the restore input for the current state s: jump
// rules already in place (first, once) are dropped from it, other jumps to our chains in
// built-in chains are deleted, and our chains the text no longer declares are flushed and
// deleted. With text "", it removes all of ours.
func (r *Runner) prepare(text string, s save) string {
	inJumps := map[string]map[string][][]string{} // table -> chain -> jump specs, input order
	declared := map[string]map[string]bool{}
	var order []string
	cur := ""
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#':
		case line[0] == '*':
			cur = line[1:]
			if declared[cur] == nil {
				declared[cur] = map[string]bool{}
				inJumps[cur] = map[string][][]string{}
				order = append(order, cur)
			}
		case line[0] == ':':
			if f := strings.Fields(line[1:]); len(f) > 0 && cur != "" {
				declared[cur][f[0]] = true
			}
		default:
			f := tokens(line)
			if cur != "" && len(f) >= 3 && f[0] == "-I" && builtin[f[1]] && f[2] == "1" {
				inJumps[cur][f[1]] = append(inJumps[cur][f[1]], f[3:])
			}
		}
	}

	// Per table: the chains whose jumps are right, and the lines to add.
	okChain := map[string]map[string]bool{}
	deletes := map[string][]string{}
	stale := map[string][]string{}
	for _, tn := range s.order {
		t := s.tables[tn]
		okChain[tn] = map[string]bool{}
		for _, c := range t.chains {
			if !builtin[c] {
				if strings.HasPrefix(c, r.cfg.Prefix) && !declared[tn][c] {
					stale[tn] = append(stale[tn], c)
				}
				continue
			}
			want := inJumps[tn][c]
			have := t.rules[c]
			ok := len(have) >= len(want)
			for i := 0; ok && i < len(want); i++ {
				// "-I c 1" pushes down what was inserted before it: the last is first.
				ok = slices.Equal(tokens(have[i]), want[len(want)-1-i])
			}
			for i := len(want); ok && i < len(have); i++ {
				ok = !strings.HasPrefix(target(tokens(have[i])), r.cfg.Prefix)
			}
			if ok {
				okChain[tn][c] = true
				continue
			}
			for _, spec := range have {
				if strings.HasPrefix(target(tokens(spec)), r.cfg.Prefix) {
					deletes[tn] = append(deletes[tn], "-D "+c+" "+spec)
				}
			}
		}
	}

	var b strings.Builder
	emitStale := func(tn string) {
		for _, c := range stale[tn] {
			b.WriteString("-F " + c + "\n")
		}
		for _, c := range stale[tn] {
			b.WriteString("-X " + c + "\n")
		}
	}
	cur = ""
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			continue
		case trimmed[0] == '*':
			cur = trimmed[1:]
			b.WriteString(trimmed + "\n")
			for _, d := range deletes[cur] {
				b.WriteString(d + "\n")
			}
			continue
		case trimmed == "COMMIT":
			emitStale(cur)
		default:
			f := tokens(trimmed)
			if len(f) >= 3 && f[0] == "-I" && builtin[f[1]] && f[2] == "1" && okChain[cur][f[1]] {
				continue // already in place
			}
		}
		b.WriteString(trimmed + "\n")
	}
	// Tables the text does not mention but where something of ours is left.
	for _, tn := range s.order {
		if declared[tn] != nil || (len(deletes[tn]) == 0 && len(stale[tn]) == 0) {
			continue
		}
		b.WriteString("*" + tn + "\n")
		for _, d := range deletes[tn] {
			b.WriteString(d + "\n")
		}
		emitStale(tn)
		b.WriteString("COMMIT\n")
	}
	if text == "" && b.Len() == 0 {
		return ""
	}
	return b.String()
}

// Tokens splits a rule like a shell: double-quoted parts are one token, without quotes.
// Exported for the iptables proxier, which reads -save output the same way.
func Tokens(s string) []string { return tokens(s) }

// Target returns a rule's -j or -g target ("" if none).
func Target(toks []string) string { return target(toks) }

func tokens(s string) []string {
	var out []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && inQuote:
			i++
			cur.WriteByte(s[i])
		case c == '"':
			inQuote = !inQuote
			have = true
		case (c == ' ' || c == '\t') && !inQuote:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

// target returns a rule's -j or -g target ("" if none).
func target(toks []string) string {
	for i := 0; i+1 < len(toks); i++ {
		if toks[i] == "-j" || toks[i] == "-g" || toks[i] == "--jump" || toks[i] == "--goto" {
			return toks[i+1]
		}
	}
	return ""
}

var failedLine = regexp.MustCompile(`line:? (\d+)`)

// lineContext adds the input line a restore error names.
func lineContext(err error, input string) error {
	m := failedLine.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	n, _ := strconv.Atoi(m[1])
	lines := strings.Split(input, "\n")
	if n < 1 || n > len(lines) {
		return err
	}
	return fmt.Errorf("%w (input line %d: %s)", err, n, lines[n-1])
}
