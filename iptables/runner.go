// Package iptables is kube-ipvs' one iptables core. It names the tools (iptables and
// ip6tables, -legacy or -nft, -save and -restore) and detects the node's backend (Tools),
// reads -save listings (Ruleset), builds restore input from plain chains and rules
// (Transaction), keeps jump rules first and removes stale chains of ours (Reconcile), and
// emulates the tools in memory for tests (FakeExec). Both modes write through it: the
// IPVS mode's constant-size rules (package firewall renders them, Runner applies them) and
// the iptables fallback proxier (package iptproxy).
//
// Runner's invariants:
//   - Only chains whose names start with Prefix (KIPVS-) are written, and in built-in
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
	"errors"
	"fmt"
	"sync"
)

// Result reports one Apply, Resync or Cleanup.
type Result struct {
	// Execs is how many processes were run.
	Execs int
	// Restores is how many of them were iptables-restore or ip6tables-restore.
	Restores int
	// Err says what failed, per family; the other family was still done.
	Err error
}

// Runner applies the IPVS mode's rule text per family. It is safe for concurrent use;
// calls are serialized.
type Runner struct {
	mu    sync.Mutex // serializes the calls, which run the tools
	tools *Tools
	// famMu guards fam for Apply's check that nothing changed, which must not wait for a
	// Resync's tools (seconds under load) to end: writers hold both locks.
	famMu sync.Mutex
	fam   [2]famState
}

type famState struct {
	applied string // the input text last applied successfully
	saved   string // our part of -save right after it was applied (Ruleset.Ours)
	cleared bool   // the family is unused and was found (or made) free of our rules
}

// New returns a Runner. Nothing runs before the first call.
func New(ex Exec, cfg Config) *Runner {
	return &Runner{tools: NewTools(ex, cfg)}
}

// Execs returns the number of processes run so far.
func (r *Runner) Execs() uint64 { return r.tools.Execs() }

// Backend returns the backend in use, detecting it on first use (see Tools.Backend).
func (r *Runner) Backend() (Backend, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tools.Backend()
}

// call runs fn and fills res with the processes it ran.
func (r *Runner) call(fn func(res *Result) []error) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	before := r.tools.Execs()
	var res Result
	errs := fn(&res)
	res.Execs = int(r.tools.Execs() - before)
	res.Err = errors.Join(errs...)
	return res
}

// Apply makes the node's rules match the given iptables-restore inputs (v4 for iptables,
// v6 for ip6tables). A family whose text equals what was last applied successfully costs
// nothing; otherwise it is one -save (to place the jump rules), one restore, and one -save
// (to remember how the kernel shows our rules, for Resync). An empty text means the family
// is not used: the first time, our chains are removed from it if there are any (a node
// that was dual-stack before), so the sets they referenced can go; after that it costs
// nothing.
func (r *Runner) Apply(v4, v6 string) Result {
	if r.applied(v4, v6) {
		return Result{}
	}
	return r.call(func(res *Result) (errs []error) {
		for f, text := range [2]string{v4, v6} {
			st := &r.fam[f]
			switch {
			case text == "" && st.cleared:
			case text == "":
				if err := r.clear(Family(f), res); err != nil {
					errs = append(errs, err)
					continue
				}
				r.setFam(f, famState{cleared: true})
			case text != st.applied:
				r.famMu.Lock()
				st.cleared = false
				r.famMu.Unlock()
				if err := r.apply(Family(f), text, res); err != nil {
					errs = append(errs, err)
				}
			}
		}
		return errs
	})
}

// applied reports whether both texts are what was last applied (or an unused family was
// cleared), without waiting for a call under way.
func (r *Runner) applied(v4, v6 string) bool {
	r.famMu.Lock()
	defer r.famMu.Unlock()
	for f, text := range [2]string{v4, v6} {
		st := r.fam[f]
		if (text == "" && !st.cleared) || (text != "" && text != st.applied) {
			return false
		}
	}
	return true
}

// setFam replaces a family's state (r.mu held).
func (r *Runner) setFam(f int, st famState) {
	r.famMu.Lock()
	defer r.famMu.Unlock()
	r.fam[f] = st
}

// Resync checks each family applied so far against -save and re-applies it when our chains
// differ from what was applied (rules changed, chains missing, flushed by someone) or our
// jump rules are no longer first or are duplicated. When all is right it only reads.
func (r *Runner) Resync() Result {
	return r.call(func(res *Result) (errs []error) {
		for f := range r.fam {
			st := &r.fam[f]
			if st.applied == "" {
				continue
			}
			if _, err := r.tools.Backend(); err != nil {
				errs = append(errs, err)
				break
			}
			s, err := r.tools.Save(Family(f))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if s.Ours() == st.saved {
				continue
			}
			if err := r.apply(Family(f), st.applied, res); err != nil {
				errs = append(errs, err)
			}
		}
		return errs
	})
}

// Cleanup removes our jump rules and chains from every table of both families, on both
// backends whose tools are installed (a node may have switched backends), and forgets what
// was applied. Nothing else is touched.
func (r *Runner) Cleanup() Result {
	return r.call(func(res *Result) []error {
		n, err := r.tools.RemoveOurs()
		res.Restores += n
		r.setFam(0, famState{})
		r.setFam(1, famState{})
		return []error{err}
	})
}

// clear removes our rules from one family on the backend in use.
func (r *Runner) clear(f Family, res *Result) error {
	s, err := r.tools.Save(f)
	if err != nil {
		return err
	}
	tx := Reconcile(nil, s)
	if tx.Empty() {
		return nil
	}
	res.Restores++
	if err := r.tools.Restore(f, tx); err != nil {
		return fmt.Errorf("remove %s chains from %s: %w", Prefix, f, err)
	}
	return nil
}

func (r *Runner) apply(f Family, text string, res *Result) error {
	st := &r.fam[f]
	if _, err := r.tools.Backend(); err != nil {
		return err
	}
	desired, err := parseOurs(text)
	if err != nil {
		return fmt.Errorf("%s rules: %w", f, err)
	}
	s, err := r.tools.Save(f)
	if err != nil {
		return err
	}
	withMarker(desired, text)
	if st.applied == "" && adoptable(desired, s) {
		// A previous process applied exactly this text and it is intact: adopt it, so a
		// restart rewrites nothing.
		r.setFam(int(f), famState{applied: text, saved: s.Ours()})
		return nil
	}
	res.Restores++
	if err := r.tools.Restore(f, Reconcile(desired, s)); err != nil {
		r.setFam(int(f), famState{})
		return err
	}
	s, err = r.tools.Save(f)
	if err != nil {
		// Applied, but unverifiable: Resync will re-apply.
		r.setFam(int(f), famState{applied: text})
		return err
	}
	r.setFam(int(f), famState{applied: text, saved: s.Ours()})
	return nil
}
