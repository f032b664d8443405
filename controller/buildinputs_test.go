package controller

import (
	"io"
	"net/netip"
	"reflect"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
)

// A repair cycle rebuilds a Service whose objects changed without an event reaching the
// handlers, and passes over those built from the very objects the informers hold: their
// states are the same objects after the cycle.
func TestRepairCycleRebuildsOnlyServicesWhoseObjectsChanged(t *testing.T) {
	var c *Controller
	var before map[string]*model.ServiceState
	dp := runOneCycle(t, 3, 0, io.Discard, func(ctl *Controller) {
		c = ctl
		store := c.src.sliceInf.GetStore()
		if err := store.Update(slice("s1", "s1-1", "10.244.1.2", "10.244.1.99")); err != nil { // no event
			t.Fatal(err)
		}
		c.stateMu.RLock()
		before = map[string]*model.ServiceState{}
		for n, st := range c.state.services {
			before[n.Name] = st
		}
		c.stateMu.RUnlock()
	})
	for _, name := range []string{"s0", "s2"} {
		if got := c.state.services[model.ServiceName{Namespace: "ns", Name: name}]; got != before[name] {
			t.Errorf("%s, whose objects did not change, was rebuilt by the cycle", name)
		}
	}
	if c.state.services[model.ServiceName{Namespace: "ns", Name: "s1"}] == before["s1"] {
		t.Error("s1, whose slice changed without an event, was not rebuilt")
	}
	vs := dp.vs[vsKey("10.96.1.2", 80)]
	if vs == nil {
		t.Fatal("s1 has no virtual server")
	}
	if _, ok := vs.Reals[model.RSKey{Addr: netip.MustParseAddr("10.244.1.99"), Port: 8080}]; !ok {
		t.Errorf("s1's virtual server lacks the endpoint its changed slice added: %v", vs.Reals)
	}
}

// configKey tells configs apart by every field a build reads but Unhealthy, and sets by
// their members, not their order. Every field of proxy.Config must have a change here: a
// field added to the config and not hashed would make repair cycles skip rebuilding.
func TestConfigKeySeesEveryBuildInput(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.1")
	b := netip.MustParseAddr("192.0.2.2")
	base := func() *proxy.Config {
		return &proxy.Config{DefaultScheduler: "rr", NodeName: "n", NodeZone: "z", NodeIPs: []netip.Addr{a},
			HostAddrs: map[netip.Addr]bool{a: true, b: true}, UnavailableSchedulers: map[string]bool{"mh": true}}
	}
	key := configKey(base())
	// Keyed by the field the change touches; "" for changes of several fields.
	changes := map[string]func(*proxy.Config){
		"DefaultScheduler":      func(c *proxy.Config) { c.DefaultScheduler = "lc" },
		"NodeName":              func(c *proxy.Config) { c.NodeName = "m" },
		"NodeZone":              func(c *proxy.Config) { c.NodeZone = "y" },
		"NodeIPs":               func(c *proxy.Config) { c.NodeIPs = []netip.Addr{a, b} },
		"HostAddrs":             func(c *proxy.Config) { delete(c.HostAddrs, b) },
		"UnavailableSchedulers": func(c *proxy.Config) { c.UnavailableSchedulers["sh"] = true },
		"NoSchedulers":          func(c *proxy.Config) { c.NoSchedulers = true },
		"NoHealthChecks":        func(c *proxy.Config) { c.NoHealthChecks = true },
		// A name and a zone that run together the same way differ too.
		"": func(c *proxy.Config) { c.NodeName, c.NodeZone = "nz", "" },
	}
	// Unhealthy is left out on purpose: a Service with a health check is always rebuilt (see
	// unchanged), so its verdicts need no key.
	fields := reflect.TypeOf(proxy.Config{})
	for i := range fields.NumField() {
		name := fields.Field(i).Name
		if _, ok := changes[name]; !ok && name != "Unhealthy" {
			t.Errorf("proxy.Config.%s has no change in this test: hash it in configKey and add it here", name)
		}
	}
	for what, change := range changes {
		cfg := base()
		change(cfg)
		if configKey(cfg) == key {
			t.Errorf("changing the %s left the key as it was", what)
		}
	}
	same := base()
	same.HostAddrs = map[netip.Addr]bool{b: true, a: true}
	same.Unhealthy = map[model.ServiceName]map[model.RSKey]bool{{Name: "x"}: {}}
	if configKey(same) != key {
		t.Error("the same config built in another order (and other verdicts) has another key")
	}
}
