package ipvsmode

import (
	"errors"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
)

func tcpKey(ip string, port uint16) model.VSKey {
	return model.VSKey{Addr: netip.MustParseAddr(ip), Proto: model.TCP, Port: port}
}

// snapshotOf is a repair's input for ClusterIP virtual servers on port 80, each bound.
func snapshotOf(ips ...string) dataplane.Snapshot {
	s := dataplane.Snapshot{VSes: map[model.VSKey]*model.VirtualServer{}, Binds: map[netip.Addr]bool{}}
	for _, ip := range ips {
		k := tcpKey(ip, 80)
		s.VSes[k] = &model.VirtualServer{Key: k, Kind: model.KindClusterIP, Spec: model.VSSpec{Scheduler: "rr"}}
		s.Binds[k.Addr] = true
	}
	return s
}

// repairWhole is a whole repair of s as the controller runs one: BeginRepair asked to be
// whole, then RepairStep until done (the first step is: TestBeginRepairIsWholeWhenAskedAndAtFirst).
func (d *Dataplane) repairWhole(s dataplane.Snapshot) dataplane.Result {
	l := liveOf(&s)
	l.Whole = true
	res := d.BeginRepair(l)
	for res.Err == nil {
		r, done := d.RepairStep(l, math.MaxInt)
		res.Merge(r)
		if done {
			break
		}
	}
	return res
}

// hookedNetlink runs hooks around the fake link's address calls.
type hookedNetlink struct {
	*dummyif.FakeNetlink
	onAdd   func()
	listErr error
}

func (h *hookedNetlink) AddrAdd(i int, p netip.Prefix, flags int) error {
	if h.onAdd != nil {
		h.onAdd()
	}
	return h.FakeNetlink.AddrAdd(i, p, flags)
}

func (h *hookedNetlink) AddrList(i int) ([]dummyif.Address, error) {
	if h.listErr != nil {
		return nil, h.listErr
	}
	return h.FakeNetlink.AddrList(i)
}

// hookedIPVS runs a hook when a virtual server is created.
type hookedIPVS struct {
	*ipvs.FakeKernel
	onNew func()
}

func (h *hookedIPVS) NewService(k model.VSKey, s model.VSSpec) error {
	if h.onNew != nil {
		h.onNew()
	}
	return h.FakeKernel.NewService(k, s)
}

func hookedDataplane(k ipvs.Kernel, nl dummyif.Netlink) *Dataplane {
	return NewWith(Config{Firewall: firewall.Config{IPv4: true}, NodePortMin: 30000, NodePortMax: 32767}, Parts{
		IPVS:      NewIPVS(k, 0),
		Addresses: dummyif.NewWithNetlink("kube-ipvs0", nl),
		Sets:      ipset.New(ipset.NewFakeKernel()),
		Rules:     iptables.New(iptables.NewFakeExec(), iptables.Config{Backend: iptables.Backend("nft")}),
	}, discard)
}

// A Service deleted while the proxy was down leaves its address on kube-ipvs0 and its
// virtual server behind: the first repair removes both, though the address is unbound in
// the same repair, and leaves a virtual server on an address that was never the proxy's.
func TestRepairRemovesWhatServicesDeletedWhileDownLeft(t *testing.T) {
	ipvsK, nl := ipvs.NewFakeKernel(), dummyif.NewFakeNetlink()
	stale, foreign := tcpKey("10.96.0.9", 80), tcpKey("192.0.2.50", 80)
	nl.PutLink("kube-ipvs0", "dummy")
	nl.PutAddr("kube-ipvs0", netip.PrefixFrom(stale.Addr, 32), 0)
	ipvsK.Put(&model.VirtualServer{Key: stale, Spec: model.VSSpec{Scheduler: "rr"}})
	ipvsK.Put(&model.VirtualServer{Key: foreign, Spec: model.VSSpec{Scheduler: "rr"}})
	dp := hookedDataplane(ipvsK, nl)
	if res := dp.repairWhole(snapshotOf("10.96.0.1")); res.Err != nil || res.Failed() != 0 {
		t.Fatalf("repair: %+v", res)
	}
	if _, err := ipvs.ReadVirtualServer(ipvsK, stale); err == nil {
		t.Error("the deleted Service's virtual server is left")
	}
	if got := nl.Addrs("kube-ipvs0"); slices.ContainsFunc(got, func(a string) bool { return strings.HasPrefix(a, "10.96.0.9/") }) {
		t.Errorf("the deleted Service's address is left: %v", got)
	}
	if _, err := ipvs.ReadVirtualServer(ipvsK, foreign); err != nil {
		t.Error("a virtual server that was never the proxy's was deleted")
	}
	if _, err := ipvs.ReadVirtualServer(ipvsK, tcpKey("10.96.0.1", 80)); err != nil {
		t.Errorf("the desired virtual server: %v", err)
	}
}

// The repair writes IPVS while the addresses are being written: binding tens of thousands
// of addresses is slow in the kernel, and IPVS need not wait for it. The address write
// waits here for the first virtual server: run one after the other, they would deadlock.
func TestRepairWritesAddressesAndIPVSAtOnce(t *testing.T) {
	ipvsBegan := make(chan struct{})
	var once bool
	k := &hookedIPVS{FakeKernel: ipvs.NewFakeKernel(), onNew: func() {
		if !once {
			once = true
			close(ipvsBegan)
		}
	}}
	nl := &hookedNetlink{FakeNetlink: dummyif.NewFakeNetlink()}
	nl.onAdd = func() {
		select {
		case <-ipvsBegan:
		case <-time.After(10 * time.Second):
			t.Error("the IPVS repair did not begin while the addresses were being written")
		}
	}
	dp := hookedDataplane(k, nl)
	if res := dp.repairWhole(snapshotOf("10.96.0.1")); res.Err != nil || res.Failed() != 0 {
		t.Fatalf("repair: %+v", res)
	}
	if _, err := ipvs.ReadVirtualServer(k, tcpKey("10.96.0.1", 80)); err != nil {
		t.Error("the virtual server was not written")
	}
	if got := nl.Addrs("kube-ipvs0"); !slices.ContainsFunc(got, func(a string) bool { return strings.HasPrefix(a, "10.96.0.1/") }) {
		t.Errorf("the address was not bound: %v", got)
	}
}

// When kube-ipvs0's addresses cannot be listed, IPVS is still repaired, owning only the
// virtual servers on addresses the proxy binds, and the repair reports the failure.
func TestRepairOwnsOnlyBoundAddressesWhenTheListingFails(t *testing.T) {
	ipvsK := ipvs.NewFakeKernel()
	unknown := tcpKey("10.96.0.9", 80)
	ipvsK.Put(&model.VirtualServer{Key: unknown, Spec: model.VSSpec{Scheduler: "rr"}})
	nl := &hookedNetlink{FakeNetlink: dummyif.NewFakeNetlink(), listErr: errors.New("listing refused")}
	dp := hookedDataplane(ipvsK, nl)
	res := dp.repairWhole(snapshotOf("10.96.0.1"))
	if res.Err == nil || !strings.Contains(res.Err.Error(), "listing refused") {
		t.Fatalf("repair error %v, want the address failure", res.Err)
	}
	if _, err := ipvs.ReadVirtualServer(ipvsK, tcpKey("10.96.0.1", 80)); err != nil {
		t.Error("IPVS was not repaired")
	}
	if _, err := ipvs.ReadVirtualServer(ipvsK, unknown); err != nil {
		t.Error("a virtual server on an address not known to be the proxy's was deleted")
	}
}

// The snapshot's Service CIDRs fill KIPVS-SERVICE-CIDRS; a later repair with other CIDRs
// makes the set hold exactly those (a ServiceCIDR added or removed), and Apply leaves it
// alone.
func TestRepairWritesServiceCIDRs(t *testing.T) {
	dp := hookedDataplane(ipvs.NewFakeKernel(), dummyif.NewFakeNetlink())
	set := firewall.Name(firewall.SetServiceCIDRs, firewall.IPv4)
	held := func() []string {
		var out []string
		for _, e := range dp.Sets().Entries(set) {
			out = append(out, e.String())
		}
		slices.Sort(out)
		return out
	}
	s := snapshotOf("10.96.0.1")
	s.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:96::/108")}
	res := dp.repairWhole(s)
	if res.Err != nil || res.Failed() != 0 {
		t.Fatalf("repair: %+v", res)
	}
	if got := held(); !slices.Equal(got, []string{"10.96.0.0/16"}) {
		t.Errorf("after the first repair the set holds %v", got)
	}
	// The snapshot has no Service states, so the CIDR is the one entry.
	if res.SetEntries != 1 {
		t.Errorf("SetEntries = %d, want 1", res.SetEntries)
	}
	if res := dp.Apply(dataplane.Change{}); res.Writes.SetEntries != 0 || !slices.Equal(held(), []string{"10.96.0.0/16"}) {
		t.Errorf("an empty Apply wrote %d set entries; the set holds %v", res.Writes.SetEntries, held())
	}
	s.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("10.200.0.0/24")}
	if res := dp.repairWhole(s); res.Err != nil || res.Writes.SetEntries != 1 {
		t.Fatalf("repair with a CIDR added: %+v", res)
	}
	if got := held(); !slices.Equal(got, []string{"10.200.0.0/24", "10.96.0.0/16"}) {
		t.Errorf("after a CIDR was added the set holds %v", got)
	}
	s.ServiceCIDRs = nil
	if res := dp.repairWhole(s); res.Err != nil || res.Failed() != 0 {
		t.Fatalf("repair without CIDRs: %+v", res)
	}
	if got := held(); len(got) != 0 {
		t.Errorf("without CIDRs the set holds %v", got)
	}
}

// A restart from address to route binding: the first repair binds the desired VIP as a
// route, removes every address, and deletes the virtual server of a Service deleted while
// the proxy was down, whose address marked it as the proxy's.
func TestRepairConvertsToRouteBinding(t *testing.T) {
	ipvsK, nl := ipvs.NewFakeKernel(), dummyif.NewFakeNetlink()
	stale := tcpKey("10.96.0.9", 80)
	nl.PutLink("kube-ipvs0", "dummy")
	nl.PutAddr("kube-ipvs0", netip.PrefixFrom(stale.Addr, 32), 0)
	nl.PutAddr("kube-ipvs0", netip.MustParsePrefix("10.96.0.1/32"), 0)
	ipvsK.Put(&model.VirtualServer{Key: stale, Spec: model.VSSpec{Scheduler: "rr"}})
	dp := hookedDataplane(ipvsK, nl)
	dp.p.Addresses = dummyif.NewBinding("kube-ipvs0", dummyif.BindRoute, nl)
	if res := dp.repairWhole(snapshotOf("10.96.0.1")); res.Err != nil || res.Failed() != 0 {
		t.Fatalf("repair: %+v", res)
	}
	if got := nl.Routes("kube-ipvs0"); !slices.Equal(got, []string{"10.96.0.1/32"}) {
		t.Errorf("local routes %v, want the desired VIP's", got)
	}
	if got := nl.Addrs("kube-ipvs0"); len(got) != 0 {
		t.Errorf("addresses left: %v", got)
	}
	if _, err := ipvs.ReadVirtualServer(ipvsK, stale); err == nil {
		t.Error("the deleted Service's virtual server is left")
	}
	if _, err := ipvs.ReadVirtualServer(ipvsK, tcpKey("10.96.0.1", 80)); err != nil {
		t.Errorf("the desired virtual server: %v", err)
	}
}
