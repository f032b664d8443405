package ipvs

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/nlcodec"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// The IPVS generic netlink protocol (linux/ip_vs.h), as far as the reconciler uses it.
// golang.org/x/sys/unix names none of it.
const (
	ipvsGenlName    = "IPVS"
	ipvsGenlVersion = 1

	cmdNewService = 1
	cmdSetService = 2
	cmdDelService = 3
	cmdGetService = 4
	cmdNewDest    = 5
	cmdSetDest    = 6
	cmdDelDest    = 7
	cmdGetDest    = 8

	attrCmdService = 1
	attrCmdDest    = 2

	attrSvcAF        = 1
	attrSvcProtocol  = 2
	attrSvcAddr      = 3
	attrSvcPort      = 4
	attrSvcFWMark    = 5
	attrSvcSchedName = 6
	attrSvcFlags     = 7
	attrSvcTimeout   = 8
	attrSvcNetmask   = 9

	attrDestAddr      = 1
	attrDestPort      = 2
	attrDestFwdMethod = 3
	attrDestWeight    = 4
	attrDestUThresh   = 5
	attrDestLThresh   = 6
	attrDestActive    = 7
	attrDestInactive  = 8
	attrDestAF        = 11

	connFlagMasq = 0 // IP_VS_CONN_F_MASQ
)

func addrBytes(a netip.Addr) []byte {
	if a.Is4() {
		b := a.As4()
		return b[:]
	}
	b := a.As16()
	return b[:]
}

// appendService writes the service attribute: the key, and with spec the whole entry.
func appendService(b []byte, key model.VSKey, spec *model.VSSpec) []byte {
	b, start := nlcodec.BeginNest(b, attrCmdService)
	af, mask := uint16(unix.AF_INET), uint32(0xffffffff)
	if key.Addr.Is6() {
		af, mask = unix.AF_INET6, 128
	}
	b = nlcodec.AppendU16(b, attrSvcAF, af)
	if key.FWMark != 0 {
		// The kernel keys a firewall-mark service by family and mark only.
		b = nlcodec.AppendU32(b, attrSvcFWMark, key.FWMark)
	} else {
		b = nlcodec.AppendU16(b, attrSvcProtocol, uint16(key.Proto))
		b = nlcodec.AppendAttr(b, attrSvcAddr, addrBytes(key.Addr))
		b = nlcodec.AppendBE16(b, attrSvcPort, key.Port)
	}
	if spec != nil {
		b = nlcodec.AppendString(b, attrSvcSchedName, spec.Scheduler)
		// struct ip_vs_flags: the flags, and the mask of those to change (all of them).
		var fl [8]byte
		binary.NativeEndian.PutUint32(fl[0:], spec.Flags&model.FlagsWeManage)
		binary.NativeEndian.PutUint32(fl[4:], 0xffffffff)
		b = nlcodec.AppendAttr(b, attrSvcFlags, fl[:])
		b = nlcodec.AppendU32(b, attrSvcTimeout, spec.Timeout)
		b = nlcodec.AppendU32(b, attrSvcNetmask, mask)
	}
	return nlcodec.EndNest(b, start)
}

// appendDest writes the destination attribute: the real server, and with full its
// forwarding (masquerade), weight and thresholds.
func appendDest(b []byte, rs model.RSKey, weight uint32, full bool) []byte {
	b, start := nlcodec.BeginNest(b, attrCmdDest)
	b = nlcodec.AppendAttr(b, attrDestAddr, addrBytes(rs.Addr))
	b = nlcodec.AppendBE16(b, attrDestPort, rs.Port)
	if full {
		b = nlcodec.AppendU32(b, attrDestFwdMethod, connFlagMasq)
		b = nlcodec.AppendU32(b, attrDestWeight, weight)
		b = nlcodec.AppendU32(b, attrDestUThresh, 0)
		b = nlcodec.AppendU32(b, attrDestLThresh, 0)
	}
	return nlcodec.EndNest(b, start)
}

// listedService is a service as the kernel lists it.
type listedService struct {
	key    model.VSKey
	spec   model.VSSpec
	af     uint16
	fwmark uint32
	ok     bool // a VSKey expresses it: a family and protocol we know
}

// parseService reads one answer of the service table.
func parseService(attrs []byte) (listedService, error) {
	var ls listedService
	var addr []byte
	var proto uint16
	err := eachNested(attrs, attrCmdService, func(a nlcodec.Attr) error {
		var err error
		switch a.Type {
		case attrSvcAF:
			ls.af, err = a.U16()
		case attrSvcProtocol:
			proto, err = a.U16()
		case attrSvcAddr:
			addr = a.Value
		case attrSvcPort:
			ls.key.Port, err = a.BE16()
		case attrSvcFWMark:
			ls.fwmark, err = a.U32()
		case attrSvcSchedName:
			ls.spec.Scheduler = nlcodec.CString(a.Value)
		case attrSvcFlags:
			ls.spec.Flags, err = a.U32()
			ls.spec.Flags &= model.FlagsWeManage
		case attrSvcTimeout:
			ls.spec.Timeout, err = a.U32()
		}
		return err
	})
	if err != nil {
		return ls, fmt.Errorf("virtual server in the listing: %w", err)
	}
	if ls.fwmark != 0 {
		// Listed with family and mark only (no protocol, address or port).
		ls.key = model.FWMarkKey(ls.fwmark, ls.af == unix.AF_INET6)
		ls.ok = ls.af == unix.AF_INET || ls.af == unix.AF_INET6
		return ls, nil
	}
	a, okAddr := addrOf(addr, ls.af)
	ls.key.Addr, ls.key.Proto = a, model.Protocol(proto)
	ls.ok = okAddr && proto <= 0xff
	return ls, nil
}

// listedDest is a real server as the kernel lists it.
type listedDest struct {
	rs            model.RSKey
	weight, conns uint32 // conns: active plus inactive connections
}

// parseDest reads one real server of a service of family af.
func parseDest(attrs []byte, af uint16) (listedDest, error) {
	var d listedDest
	var addr []byte
	err := eachNested(attrs, attrCmdDest, func(a nlcodec.Attr) error {
		var err error
		var n uint32
		switch a.Type {
		case attrDestAddr:
			addr = a.Value
		case attrDestAF:
			af, err = a.U16()
		case attrDestPort:
			d.rs.Port, err = a.BE16()
		case attrDestWeight:
			d.weight, err = a.U32()
		case attrDestActive, attrDestInactive:
			n, err = a.U32()
			d.conns += n
		}
		return err
	})
	if err != nil {
		return d, fmt.Errorf("real server in the listing: %w", err)
	}
	var ok bool
	if d.rs.Addr, ok = addrOf(addr, af); !ok {
		return d, fmt.Errorf("real server in the listing: %w: address of %d bytes in family %d", nlcodec.ErrMalformed, len(addr), af)
	}
	return d, nil
}

// eachNested calls fn for each attribute inside the attributes of type outer in attrs.
func eachNested(attrs []byte, outer uint16, fn func(nlcodec.Attr) error) error {
	return nlcodec.EachAttr(attrs, func(a nlcodec.Attr) error {
		if a.Type != outer {
			return nil
		}
		return nlcodec.EachAttr(a.Value, fn)
	})
}

// addrOf reads an address attribute (union nf_inet_addr: IPv4 in its first 4 bytes).
func addrOf(b []byte, af uint16) (netip.Addr, bool) {
	switch {
	case af == unix.AF_INET && len(b) >= 4:
		return netip.AddrFrom4([4]byte(b[:4])), true
	case af == unix.AF_INET6 && len(b) >= 16:
		return netip.AddrFrom16([16]byte(b[:16])).Unmap(), true
	}
	return netip.Addr{}, false
}

// services dumps the service table.
func (g *genl) services(fn func(listedService)) error {
	return g.dump(cmdGetService, func(b []byte) []byte { return b }, func(attrs []byte) error {
		ls, err := parseService(attrs)
		if err == nil {
			fn(ls)
		}
		return err
	})
}

// dests dumps the real servers of a virtual server (none if it does not exist).
func (g *genl) dests(key model.VSKey, fn func(listedDest)) error {
	af := uint16(unix.AF_INET)
	if key.Addr.Is6() {
		af = unix.AF_INET6
	}
	return g.dump(cmdGetDest, func(b []byte) []byte { return appendService(b, key, nil) }, func(attrs []byte) error {
		d, err := parseDest(attrs, af)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		fn(d)
		return nil
	})
}

// service reads one virtual server's service entry; ESRCH when it does not exist.
func (g *genl) service(key model.VSKey) (listedService, error) {
	var ls listedService
	err := g.get(cmdGetService, func(b []byte) []byte { return appendService(b, key, nil) }, func(attrs []byte) error {
		var err error
		ls, err = parseService(attrs)
		return err
	})
	return ls, err
}
