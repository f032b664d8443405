package controller

import (
	"fmt"
	"io"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// A cycle takes the held Services first, then those only the informers have, each once,
// and passes over held ones in bounded runs; before the informers' list is in it waits.
func TestCycleNamesTakesHeldThenListedOnce(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	held := map[model.ServiceName]*model.ServiceState{}
	const n = 3 * skipRun
	for i := range n {
		name := fmt.Sprintf("s%03d", i)
		_ = indexer.Add(service(name, "10.96.0.1", nil))
		if i != n-1 { // the last one only the informers have
			held[model.ServiceName{Namespace: "ns", Name: name}] = &model.ServiceState{}
		}
	}
	names := &cycleNames{held: []model.ServiceName{{Namespace: "ns", Name: "s000"}, {Namespace: "ns", Name: "gone"}}, listed: make(chan listedServices, 1)}
	var took []string
	skips := 0
	take := func() nameState {
		name, st, err := names.take(held)
		if err != nil {
			t.Fatal(err)
		}
		if st == nameReady {
			took = append(took, name.Name)
		}
		if st == nameSkipping {
			skips++
		}
		return st
	}
	take()
	take()
	if st := take(); st != nameWaiting || !names.more(held) {
		t.Fatalf("with the held names taken and no list in: %v, more %v; want waiting", st, names.more(held))
	}
	svcs, err := corelisters.NewServiceLister(indexer).List(labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	names.listed <- listedServices{svcs: svcs}
	for st := take(); st != namesDone; st = take() {
	}
	if want := []string{"s000", "gone", fmt.Sprintf("s%03d", n-1)}; !slices.Equal(took, want) {
		t.Errorf("took %v, want %v", took, want)
	}
	if skips < 2 {
		t.Errorf("%d runs of held Services passed over among %d, want them bounded by %d", skips, n, skipRun)
	}
	if names.more(held) {
		t.Error("more after the last name")
	}
}

// A Service the informers have but the proxy never heard of (its add event never reached
// the handlers) is added by the next repair cycle.
func TestRepairCycleAddsAServiceOnlyTheInformersHave(t *testing.T) {
	found := vsKey("10.96.1.9", 80)
	dp := runOneCycle(t, 2, 0, io.Discard, func(c *Controller) {
		store := c.src.svcInf.GetStore()
		if err := store.Add(service("quiet", "10.96.1.9", nil)); err != nil { // no event
			t.Fatal(err)
		}
	})
	if dp.vs[found] == nil {
		t.Errorf("after the cycle the Service only the informers had has no virtual server %s", found)
	}
	if dp.vs[vsKey("10.96.1.1", 80)] == nil {
		t.Error("the other Services' virtual servers are gone")
	}
}
