package firewall

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/model"
)

func vip(s string) Entry { return Entry{IP: netip.MustParseAddr(s)} }

func entries(pairs ...any) map[SetName]map[Entry]bool {
	m := map[SetName]map[Entry]bool{}
	for i := 0; i < len(pairs); i += 2 {
		n := SetName(pairs[i].(string))
		if m[n] == nil {
			m[n] = map[Entry]bool{}
		}
		m[n][pairs[i+1].(Entry)] = true
	}
	return m
}

func changeLines(c Changes) []string {
	var out []string
	for n, es := range c {
		for e, v := range es {
			sign := "-"
			if v {
				sign = "+"
			}
			out = append(out, sign+string(n)+" "+e.String())
		}
	}
	slices.Sort(out)
	return out
}

func TestTrackerCountsOwners(t *testing.T) {
	tr := NewTracker()
	a, b := model.ServiceName{Namespace: "ns", Name: "a"}, model.ServiceName{Namespace: "ns", Name: "b"}
	check := func(step string, add, del Changes, wantAdd, wantDel []string) {
		t.Helper()
		if g := changeLines(add); !slices.Equal(g, wantAdd) {
			t.Errorf("%s: add %v, want %v", step, g, wantAdd)
		}
		if g := changeLines(del); !slices.Equal(g, wantDel) {
			t.Errorf("%s: del %v, want %v", step, g, wantDel)
		}
	}

	add, del := update(tr, a, entries(SetVIPs, vip("10.0.0.1"), SetVIPs, vip("203.0.113.7")))
	check("a created", add, del, []string{"+KIPVS-VIPS 10.0.0.1", "+KIPVS-VIPS 203.0.113.7"}, nil)

	add, del = update(tr, a, entries(SetVIPs, vip("10.0.0.1"), SetVIPs, vip("203.0.113.7")))
	check("a unchanged", add, del, nil, nil)
	if changesLen(add)+changesLen(del) != 0 {
		t.Error("no change must yield empty Changes")
	}

	add, del = update(tr, b, entries(SetVIPs, vip("10.0.0.2"), SetVIPs, vip("203.0.113.7")))
	check("b shares the LB IP", add, del, []string{"+KIPVS-VIPS 10.0.0.2"}, nil)

	add, del = update(tr, a, nil)
	check("a deleted: the shared LB IP stays for b", add, del, nil, []string{"-KIPVS-VIPS 10.0.0.1"})

	add, del = update(tr, b, entries(SetVIPs, vip("10.0.0.2")))
	check("b drops the LB IP: now it goes", add, del, nil, []string{"-KIPVS-VIPS 203.0.113.7"})

	if got := lines(desired(tr)); !slices.Equal(got, []string{"KIPVS-VIPS 10.0.0.2"}) {
		t.Errorf("Desired = %v", got)
	}
	if n := tr.Count(SetVIPs); n != 1 {
		t.Errorf("Count = %d", n)
	}
	update(tr, b, nil)
	if d := desired(tr); len(d) != 0 {
		t.Errorf("after every Service left, Desired = %v", lines(d))
	}
}

// One Service's change touches only that Service's entries, whatever the others hold.
func TestTrackerChangeTouchesOnlyThatService(t *testing.T) {
	tr := NewTracker()
	for i := range 500 {
		e := Entry{IP: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), Proto: model.TCP, Port: 80}
		update(tr, model.ServiceName{Namespace: "ns", Name: "s" + e.IP.String()}, entries(SetClusterIP, e))
	}
	name := model.ServiceName{Namespace: "ns", Name: "s10.0.0.7"}
	old := Entry{IP: netip.MustParseAddr("10.0.0.7"), Proto: model.TCP, Port: 80}
	now := Entry{IP: netip.MustParseAddr("10.0.0.7"), Proto: model.TCP, Port: 443}
	add, del := update(tr, name, entries(SetClusterIP, now))
	if g := changeLines(add); !slices.Equal(g, []string{"+KIPVS-CLUSTER-IP 10.0.0.7,tcp:443"}) {
		t.Errorf("add %v", g)
	}
	if g := changeLines(del); !slices.Equal(g, []string{"-KIPVS-CLUSTER-IP " + old.String()}) {
		t.Errorf("del %v", g)
	}
	if n := tr.Count(SetClusterIP); n != 500 {
		t.Errorf("Count = %d, want 500", n)
	}
}

// An entry that moves from one Service to another in one sync is neither added nor
// deleted; separate Updates would report it as both.
func TestTrackerUpdateMembersNetsMoves(t *testing.T) {
	tr := NewTracker()
	a, b := model.ServiceName{Namespace: "ns", Name: "a"}, model.ServiceName{Namespace: "ns", Name: "b"}
	lb := vip("203.0.113.7")
	update(tr, a, entries(SetVIPs, lb, SetVIPs, vip("10.0.0.1")))
	add, del := updateMany(tr, map[model.ServiceName]map[SetName]map[Entry]bool{
		a: entries(SetVIPs, vip("10.0.0.1")),
		b: entries(SetVIPs, lb, SetVIPs, vip("10.0.0.2")),
	})
	if g := changeLines(add); !slices.Equal(g, []string{"+KIPVS-VIPS 10.0.0.2"}) {
		t.Errorf("add %v", g)
	}
	if g := changeLines(del); len(g) != 0 {
		t.Errorf("del %v", g)
	}
	if got := lines(desired(tr)); !slices.Equal(got, []string{"KIPVS-VIPS 10.0.0.1", "KIPVS-VIPS 10.0.0.2", "KIPVS-VIPS 203.0.113.7"}) {
		t.Errorf("Desired = %v", got)
	}
}
