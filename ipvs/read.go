package ipvs

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// The table is read one way: ListServices for the virtual servers and their specs, then
// ServiceSpec and RealServers by key. What reads more (one virtual server whole, the whole
// table) is built here from those, the same over the kernel and the fake.

// dumpAttempts bounds how often ReadAll reads the table again after seeing it change.
const dumpAttempts = 3

// ReadVirtualServer reads one virtual server with its real servers: two requests, each a
// lookup in the kernel's hash table. ErrNotFound (wrapped) when the kernel has no such one.
func ReadVirtualServer(k Kernel, key model.VSKey) (*model.VirtualServer, error) {
	spec, ok, err := k.ServiceSpec(key)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("get virtual server %s: %w", key, ErrNotFound)
	}
	reals, err := k.RealServers(key, nil)
	if err != nil {
		return nil, err
	}
	return &model.VirtualServer{Key: key, Spec: spec, Reals: reals}, nil
}

// ReadAll reads the whole table: every virtual server the model can express, with its real
// servers. It fails with ErrDumpInterrupted rather than return a table it cannot trust.
func ReadAll(k Kernel) ([]*model.VirtualServer, error) {
	var vses []*model.VirtualServer
	err := EachVirtualServer(k, func() { vses = vses[:0] }, func(vs *model.VirtualServer) { vses = append(vses, clone(vs)) })
	if err != nil {
		return nil, err
	}
	return vses, nil
}

// EachVirtualServer reads the whole table as ReadAll does, calling fn with each virtual
// server in an object it reuses (vs and its Reals are valid only during the call), so that a
// caller that only compares builds nothing. It lists the virtual servers, reads each one's
// real servers, and lists again: the kernel's IPVS dumps carry no consistency marker (it
// never sets NLM_F_DUMP_INTR), so a listing that differs after the reads means someone else
// changed the table meanwhile. Then it calls start and reads again, up to dumpAttempts
// times in all. start is called before each attempt: what fn saw before is to be forgotten.
func EachVirtualServer(k Kernel, start func(), fn func(vs *model.VirtualServer)) error {
	var err error
	for range dumpAttempts {
		start()
		if err = eachOnce(k, fn); err == nil || !errors.Is(err, ErrDumpInterrupted) {
			return err
		}
	}
	return err
}

func eachOnce(k Kernel, fn func(vs *model.VirtualServer)) error {
	before, err := k.ListServices()
	if err != nil {
		return err
	}
	// In order: the same table is read the same way every time (and logged so by the fake).
	keys := slices.SortedFunc(maps.Keys(before), func(a, b model.VSKey) int {
		if model.VSKeyLess(a, b) {
			return -1
		}
		return 1 // keys are unique
	})
	vs := &model.VirtualServer{Reals: map[model.RSKey]uint32{}}
	for _, key := range keys {
		vs.Key, vs.Spec = key, before[key]
		if vs.Reals, err = k.RealServers(key, vs.Reals); err != nil {
			return err
		}
		fn(vs)
	}
	after, err := k.ListServices()
	if err != nil {
		return err
	}
	if len(after) != len(before) {
		return fmt.Errorf("list virtual servers: %d before, %d after reading real servers: %w", len(before), len(after), ErrDumpInterrupted)
	}
	for key, spec := range before {
		if a, ok := after[key]; !ok || a != spec {
			return fmt.Errorf("list virtual servers: %s changed while reading real servers: %w", key, ErrDumpInterrupted)
		}
	}
	return nil
}
