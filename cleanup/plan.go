// Package cleanup removes what a service proxy left on a node: `kube-ipvs cleanup`. It
// lists the kernel first and decides, object by object, what is whose (a Plan, which a dry
// run prints), then removes exactly those objects and reports each one it could not.
//
// kube-ipvs' own objects are its IPVS virtual servers (the rule of
// ipvsmode.Config.OwnsVirtualServer, which the periodic repair uses too: on an address of
// the dummy link, or on a node IP with a port in the NodePort range, never in
// ExcludeCIDRs), the dummy link with its addresses and its local routes of the proxy's
// protocol (dummyif.RouteProtocol), and the KIPVS- ipsets and chains (both
// modes': the iptables fallback names its chains KIPVS- too) with every rule that jumps to
// one, in both address families and on both iptables backends. kube-proxy's are the chains
// and ipsets kubeproxy.go names; its virtual servers and kube-ipvs0 are not among them,
// since kube-ipvs adopts those.
package cleanup

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/dataplane/ipvsmode"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// Config says what a cleanup removes.
type Config struct {
	// Dummy names the dummy link that holds the Service addresses (kube-ipvs0).
	Dummy string
	// Ownership holds what decides which virtual servers are the proxy's: ExcludeCIDRs
	// and the NodePort range.
	Ownership ipvsmode.Config
	// NodeIPs are the node addresses that get NodePort virtual servers.
	NodeIPs []netip.Addr
	// KubeProxy selects what kube-proxy left instead of kube-ipvs' own objects.
	KubeProxy bool
}

// Kernel is the node's kernel state, through the packages that program it.
type Kernel struct {
	IPVS   ipvs.Kernel     // nil when the kernel has no IPVS: there is nothing to remove
	Links  dummyif.Netlink // the dummy link and its addresses
	Sets   ipset.Kernel    // nil when the kernel has no ipset
	Tables *iptables.Tools // both backends, both families
}

// Plan is what a cleanup removes, in the order it removes it: rules and chains first (so
// no rule references a set being destroyed), then ipsets, then virtual servers, then the
// dummy link with its addresses.
type Plan struct {
	// Objects are the objects to remove.
	Objects []Object
	// Notes say what was not looked at, and why (no IPVS in this kernel, a backend's
	// tools not installed, a link of the dummy's name that is not a dummy).
	Notes []string
	steps []step
}

// step removes objects[first:first+n] with one kernel call or one restore.
type step struct {
	first, n int
	do       func() error
}

func (p *Plan) add(objs []Object, do func() error) {
	if len(objs) == 0 {
		return
	}
	p.steps = append(p.steps, step{first: len(p.Objects), n: len(objs), do: do})
	p.Objects = append(p.Objects, objs...)
}

// listAttempts bounds how often a listing the kernel marked interrupted is repeated.
const listAttempts = 3

// Make lists the kernel and returns the plan. It writes nothing. A listing that fails is
// an error: deciding what is whose from part of the state could remove a foreign object
// or miss an owned one.
func Make(cfg Config, k Kernel) (*Plan, error) {
	p := &Plan{}
	if err := p.planTables(cfg, k.Tables); err != nil {
		return nil, err
	}
	if err := p.planSets(cfg, k.Sets); err != nil {
		return nil, err
	}
	if cfg.KubeProxy {
		return p, nil
	}
	link, addrs, err := p.listDummy(cfg.Dummy, k.Links)
	if err != nil {
		return nil, err
	}
	routes, err := listRoutes(cfg.Dummy, link, k.Links)
	if err != nil {
		return nil, err
	}
	if err := p.planVirtualServers(cfg, k.IPVS, append(slices.Clip(addrs), routes...)); err != nil {
		return nil, err
	}
	p.planDummy(cfg.Dummy, k.Links, link, addrs, routes)
	return p, nil
}

// planTables selects the chains and the rules that jump to them, per backend, family and
// table: one restore each, so a refused one leaves the others done.
func (p *Plan) planTables(cfg Config, t *iptables.Tools) error {
	match, owner := iptables.IsOurs, OwnerKubeIPVS
	if cfg.KubeProxy {
		match, owner = IsKubeProxyChain, OwnerKubeProxy
	}
	for _, b := range []iptables.Backend{iptables.Legacy, iptables.NFT} {
		for _, f := range iptables.Families {
			if !t.Installed(b, f) {
				p.Notes = append(p.Notes, fmt.Sprintf("%s-%s tools are not installed: not looked at", f, b))
				continue
			}
			rs, err := t.SaveOn(b, f)
			if err != nil {
				return fmt.Errorf("listing %s-%s: %w", f, b, err)
			}
			for _, table := range rs.Tables {
				tx := table.RemoveChains(match)
				p.add(tableObjects(tx, b, f, owner), func() error { return t.RestoreOn(b, f, tx) })
			}
		}
	}
	return nil
}

// tableObjects turns a removal's deletions into objects (its flushes are part of
// removing the chains).
func tableObjects(tx *iptables.Transaction, b iptables.Backend, f iptables.Family, owner string) []Object {
	family := familyIPv4
	if f == iptables.V6 {
		family = familyIPv6
	}
	var objs []Object
	for _, op := range tx.Ops() {
		o := Object{Family: family, Backend: string(b), Table: op.Table, Owner: owner}
		switch op.Kind {
		case iptables.OpDelete:
			o.Kind, o.Chain, o.Name = KindRule, op.Chain, op.Spec
		case iptables.OpDeleteChain:
			o.Kind, o.Name = KindChain, op.Chain
		default:
			continue
		}
		objs = append(objs, o)
	}
	return objs
}

// planSets selects the KIPVS- ipsets (the temporary twins of a rebuild included), or
// kube-proxy's.
func (p *Plan) planSets(cfg Config, k ipset.Kernel) error {
	if k == nil {
		p.Notes = append(p.Notes, "ipset: not available in this kernel, no sets to remove")
		return nil
	}
	var headers []ipset.Header
	err := retryInterrupted(ipset.ErrDumpInterrupted, func() (err error) {
		headers, err = k.ListHeaders()
		return err
	})
	if err != nil {
		return fmt.Errorf("listing ipsets: %w", err)
	}
	slices.SortFunc(headers, func(a, b ipset.Header) int { return strings.Compare(string(a.Name), string(b.Name)) })
	for _, h := range headers {
		name := string(h.Name)
		owner := OwnerKubeIPVS
		if cfg.KubeProxy {
			owner = OwnerKubeProxy
		}
		if (cfg.KubeProxy && !IsKubeProxySet(name)) || (!cfg.KubeProxy && !strings.HasPrefix(name, firewall.Prefix)) {
			continue
		}
		o := Object{Kind: KindSet, Name: name, Family: setFamily(h.Family), Owner: owner}
		p.add([]Object{o}, func() error { return destroyWhenReleased(k, h.Name) })
	}
	return nil
}

func setFamily(f firewall.Family) string {
	switch f {
	case firewall.IPv4:
		return familyIPv4
	case firewall.IPv6:
		return familyIPv6
	}
	return ""
}

// listDummy finds the dummy link and lists its addresses. No link is no error; a link of
// that name that is not a dummy is someone else's: it and its addresses stay, and they do
// not make a virtual server the proxy's.
func (p *Plan) listDummy(name string, nl dummyif.Netlink) (*dummyif.Link, []netip.Prefix, error) {
	l, err := nl.LinkByName(name)
	if errors.Is(err, dummyif.ErrLinkNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("looking up %s: %w", name, err)
	}
	if l.Type != "dummy" {
		p.Notes = append(p.Notes, fmt.Sprintf("%s is a %s link, not a dummy: left alone, with its addresses", name, l.Type))
		return nil, nil, nil
	}
	var listed []dummyif.Address
	err = retryInterrupted(dummyif.ErrDumpInterrupted, func() (err error) {
		listed, err = nl.AddrList(l.Index)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("listing the addresses of %s: %w", name, err)
	}
	addrs := make([]netip.Prefix, 0, len(listed))
	for _, a := range listed {
		addrs = append(addrs, a.Prefix)
	}
	sortPrefixes(addrs)
	return &l, addrs, nil
}

// listRoutes lists the proxy's local routes through the dummy link (--vip-binding=route):
// only those with its protocol, never another route.
func listRoutes(name string, l *dummyif.Link, nl dummyif.Netlink) ([]netip.Prefix, error) {
	if l == nil {
		return nil, nil
	}
	var routes []netip.Prefix
	err := retryInterrupted(dummyif.ErrDumpInterrupted, func() (err error) {
		routes, err = nl.LocalRouteList(l.Index)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing the local routes through %s: %w", name, err)
	}
	sortPrefixes(routes)
	return routes, nil
}

func sortPrefixes(s []netip.Prefix) {
	slices.SortFunc(s, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
}

// planVirtualServers selects the virtual servers the proxy owns, by the rule the repair
// uses, against the dummy link's addresses as they are now.
func (p *Plan) planVirtualServers(cfg Config, k ipvs.Kernel, onLink []netip.Prefix) error {
	if k == nil {
		p.Notes = append(p.Notes, "IPVS: not available in this kernel, no virtual servers to remove")
		return nil
	}
	var vses []*model.VirtualServer
	err := retryInterrupted(ipvs.ErrDumpInterrupted, func() (err error) {
		vses, err = ipvs.ReadAll(k)
		return err
	})
	if err != nil {
		return fmt.Errorf("listing IPVS virtual servers: %w", err)
	}
	bound := make(map[netip.Addr]bool, len(onLink))
	for _, a := range onLink {
		bound[a.Addr()] = true
	}
	node := make(map[netip.Addr]bool, len(cfg.NodeIPs))
	for _, a := range cfg.NodeIPs {
		node[a] = true
	}
	var keys []model.VSKey
	for _, vs := range vses {
		if cfg.Ownership.OwnsVirtualServer(vs.Key, func(a netip.Addr) bool { return bound[a] }, func(a netip.Addr) bool { return node[a] }) {
			keys = append(keys, vs.Key)
		}
	}
	slices.SortFunc(keys, func(a, b model.VSKey) int { return strings.Compare(a.String(), b.String()) })
	for _, key := range keys {
		o := Object{Kind: KindVirtualServer, Name: key.String(), Family: addrFamily(key.Addr), Owner: OwnerKubeIPVS}
		p.add([]Object{o}, func() error { return k.DelService(key) })
	}
	return nil
}

// planDummy removes the link in one call, which takes its addresses and routes with it:
// deleting tens of thousands of addresses one by one costs the kernel a walk of the list
// each.
func (p *Plan) planDummy(name string, nl dummyif.Netlink, l *dummyif.Link, addrs, routes []netip.Prefix) {
	if l == nil {
		return
	}
	objs := make([]Object, 0, len(addrs)+len(routes)+1)
	for _, a := range addrs {
		objs = append(objs, Object{Kind: KindAddress, Name: a.String(), Family: addrFamily(a.Addr()), Link: name, Owner: OwnerKubeIPVS})
	}
	for _, r := range routes {
		objs = append(objs, Object{Kind: KindRoute, Name: r.String(), Family: addrFamily(r.Addr()), Link: name, Owner: OwnerKubeIPVS})
	}
	objs = append(objs, Object{Kind: KindLink, Name: name, Owner: OwnerKubeIPVS})
	index := l.Index
	p.add(objs, func() error { return nl.LinkDel(index) })
}

func addrFamily(a netip.Addr) string {
	if a.Unmap().Is4() {
		return familyIPv4
	}
	return familyIPv6
}

// retryInterrupted runs list again while it fails with interrupted, at most listAttempts
// times.
func retryInterrupted(interrupted error, list func() error) error {
	var err error
	for range listAttempts {
		if err = list(); !errors.Is(err, interrupted) {
			return err
		}
	}
	return err
}
