// Package ipset keeps the kernel's ipsets as package firewall defines them, over netlink
// (never one ipset process per entry).
//
// The Reconciler caches what each set holds, so Apply writes only entries that change (no
// kernel call at all when nothing does), in batches of up to BatchSize entries per netlink
// request. Invariants:
//   - Only sets whose names start with firewall.Prefix are ever written or destroyed.
//   - A set is sized to its content (Size): hash size and maximum element count grow with
//     it. A set that must change type, family, range or grow past its maximum is rebuilt
//     wholesale: a temporary twin (firewall.TempName) is created at the new size, filled
//     completely, then swapped in with one kernel call, so no packet ever sees a half-filled
//     set, and iptables rules keep referring to the same name throughout.
//   - The cache holds exactly the writes the kernel acknowledged. A batch that fails is
//     retried entry by entry, so errors name the entries and the cache stays exact; a set
//     found missing (someone destroyed it) is re-created with the cached content plus the
//     change.
package ipset

import (
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/internal/foreground"
)

// DefaultBatchSize is how many entries go into one netlink request: about 40 KB for the
// largest entries, well inside a netlink socket's buffers.
const DefaultBatchSize = 500

// listAttempts bounds how often a listing is repeated after the kernel reported it
// interrupted.
const listAttempts = 3

// Result reports one Apply, Resync or Cleanup.
type Result struct {
	// Writes is how many kernel write requests were made (successful or not); a batch of
	// entries is one.
	Writes int
	// Errors holds, per set, what went wrong with it; other sets were still done.
	Errors map[firewall.SetName]error
	// Err is set when the operation as a whole failed before writing (a listing failed).
	Err error
}

func (res *Result) fail(n firewall.SetName, err error) {
	if res.Errors == nil {
		res.Errors = map[firewall.SetName]error{}
	}
	res.Errors[n] = errors.Join(res.Errors[n], err)
}

// Reconciler keeps kube-ipvs' ipsets. It is safe for concurrent use; calls are serialized.
type Reconciler struct {
	mu     sync.Mutex
	k      Kernel
	defs   map[firewall.SetName]firewall.SetDef
	sets   map[firewall.SetName]*set
	writes atomic.Uint64

	// BatchSize is the number of entries per add or delete request (DefaultBatchSize when
	// 0). Set it before the first call.
	BatchSize int
	// Lister, if set, is a second kernel handle (its own socket) through which a stepped
	// check (BeginCheck) lists sets in the background while Apply goes on through the
	// first. Without it a check lists in BeginCheck itself. Set it before the first call.
	Lister Kernel
	// Gate is where a background check parks between batches of a listing while a change
	// is applied (the gate Lister's listings park at; nil: never). Set it with Lister.
	Gate *foreground.Gate

	// watch holds, per set a background check is listing, what Apply changed meanwhile.
	watch map[firewall.SetName]*watchState
	// seed is the fingerprints' (setListing).
	seed maphash.Seed

	// headerGen counts the writes that change the sets' headers (a create, a swap, a
	// destroy), so that a background listing of the headers that one may have overtaken
	// is not believed.
	headerGen uint64
}

// set is the cached state of one kernel set. Entries are packed (firewall.Packed): at
// 50,000 Services the hairpin set alone holds over half a million.
type set struct {
	spec    Spec
	entries map[firewall.Packed]struct{}
	// listed is the buffer a stepped check lists the set's fingerprints into, kept from one
	// check to the next (see setListing).
	listed []uint64
}

// New returns a Reconciler with an empty cache: call Resync first; it creates the sets and
// adopts what the kernel already has.
func New(k Kernel) *Reconciler {
	return &Reconciler{k: k, defs: map[firewall.SetName]firewall.SetDef{}, sets: map[firewall.SetName]*set{}, seed: maphash.MakeSeed()}
}

// Writes returns the number of kernel write requests made so far.
func (r *Reconciler) Writes() uint64 { return r.writes.Load() }

// Spec returns the cached spec of a set (its size as last created or listed).
func (r *Reconciler) Spec(n firewall.SetName) (Spec, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sets[n]
	if !ok {
		return Spec{}, false
	}
	return s.spec, true
}

// Entries returns the cached entries of a set, sorted.
func (r *Reconciler) Entries(n firewall.SetName) []firewall.Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sets[n]
	if !ok {
		return nil
	}
	return unpack(nil, sortedPacked(s.entries))
}

// Count returns the number of cached entries of a set.
func (r *Reconciler) Count(n firewall.SetName) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.sets[n]; ok {
		return len(s.entries)
	}
	return 0
}

// Cleanup destroys every set whose name starts with firewall.Prefix and forgets them. Run
// it after the iptables rules that use them are gone (iptables Cleanup); sets still
// referenced are reported in Errors and left.
func (r *Reconciler) Cleanup() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	headers, err := r.ownHeaders()
	if err != nil {
		return Result{Err: fmt.Errorf("ipset cleanup: %w", err)}
	}
	r.sets = map[firewall.SetName]*set{}
	r.defs = map[firewall.SetName]firewall.SetDef{}
	r.voidChecks()
	res := Result{}
	r.headerGen++
	for _, h := range headers {
		if err := r.noteWrite(&res, r.k.Destroy(h.Name)); err != nil && !errors.Is(err, ErrSetNotFound) {
			res.fail(h.Name, err)
		}
	}
	return res
}

// noteWrite accounts for one kernel write request that already returned err.
func (r *Reconciler) noteWrite(res *Result, err error) error {
	res.Writes++
	r.writes.Add(1)
	return err
}

func sortPacked(s []firewall.Packed) {
	slices.SortFunc(s, firewall.Packed.Compare)
}

func sortedPacked(m map[firewall.Packed]struct{}) []firewall.Packed {
	out := make([]firewall.Packed, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sortPacked(out)
	return out
}
