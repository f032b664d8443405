package firewall

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"sync"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Packed is an Entry as the bookkeeping stores it: 38 bytes and no pointers, where an Entry
// takes 88 bytes with three pointers (netip.Addr carries one). At 50,000 Services the sets
// hold over half a million entries, kept by the Tracker and the ipset cache: compact and
// pointer-free, they take a fraction of the memory and the garbage collector does not scan
// them. Zones are not kept (no set entry has one).
type Packed struct {
	ip, ip2 [16]byte // ip2 holds the mark in a set with marks (no third dimension)
	port    uint16
	proto   model.Protocol
	flags   uint8 // packedIP, packedIP4, packedIP2, packedIP24, packedNet
	bits    uint8 // the network's prefix length (ip2 holds its address)
}

const (
	packedIP   = 1 << iota // ip is set
	packedIP4              // ip is IPv4
	packedIP2              // ip2 holds IP2
	packedIP24             // ip2 is IPv4
	packedNet              // ip2 holds Net's address, bits its length
	packedMark             // ip2's first 4 bytes hold Mark
)

func putAddr(dst *[16]byte, a netip.Addr) (is4 bool) {
	*dst = a.As16()
	return a.Is4()
}

func getAddr(b [16]byte, is4 bool) netip.Addr {
	if is4 {
		return netip.AddrFrom4([4]byte(b[12:16]))
	}
	return netip.AddrFrom16(b)
}

// Pack returns the packed form of e.
func (e Entry) Pack() Packed {
	p := Packed{port: e.Port, proto: e.Proto}
	if e.IP.IsValid() {
		p.flags |= packedIP
		if putAddr(&p.ip, e.IP) {
			p.flags |= packedIP4
		}
	}
	switch {
	case e.IP2.IsValid():
		p.flags |= packedIP2
		if putAddr(&p.ip2, e.IP2) {
			p.flags |= packedIP24
		}
	case e.Net.IsValid():
		p.flags |= packedNet
		if putAddr(&p.ip2, e.Net.Addr()) {
			p.flags |= packedIP24
		}
		p.bits = uint8(e.Net.Bits())
	case e.Mark != 0:
		p.flags |= packedMark
		binary.BigEndian.PutUint32(p.ip2[:4], e.Mark)
	}
	return p
}

// Entry returns the entry p packs.
func (p Packed) Entry() Entry {
	e := Entry{Port: p.port, Proto: p.proto}
	if p.flags&packedIP != 0 {
		e.IP = getAddr(p.ip, p.flags&packedIP4 != 0)
	}
	switch {
	case p.flags&packedIP2 != 0:
		e.IP2 = getAddr(p.ip2, p.flags&packedIP24 != 0)
	case p.flags&packedNet != 0:
		e.Net = netip.PrefixFrom(getAddr(p.ip2, p.flags&packedIP24 != 0), int(p.bits))
	case p.flags&packedMark != 0:
		e.Mark = p.mark()
	}
	return e
}

// Unmarked is p without its mark: the entry as the kernel keys it.
func (p Packed) Unmarked() Packed {
	if p.flags&packedMark != 0 {
		p.flags &^= packedMark
		p.ip2 = [16]byte{}
	}
	return p
}

func (p Packed) mark() uint32 {
	if p.flags&packedMark == 0 {
		return 0
	}
	return binary.BigEndian.Uint32(p.ip2[:4])
}

// Compare orders packed entries as EntryLess orders the entries they pack.
func (p Packed) Compare(o Packed) int {
	if c := cmpAddr(p.flags, o.flags, packedIP, packedIP4, &p.ip, &o.ip); c != 0 {
		return c
	}
	if p.proto != o.proto {
		return cmpInt(int(p.proto), int(o.proto))
	}
	if p.port != o.port {
		return cmpInt(int(p.port), int(o.port))
	}
	if c := cmpAddr(p.flags, o.flags, packedIP2, packedIP24, &p.ip2, &o.ip2); c != 0 {
		return c
	}
	if c := cmpAddr(p.flags, o.flags, packedNet, packedIP24, &p.ip2, &o.ip2); c != 0 {
		return c
	}
	if p.bits != o.bits {
		return cmpInt(int(p.bits), int(o.bits))
	}
	return cmpInt(int(p.mark()), int(o.mark()))
}

// cmpAddr compares one address field as netip.Addr.Compare does: absent, then IPv4, then
// IPv6, then by value.
func cmpAddr(pf, of, set, is4 uint8, pa, oa *[16]byte) int {
	kind := func(f uint8) int {
		switch {
		case f&set == 0:
			return 0
		case f&is4 != 0:
			return 1
		}
		return 2
	}
	pk, ok := kind(pf), kind(of)
	if pk != ok {
		return cmpInt(pk, ok)
	}
	if pk == 0 {
		return 0
	}
	return bytes.Compare(pa[:], oa[:])
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// SetID numbers set names compactly for the bookkeeping: the sets Sets can define have
// fixed numbers; any other name gets the next free one.
type SetID uint8

var setIDs = struct {
	sync.RWMutex
	ids   map[SetName]SetID
	names []SetName
}{ids: map[SetName]SetID{}}

func init() {
	for _, f := range []Family{IPv4, IPv6} {
		for _, b := range familySets {
			IDOf(Name(b.base, f))
		}
	}
	IDOf(SetHealthCheckNodePort)
}

// IDOf returns the number of a set name.
func IDOf(n SetName) SetID {
	setIDs.RLock()
	id, ok := setIDs.ids[n]
	setIDs.RUnlock()
	if ok {
		return id
	}
	setIDs.Lock()
	defer setIDs.Unlock()
	if id, ok := setIDs.ids[n]; ok {
		return id
	}
	if len(setIDs.names) > 255 {
		panic("firewall: more than 256 set names")
	}
	id = SetID(len(setIDs.names))
	setIDs.ids[n] = id
	setIDs.names = append(setIDs.names, n)
	return id
}

// Name returns the set name of a number IDOf gave.
func (id SetID) Name() SetName {
	setIDs.RLock()
	defer setIDs.RUnlock()
	return setIDs.names[id]
}

// Member is one entry of one set, packed.
type Member struct {
	Set   SetID
	Entry Packed
}

func compareMembers(a, b Member) int {
	if a.Set != b.Set {
		return cmpInt(int(a.Set), int(b.Set))
	}
	return a.Entry.Compare(b.Entry)
}
