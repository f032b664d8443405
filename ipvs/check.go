package ipvs

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Check is one repair of the IPVS table cut into bounded steps, so that changes applied
// between the steps (Apply) never wait for the whole table to be read back.
//
// BeginCheck lists the virtual servers without their real servers (one request); each Step
// then reads the real servers of a bounded number of them (one request each), compares
// them with the desired state as it is at that step, and writes what drifted. A step's
// reads and writes happen under the reconciler's lock, so no Apply lands between them;
// what can be stale is the listing. So a virtual server written by anyone since the
// listing (its generation moved on, see Reconciler.touched) is not judged by the listing:
// it is read again whole at its step, and if the change already made it right the check
// writes nothing for it. A change is never reverted by a repair that began before it.
type Check struct {
	r      *Reconciler
	began  uint64                       // the reconciler's generation at the listing
	listed map[model.VSKey]model.VSSpec // the kernel's virtual servers at the listing
	keys   []model.VSKey                // what is left to check, in order
}

// stepReader is a Kernel that can list the virtual servers without their real servers and
// read one virtual server's real servers alone: one request each.
type stepReader interface {
	ListServices() (map[model.VSKey]model.VSSpec, error)
	// RealServers reads the real servers of a virtual server; none if it does not exist.
	RealServers(key model.VSKey) (map[model.RSKey]uint32, error)
}

// BeginCheck lists the kernel's virtual servers and queues for checking every one of them,
// every virtual server in desired and every one the cache holds. Nothing is written.
func (r *Reconciler) BeginCheck(desired func(yield func(model.VSKey) bool)) (*Check, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	listed, err := r.listSpecs()
	if err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	clear(r.touched) // every write so far is older than the listing
	seen := make(map[model.VSKey]bool, len(listed)+len(r.applied))
	c := &Check{r: r, began: r.gen, listed: listed}
	add := func(k model.VSKey) bool {
		if !seen[k] {
			seen[k] = true
			c.keys = append(c.keys, k)
		}
		return true
	}
	for k := range listed {
		add(k)
	}
	for k := range r.applied {
		add(k)
	}
	desired(add)
	sort.Slice(c.keys, func(i, j int) bool { return model.VSKeyLess(c.keys[i], c.keys[j]) })
	return c, nil
}

// Left is how many virtual servers the check has yet to look at.
func (c *Check) Left() int { return len(c.keys) }

// Step checks up to budget more virtual servers against desired (the desired state now: nil
// for one that is not wanted) and writes what drifted: a wanted one is made right, one
// that is not wanted is deleted if owned says it is the proxy's. done: nothing is left.
func (c *Check) Step(budget int, desired func(model.VSKey) *model.VirtualServer, owned func(model.VSKey) bool) (res Result, done bool) {
	return c.StepUntil(budget, time.Time{}, desired, owned)
}

// StepUntil is Step, but stops reading once until has passed (after one virtual server at
// least; zero: no time limit): under emulation or load one read can take milliseconds, and a
// step must stay short whatever the machine.
func (c *Check) StepUntil(budget int, until time.Time, desired func(model.VSKey) *model.VirtualServer, owned func(model.VSKey) bool) (res Result, done bool) {
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(max(budget, 1), len(c.keys))
	changes := make(map[model.VSKey]*model.VirtualServer)
	var failed map[model.VSKey]error
	taken := 0
	for _, key := range c.keys[:n] {
		if taken > 0 && !until.IsZero() && time.Now().After(until) {
			break
		}
		taken++
		have, err := c.read(key)
		if err != nil {
			if failed == nil {
				failed = map[model.VSKey]error{}
			}
			failed[key] = err
			continue
		}
		want := desired(key)
		r.adopt(key, have, want)
		switch {
		case want != nil && r.shared[key] && len(r.draining[key]) == 0:
			r.wantSpec[key] = want.Spec // exactly as desired: nothing to write
		case want != nil:
			changes[key] = want
		case have != nil && owned != nil && owned(key):
			changes[key] = nil
		}
	}
	c.keys = c.keys[taken:]
	res = r.apply(changes)
	for k, e := range failed {
		if res.Errors == nil {
			res.Errors = map[model.VSKey]error{}
		}
		res.Errors[k] = e
	}
	return res, len(c.keys) == 0
}

// read returns what the kernel holds for key now (nil: nothing), from the listing and one
// read of its real servers when nobody wrote it since the listing, else from a fresh read.
func (c *Check) read(key model.VSKey) (*model.VirtualServer, error) {
	r := c.r
	spec, listed := c.listed[key]
	if r.touched[key] <= c.began {
		if !listed {
			return nil, nil // absent at the listing, and not written since
		}
		if sr, ok := r.k.(stepReader); ok {
			reals, err := sr.RealServers(key)
			if err != nil {
				return nil, err
			}
			if len(reals) > 0 {
				return &model.VirtualServer{Key: key, Spec: spec, Reals: reals}, nil
			}
			// No real servers, or no virtual server any more: read it whole to know which.
		}
	}
	vs, err := r.k.GetVirtualServer(key)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return vs, err
}

// adopt makes the kernel's state of key (have, nil: absent) the cache, as Resync does with
// its dump: as the caller's own object when it is exactly what is wanted and sharing is on.
func (r *Reconciler) adopt(key model.VSKey, have, want *model.VirtualServer) {
	switch {
	case have == nil:
		r.forget(key)
	case r.share && want != nil && want.Spec.Flags&^model.FlagsWeManage == 0 &&
		have.Spec.Flags&^model.FlagsWeManage == 0 && have.Equal(want):
		r.applied[key] = want
		r.shared[key] = true
	default:
		r.applied[key] = normalize(have)
		delete(r.shared, key)
	}
}

// listSpecs lists the virtual servers' keys and specs: in one request over a stepReader
// kernel, from a full listing otherwise.
func (r *Reconciler) listSpecs() (map[model.VSKey]model.VSSpec, error) {
	if sr, ok := r.k.(stepReader); ok {
		return sr.ListServices()
	}
	vses, err := r.k.ListVirtualServers()
	if err != nil {
		return nil, err
	}
	out := make(map[model.VSKey]model.VSSpec, len(vses))
	for _, vs := range vses {
		out[vs.Key] = vs.Spec
	}
	return out, nil
}
