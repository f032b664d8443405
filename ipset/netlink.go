package ipset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// Why our own messages instead of vishvananda/netlink's Ipset* calls (v1.3.1): its
// IpsetCreate cannot set the hash size, its IpsetAdd/IpsetDel send one request per entry
// (we batch hundreds into one IPSET_ATTR_ADT request, as `ipset restore` does), and its
// listing logs every attribute it does not know (newer kernels report bucketsize and
// initval) and does not merge a large set split over several dump messages. The socket,
// request serialization and receive loop are still the library's (package nl).

// Netlink constants of the ipset protocol (linux/netfilter/ipset/ip_set.h) that package nl
// does not name.
const (
	ipsetFlagListHeader = 1 << 2 // IPSET_FLAG_LIST_HEADER: dump headers only
	attrRevisionMin     = nl.IPSET_ATTR_PROTOCOL_MIN
	attrSetName2        = nl.IPSET_ATTR_TYPENAME // at swap, the second name
	nfprotoIPv4         = 2
	nfprotoIPv6         = 10

	errHashFull  = 4352 // IPSET_ERR_HASH_FULL (type-specific)
	attrTypeMask = ^uint16(unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
)

// NetlinkKernel is the Kernel over an ipset netlink socket bound to one network namespace.
type NetlinkKernel struct {
	sock *nl.SocketHandle

	mu        sync.Mutex
	revisions map[revKey]uint8 // newest revision the kernel has per type and family
}

type revKey struct {
	typ firewall.SetType
	fam firewall.Family
}

// NewKernel opens a netlink socket in the calling thread's network namespace. The socket
// stays in that namespace whatever thread uses it later.
func NewKernel() (*NetlinkKernel, error) { return NewKernelAt(netns.None()) }

// NewKernelAt opens a netlink socket in the given network namespace (netns.None(): the
// calling thread's).
func NewKernelAt(ns netns.NsHandle) (*NetlinkKernel, error) {
	s, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("ipset: open netlink socket: %w", err)
	}
	// Error acknowledgements carry no copy of the (possibly large batched) request.
	if err := unix.SetsockoptInt(s.GetFd(), unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1); err != nil {
		s.Close()
		return nil, fmt.Errorf("ipset: netlink socket: NETLINK_CAP_ACK: %w", err)
	}
	if err := s.SetReceiveTimeout(&unix.Timeval{Sec: 60}); err != nil {
		s.Close()
		return nil, fmt.Errorf("ipset: netlink socket: %w", err)
	}
	return &NetlinkKernel{sock: &nl.SocketHandle{Socket: s}, revisions: map[revKey]uint8{}}, nil
}

// Close closes the socket.
func (k *NetlinkKernel) Close() { k.sock.Socket.Close() }

func (k *NetlinkKernel) request(cmd int, flags int) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(cmd|(unix.NFNL_SUBSYS_IPSET<<8), flags)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_NETFILTER: k.sock}
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_INET, Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_PROTOCOL, nl.Uint8Attr(nl.IPSET_PROTOCOL)))
	return req
}

func (k *NetlinkKernel) exec(req *nl.NetlinkRequest, what string) ([][]byte, error) {
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	if err != nil {
		return nil, fmt.Errorf("ipset %s: %w", what, kernelError(err))
	}
	return msgs, nil
}

// kernelError maps ipset's private error numbers to our errors, keeping the number.
func kernelError(err error) error {
	if errors.Is(err, nl.ErrDumpInterrupted) {
		return ErrDumpInterrupted
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err
	}
	switch int(errno) {
	case int(unix.ENOENT):
		return fmt.Errorf("%w (%v)", ErrSetNotFound, err)
	case nl.IPSET_ERR_EXIST_SETNAME2:
		return fmt.Errorf("%w (second set of a swap)", ErrSetNotFound)
	case int(unix.EEXIST), nl.IPSET_ERR_EXIST:
		return fmt.Errorf("%w (%s)", ErrSetExists, nl.IPSetError(errno).Error())
	case nl.IPSET_ERR_BUSY, nl.IPSET_ERR_REFERENCED:
		return fmt.Errorf("%w (%s)", ErrSetInUse, nl.IPSetError(errno).Error())
	case nl.IPSET_ERR_TYPE_MISMATCH:
		return fmt.Errorf("%w (%s)", ErrTypeMismatch, nl.IPSetError(errno).Error())
	case errHashFull:
		return fmt.Errorf("%w (hash full, or element out of a bitmap's range)", ErrSetFull)
	}
	if int(errno) >= nl.IPSET_ERR_PRIVATE {
		return fmt.Errorf("ipset error %d: %s", int(errno), nl.IPSetError(errno).Error())
	}
	return err
}

func setName(n firewall.SetName) *nl.RtAttr {
	return nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(string(n)))
}

func nfproto(f firewall.Family) uint8 {
	switch f {
	case firewall.IPv4:
		return nfprotoIPv4
	case firewall.IPv6:
		return nfprotoIPv6
	}
	return unix.NFPROTO_UNSPEC
}

func familyOf(p uint8) firewall.Family {
	switch p {
	case nfprotoIPv4:
		return firewall.IPv4
	case nfprotoIPv6:
		return firewall.IPv6
	}
	return firewall.AnyFamily
}

// revision returns the newest revision of the set type the kernel supports: every type
// revision the reconciler uses understands the same attributes, and the newest has the
// kernel's best implementation.
func (k *NetlinkKernel) revision(t firewall.SetType, f firewall.Family) (uint8, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := revKey{t, f}
	if r, ok := k.revisions[key]; ok {
		return r, nil
	}
	req := k.request(nl.IPSET_CMD_TYPE, 0)
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_TYPENAME, nl.ZeroTerminated(string(t))))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_FAMILY, nl.Uint8Attr(nfproto(f))))
	msgs, err := k.exec(req, "type "+string(t))
	if err != nil {
		return 0, err
	}
	for _, m := range msgs {
		for _, a := range attrs(m[4:]) {
			if a.typ == nl.IPSET_ATTR_REVISION && len(a.val) == 1 {
				k.revisions[key] = a.val[0]
				return a.val[0], nil
			}
		}
	}
	return 0, fmt.Errorf("ipset type %s: the kernel named no revision", t)
}

// Create implements Kernel.
func (k *NetlinkKernel) Create(s Spec) error {
	rev, err := k.revision(s.Type, s.Family)
	if err != nil {
		return fmt.Errorf("create %s: %w", s.Name, err)
	}
	req := k.request(nl.IPSET_CMD_CREATE, unix.NLM_F_ACK|unix.NLM_F_EXCL|unix.NLM_F_CREATE)
	req.AddData(setName(s.Name))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_TYPENAME, nl.ZeroTerminated(string(s.Type))))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_REVISION, nl.Uint8Attr(rev)))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_FAMILY, nl.Uint8Attr(nfproto(s.Family))))
	data := nl.NewRtAttr(nl.IPSET_ATTR_DATA|unix.NLA_F_NESTED, nil)
	if s.Type == firewall.BitmapPort {
		data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_PORT_FROM|unix.NLA_F_NET_BYTEORDER, be16(s.PortFrom)))
		data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_PORT_TO|unix.NLA_F_NET_BYTEORDER, be16(s.PortTo)))
	} else {
		data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_HASHSIZE|unix.NLA_F_NET_BYTEORDER, be32(s.HashSize)))
		data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_MAXELEM|unix.NLA_F_NET_BYTEORDER, be32(s.MaxElem)))
	}
	req.AddData(data)
	_, err = k.exec(req, "create "+string(s.Name))
	return err
}

// Destroy implements Kernel.
func (k *NetlinkKernel) Destroy(name firewall.SetName) error {
	// With NLM_F_EXCL the kernel reports a missing set instead of ignoring it.
	req := k.request(nl.IPSET_CMD_DESTROY, unix.NLM_F_ACK|unix.NLM_F_EXCL)
	req.AddData(setName(name))
	_, err := k.exec(req, "destroy "+string(name))
	return err
}

// Swap implements Kernel.
func (k *NetlinkKernel) Swap(a, b firewall.SetName) error {
	req := k.request(nl.IPSET_CMD_SWAP, unix.NLM_F_ACK)
	req.AddData(setName(a))
	req.AddData(nl.NewRtAttr(attrSetName2, nl.ZeroTerminated(string(b))))
	_, err := k.exec(req, fmt.Sprintf("swap %s %s", a, b))
	return err
}

// Add implements Kernel: one IPSET_CMD_ADD carrying every entry in IPSET_ATTR_ADT. Without
// NLM_F_EXCL the kernel treats entries already present as success (ipset's -exist).
func (k *NetlinkKernel) Add(name firewall.SetName, entries []firewall.Entry) error {
	return k.adt(nl.IPSET_CMD_ADD, "add to", name, entries)
}

// Del implements Kernel, like Add; absent entries are success.
func (k *NetlinkKernel) Del(name firewall.SetName, entries []firewall.Entry) error {
	return k.adt(nl.IPSET_CMD_DEL, "delete from", name, entries)
}

func (k *NetlinkKernel) adt(cmd int, verb string, name firewall.SetName, entries []firewall.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	req := k.request(cmd, unix.NLM_F_ACK)
	req.AddData(setName(name))
	// The kernel takes IPSET_ATTR_ADT only with IPSET_ATTR_LINENO beside it (batch mode).
	// Line 0: errors come back as a plain error, not ipset restore's line report.
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_LINENO|unix.NLA_F_NET_BYTEORDER, be32(0)))
	adt := nl.NewRtAttr(nl.IPSET_ATTR_ADT|unix.NLA_F_NESTED, nil)
	for _, e := range entries {
		adt.AddChild(entryData(e))
	}
	req.AddData(adt)
	what := fmt.Sprintf("%s %s (%d entries)", verb, name, len(entries))
	if len(entries) == 1 {
		what = fmt.Sprintf("%s %s: %s", verb, name, entries[0])
	}
	_, err := k.exec(req, what)
	return err
}

// entryData encodes one entry: the fields it has decide the attributes (see firewall.Entry).
func entryData(e firewall.Entry) *nl.RtAttr {
	d := nl.NewRtAttr(nl.IPSET_ATTR_DATA|unix.NLA_F_NESTED, nil)
	if e.IP.IsValid() {
		d.AddChild(ipAttr(nl.IPSET_ATTR_IP, e.IP))
	}
	if e.Proto != 0 {
		d.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_PROTO, nl.Uint8Attr(uint8(e.Proto))))
	}
	if e.Port != 0 || e.Proto != 0 || !e.IP.IsValid() {
		d.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_PORT|unix.NLA_F_NET_BYTEORDER, be16(e.Port)))
	}
	if e.IP2.IsValid() {
		d.AddChild(ipAttr(nl.IPSET_ATTR_IP2, e.IP2))
	}
	if e.Net.IsValid() {
		d.AddChild(ipAttr(nl.IPSET_ATTR_IP2, e.Net.Addr()))
		d.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_CIDR2, nl.Uint8Attr(uint8(e.Net.Bits()))))
	}
	return d
}

func ipAttr(typ int, a netip.Addr) *nl.RtAttr {
	nest := nl.NewRtAttr(typ|unix.NLA_F_NESTED, nil)
	if a.Is4() {
		b := a.As4()
		nest.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_IPADDR_IPV4|unix.NLA_F_NET_BYTEORDER, b[:]))
	} else {
		b := a.As16()
		nest.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_IPADDR_IPV6|unix.NLA_F_NET_BYTEORDER, b[:]))
	}
	return nest
}

// ListHeaders implements Kernel.
func (k *NetlinkKernel) ListHeaders() ([]Header, error) {
	req := k.request(nl.IPSET_CMD_LIST, unix.NLM_F_DUMP)
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_FLAGS|unix.NLA_F_NET_BYTEORDER, be32(ipsetFlagListHeader)))
	msgs, err := k.exec(req, "list headers")
	if err != nil {
		return nil, err
	}
	var out []Header
	index := map[firewall.SetName]int{}
	for _, m := range msgs {
		h, _, err := parseSetMessage(m, false)
		if err != nil {
			return nil, fmt.Errorf("ipset list headers: %w", err)
		}
		if i, ok := index[h.Name]; ok {
			merge(&out[i], h)
			continue
		}
		index[h.Name] = len(out)
		out = append(out, h)
	}
	return out, nil
}

// ListEntries implements Kernel. A large set comes in several messages; their entries are
// joined.
func (k *NetlinkKernel) ListEntries(name firewall.SetName) ([]firewall.Entry, error) {
	var out []firewall.Entry
	err := k.EachEntry(name, func(e firewall.Entry) { out = append(out, e) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// EachEntry lists one set's entries like ListEntries, handing each to fn as its message is
// parsed: a set of half a million entries is never held as one listing. On an error, fn may
// have seen some entries.
func (k *NetlinkKernel) EachEntry(name firewall.SetName, fn func(firewall.Entry)) error {
	req := k.request(nl.IPSET_CMD_LIST, unix.NLM_F_DUMP)
	req.AddData(setName(name))
	var perr error
	err := req.ExecuteIter(unix.NETLINK_NETFILTER, 0, func(m []byte) bool {
		h, es, err := parseSetMessage(m, true)
		switch {
		case err != nil:
			perr = fmt.Errorf("ipset list %s: %w", name, err)
		case h.Name != name:
			perr = fmt.Errorf("ipset list %s: the kernel answered for set %q", name, h.Name)
		default:
			for _, e := range es {
				fn(e)
			}
			return true
		}
		return false
	})
	if err != nil {
		return fmt.Errorf("ipset list %s: %w", name, kernelError(err))
	}
	return perr
}

func merge(into *Header, h Header) {
	if into.Type == "" {
		into.Type, into.Family = h.Type, h.Family
	}
	if h.HashSize != 0 || h.MaxElem != 0 || h.PortTo != 0 {
		into.HashSize, into.MaxElem, into.PortFrom, into.PortTo = h.HashSize, h.MaxElem, h.PortFrom, h.PortTo
		into.Entries, into.References = h.Entries, h.References
	}
}

type attr struct {
	typ uint16 // without the nested and byte-order flags
	val []byte
}

// attrs splits a run of netlink attributes; a truncated tail is ignored.
func attrs(b []byte) []attr {
	var out []attr
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		t := binary.NativeEndian.Uint16(b[2:4])
		if l < 4 || l > len(b) {
			break
		}
		out = append(out, attr{typ: t & attrTypeMask, val: b[4:l]})
		al := (l + 3) &^ 3
		if al > len(b) {
			break
		}
		b = b[al:]
	}
	return out
}

// parseSetMessage reads one message of a list dump: the set's name and header (the header
// only in the set's first message) and, with withEntries, its entries.
func parseSetMessage(m []byte, withEntries bool) (Header, []firewall.Entry, error) {
	var h Header
	var es []firewall.Entry
	if len(m) < 4 {
		return h, nil, errors.New("short message")
	}
	for _, a := range attrs(m[4:]) {
		switch a.typ {
		case nl.IPSET_ATTR_SETNAME:
			h.Name = firewall.SetName(cstring(a.val))
		case nl.IPSET_ATTR_TYPENAME:
			h.Type = firewall.SetType(cstring(a.val))
		case nl.IPSET_ATTR_FAMILY:
			if len(a.val) == 1 {
				h.Family = familyOf(a.val[0])
			}
		case nl.IPSET_ATTR_DATA:
			for _, d := range attrs(a.val) {
				switch d.typ {
				case nl.IPSET_ATTR_HASHSIZE:
					h.HashSize = u32(d.val)
				case nl.IPSET_ATTR_MAXELEM:
					h.MaxElem = u32(d.val)
				case nl.IPSET_ATTR_ELEMENTS:
					h.Entries = u32(d.val)
				case nl.IPSET_ATTR_REFERENCES:
					h.References = u32(d.val)
				case nl.IPSET_ATTR_PORT_FROM:
					h.PortFrom = u16(d.val)
				case nl.IPSET_ATTR_PORT_TO:
					h.PortTo = u16(d.val)
				}
			}
		case nl.IPSET_ATTR_ADT:
			if !withEntries {
				continue
			}
			for _, d := range attrs(a.val) {
				if d.typ != nl.IPSET_ATTR_DATA {
					continue
				}
				e, err := parseEntry(d.val)
				if err != nil {
					return h, nil, err
				}
				es = append(es, e)
			}
		}
	}
	if h.Name == "" {
		return h, nil, errors.New("message without a set name")
	}
	return h, es, nil
}

func parseEntry(b []byte) (firewall.Entry, error) {
	var e firewall.Entry
	var ip2 netip.Addr
	cidr2 := -1
	for _, a := range attrs(b) {
		switch a.typ {
		case nl.IPSET_ATTR_IP:
			e.IP = nestedAddr(a.val)
		case nl.IPSET_ATTR_IP2:
			ip2 = nestedAddr(a.val)
		case nl.IPSET_ATTR_CIDR2:
			if len(a.val) == 1 {
				cidr2 = int(a.val[0])
			}
		case nl.IPSET_ATTR_PORT:
			e.Port = u16(a.val)
		case nl.IPSET_ATTR_PROTO:
			if len(a.val) == 1 {
				e.Proto = model.Protocol(a.val[0])
			}
		}
	}
	switch {
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

func nestedAddr(b []byte) netip.Addr {
	for _, a := range attrs(b) {
		switch {
		case a.typ == nl.IPSET_ATTR_IPADDR_IPV4 && len(a.val) == 4:
			return netip.AddrFrom4([4]byte(a.val))
		case a.typ == nl.IPSET_ATTR_IPADDR_IPV6 && len(a.val) == 16:
			return netip.AddrFrom16([16]byte(a.val))
		}
	}
	return netip.Addr{}
}

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func u16(b []byte) uint16 {
	if len(b) < 2 {
		return 0
	}
	return binary.BigEndian.Uint16(b)
}

func u32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}
