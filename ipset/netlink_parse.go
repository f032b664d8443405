package ipset

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink/nl"

	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/internal/nlcodec"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// Parsers of the kernel's ipset listing messages (IPSET_CMD_LIST answers).

// merge adds the header of a later message of one set's listing to into.
func merge(into *Header, h Header) {
	if into.Type == "" {
		into.Type, into.Family = h.Type, h.Family
	}
	if h.HashSize != 0 || h.MaxElem != 0 || h.PortTo != 0 {
		into.HashSize, into.MaxElem, into.PortFrom, into.PortTo = h.HashSize, h.MaxElem, h.PortFrom, h.PortTo
		into.Entries, into.References = h.Entries, h.References
	}
}

// parseSetMessage reads one message of a list dump: the set's name and header (the header
// only in the set's first message) and, with withEntries, its entries, appended to es (a
// listing reuses one slice for all its messages: a new one per message was half of what a
// repair cycle allocated at 50,000 Services).
func parseSetMessage(m []byte, withEntries bool, es []firewall.Entry) (Header, []firewall.Entry, error) {
	var h Header
	attrs, err := nlcodec.PayloadAttrs(m)
	if err != nil {
		return h, nil, err
	}
	err = nlcodec.EachAttr(attrs, func(a nlcodec.Attr) error {
		switch a.Type {
		case nl.IPSET_ATTR_SETNAME:
			h.Name = firewall.SetName(nlcodec.CString(a.Value))
		case nl.IPSET_ATTR_TYPENAME:
			h.Type = firewall.SetType(nlcodec.CString(a.Value))
		case nl.IPSET_ATTR_FAMILY:
			p, err := a.U8()
			h.Family = familyOf(p)
			return err
		case nl.IPSET_ATTR_DATA:
			return parseHeaderData(a.Value, &h)
		case nl.IPSET_ATTR_ADT:
			if withEntries {
				return parseADT(a.Value, func(e firewall.Entry) { es = append(es, e) })
			}
		}
		return nil
	})
	if err != nil {
		return h, nil, err
	}
	if h.Name == "" {
		return h, nil, errors.New("message without a set name")
	}
	return h, es, nil
}

// parseHeaderData reads the IPSET_ATTR_DATA of a set's header.
func parseHeaderData(b []byte, h *Header) error {
	return nlcodec.EachAttr(b, func(a nlcodec.Attr) error {
		var err error
		switch a.Type {
		case nl.IPSET_ATTR_HASHSIZE:
			h.HashSize, err = a.BE32()
		case nl.IPSET_ATTR_MAXELEM:
			h.MaxElem, err = a.BE32()
		case nl.IPSET_ATTR_ELEMENTS:
			h.Entries, err = a.BE32()
		case nl.IPSET_ATTR_REFERENCES:
			h.References, err = a.BE32()
		case nl.IPSET_ATTR_PORT_FROM:
			h.PortFrom, err = a.BE16()
		case nl.IPSET_ATTR_PORT_TO:
			h.PortTo, err = a.BE16()
		case nl.IPSET_ATTR_CADT_FLAGS:
			var f uint32
			f, err = a.BE32()
			h.SkbInfo = f&nl.IPSET_FLAG_WITH_SKBINFO != 0
		}
		return err
	})
}

// parseADT reads the entries of an IPSET_ATTR_ADT.
func parseADT(b []byte, fn func(firewall.Entry)) error {
	return nlcodec.EachAttr(b, func(a nlcodec.Attr) error {
		if a.Type != nl.IPSET_ATTR_DATA {
			return nil
		}
		e, err := parseEntry(a.Value)
		if err == nil {
			fn(e)
		}
		return err
	})
}

func parseEntry(b []byte) (firewall.Entry, error) {
	var e firewall.Entry
	var ip2 netip.Addr
	cidr, cidr2 := -1, -1
	err := nlcodec.EachAttr(b, func(a nlcodec.Attr) error {
		var err error
		var v uint8
		switch a.Type {
		case nl.IPSET_ATTR_IP:
			e.IP, err = nestedAddr(a.Value)
		case nl.IPSET_ATTR_IP2:
			ip2, err = nestedAddr(a.Value)
		case nl.IPSET_ATTR_CIDR:
			v, err = a.U8()
			cidr = int(v)
		case nl.IPSET_ATTR_CIDR2:
			v, err = a.U8()
			cidr2 = int(v)
		case nl.IPSET_ATTR_PORT:
			e.Port, err = a.BE16()
		case nl.IPSET_ATTR_PROTO:
			v, err = a.U8()
			e.Proto = model.Protocol(v)
		case nl.IPSET_ATTR_SKBMARK:
			var m uint64
			m, err = a.BE64()
			e.Mark = uint32(m >> 32)
		}
		return err
	})
	if err != nil {
		return e, err
	}
	switch {
	case e.IP.IsValid() && cidr >= 0: // hash:net
		p, err := e.IP.Prefix(cidr)
		if err != nil {
			return e, fmt.Errorf("entry with network %s/%d: %w", e.IP, cidr, err)
		}
		e.IP, e.Net = netip.Addr{}, p
	case ip2.IsValid() && cidr2 >= 0:
		p, err := ip2.Prefix(cidr2)
		if err != nil {
			return e, fmt.Errorf("entry with network %s/%d: %w", ip2, cidr2, err)
		}
		e.Net = p
	case ip2.IsValid():
		e.IP2 = ip2
	}
	return e, nil
}

// nestedAddr reads an IPSET_ATTR_IP or IPSET_ATTR_IP2: one nested address attribute.
func nestedAddr(b []byte) (netip.Addr, error) {
	var addr netip.Addr
	err := nlcodec.EachAttr(b, func(a nlcodec.Attr) error {
		switch {
		case a.Type == nl.IPSET_ATTR_IPADDR_IPV4 && len(a.Value) == 4:
			addr = netip.AddrFrom4([4]byte(a.Value))
		case a.Type == nl.IPSET_ATTR_IPADDR_IPV6 && len(a.Value) == 16:
			addr = netip.AddrFrom16([16]byte(a.Value))
		case a.Type == nl.IPSET_ATTR_IPADDR_IPV4 || a.Type == nl.IPSET_ATTR_IPADDR_IPV6:
			return fmt.Errorf("%w: address attribute of %d bytes", nlcodec.ErrMalformed, len(a.Value))
		}
		return nil
	})
	return addr, err
}
