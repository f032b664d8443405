package proxy

import (
	"maps"
	"math/rand"
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// selectRealsByLists is selectReals as first written, with lists of the ready and the
// fallback endpoints: the reference the allocation-free selectReals must agree with.
func selectRealsByLists(eps []endpoint, local bool, cfg *Config) map[model.RSKey]uint32 {
	var ready, fallback []endpoint
	for _, e := range eps {
		if local && !e.local {
			continue
		}
		switch {
		case e.ready:
			ready = append(ready, e)
		case e.serving && e.terminating:
			fallback = append(fallback, e)
		}
	}
	chosen := fallback
	if len(ready) > 0 {
		chosen = ready
		if !local {
			chosen = applyTopology(ready, cfg)
		}
	}
	reals := make(map[model.RSKey]uint32, len(chosen))
	for _, e := range chosen {
		reals[e.rs] = 1
	}
	return reals
}

// selectReals chooses exactly what the list-based selection does, over random endpoints
// (conditions, locality, node and zone hints) and configurations.
func TestSelectRealsAgreesWithListSelection(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for n := range 20000 {
		eps := make([]endpoint, rng.Intn(8))
		for i := range eps {
			eps[i] = endpoint{rs: model.RSKey{Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), Port: 80},
				ready: rng.Intn(2) == 0, serving: rng.Intn(2) == 0, terminating: rng.Intn(2) == 0, local: rng.Intn(2) == 0,
				zoneHinted: rng.Intn(3) != 0, forMyZone: rng.Intn(2) == 0, nodeHinted: rng.Intn(3) != 0, forMyNode: rng.Intn(2) == 0}
		}
		cfg := &Config{}
		if rng.Intn(2) == 0 {
			cfg.NodeName = "me"
		}
		if rng.Intn(2) == 0 {
			cfg.NodeZone = "z"
		}
		local := rng.Intn(2) == 0
		if got, want := selectReals(eps, local, cfg), selectRealsByLists(eps, local, cfg); !maps.Equal(got, want) {
			t.Fatalf("case %d: %+v local=%v cfg=%+v: got %v, want %v", n, eps, local, cfg, got, want)
		}
	}
}
