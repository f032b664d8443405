package ipset

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/internal/foreground"
	"github.com/kube-ipvs/kube-ipvs/internal/nlcodec"
	"github.com/kube-ipvs/kube-ipvs/internal/nlsock"
)

// Why our own messages instead of vishvananda/netlink's Ipset* calls (v1.3.1): its
// IpsetCreate cannot set the hash size, its IpsetAdd/IpsetDel send one request per entry
// (we batch hundreds into one IPSET_ATTR_ADT request, as `ipset restore` does), and its
// listing logs every attribute it does not know (newer kernels report bucketsize and
// initval) and does not merge a large set split over several dump messages. The messages
// are encoded and walked with the codec package ipvs shares (internal/nlcodec); the socket,
// request serialization, the writes' receive loop and acknowledgement parsing are the
// library's (package nl), and so are the protocol's constants. A listing's datagrams are
// received into one reused buffer of ours (dump), not the library's 64 KiB per datagram.

// Constants of the ipset protocol (linux/netfilter/ipset/ip_set.h) that package nl does not
// name.
const (
	ipsetFlagListHeader = 1 << 2                 // IPSET_FLAG_LIST_HEADER: dump headers only
	attrSetName2        = nl.IPSET_ATTR_TYPENAME // at swap, the second name
	errHashFull         = 4352                   // IPSET_ERR_HASH_FULL (type-specific)

	netByteOrder = unix.NLA_F_NET_BYTEORDER
)

// NetlinkKernel is the Kernel over an ipset netlink socket bound to one network namespace.
type NetlinkKernel struct {
	sock *nl.SocketHandle

	mu        sync.Mutex
	revisions map[revKey]uint8 // newest revision the kernel has per type and family

	// buf is where request builds the attributes, reused: a batch of entries is tens of
	// KiB, and a cold start sends hundreds of batches.
	bufMu sync.Mutex
	buf   []byte

	// in receives a listing's datagrams into one reused buffer (held under the socket's
	// lock): the library's receive allocates 64 KiB per datagram, 40 MB of garbage per
	// listing of the hairpin set at 50,000 Services, every repair cycle. Created at the
	// first listing; in.Background: the handle lists beside the sync loop
	// (NewBackgroundKernel), and its listings park while a change is applied.
	in *nlsock.Receiver
	// gate is where a background handle's listings park (nil: never).
	gate *foreground.Gate
}

// listTimeout bounds the wait for each datagram of a listing, as the socket's receive
// timeout bounds the library's receives.
const listTimeout = 60 * time.Second

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

// NewBackgroundKernel opens a handle for listings that run beside the sync loop (the
// Reconciler's Lister): they give way to a change being applied, parking at gate (package
// foreground).
func NewBackgroundKernel(gate *foreground.Gate) (*NetlinkKernel, error) {
	k, err := NewKernelAt(netns.None())
	if err != nil {
		return nil, err
	}
	k.in = nlsock.NewReceiver(k.sock.Socket.GetFd(), true)
	k.gate = gate
	return k, nil
}

// Pause is where a listing through k gives way between two messages.
func (k *NetlinkKernel) Pause() {
	k.gate.Yield()
}

// Close closes the socket.
func (k *NetlinkKernel) Close() { k.sock.Socket.Close() }

// request builds an ipset request: the nfnetlink header, the protocol version and the
// attributes attrs appends.
func (k *NetlinkKernel) request(cmd int, flags int, attrs func(b []byte) []byte) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(cmd|(unix.NFNL_SUBSYS_IPSET<<8), flags)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_NETFILTER: k.sock}
	k.bufMu.Lock()
	defer k.bufMu.Unlock()
	b := nlcodec.AppendNfgenHeader(k.buf[:0], unix.AF_INET, unix.NFNETLINK_V0)
	b = nlcodec.AppendU8(b, nl.IPSET_ATTR_PROTOCOL, nl.IPSET_PROTOCOL)
	b = attrs(b)
	req.AddRawData(b) // a copy
	k.buf = b
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

func appendSetName(b []byte, n firewall.SetName) []byte {
	return nlcodec.AppendString(b, nl.IPSET_ATTR_SETNAME, string(n))
}

// nfprotos pairs each set family with its netfilter protocol number, read both ways;
// anything else is AnyFamily, NFPROTO_UNSPEC (a bitmap:port set).
var nfprotos = [...]struct {
	family firewall.Family
	proto  uint8
}{{firewall.IPv4, unix.NFPROTO_IPV4}, {firewall.IPv6, unix.NFPROTO_IPV6}}

func nfproto(f firewall.Family) uint8 {
	for _, e := range nfprotos {
		if e.family == f {
			return e.proto
		}
	}
	return unix.NFPROTO_UNSPEC
}

func familyOf(p uint8) firewall.Family {
	for _, e := range nfprotos {
		if e.proto == p {
			return e.family
		}
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
	req := k.request(nl.IPSET_CMD_TYPE, 0, func(b []byte) []byte {
		b = nlcodec.AppendString(b, nl.IPSET_ATTR_TYPENAME, string(t))
		return nlcodec.AppendU8(b, nl.IPSET_ATTR_FAMILY, nfproto(f))
	})
	msgs, err := k.exec(req, "type "+string(t))
	if err != nil {
		return 0, err
	}
	for _, m := range msgs {
		rev, found, err := revisionOf(m)
		if err != nil {
			return 0, fmt.Errorf("ipset type %s: %w", t, err)
		}
		if found {
			k.revisions[key] = rev
			return rev, nil
		}
	}
	return 0, fmt.Errorf("ipset type %s: the kernel named no revision", t)
}

// revisionOf reads IPSET_ATTR_REVISION from an answer to IPSET_CMD_TYPE.
func revisionOf(m []byte) (rev uint8, found bool, err error) {
	attrs, err := nlcodec.PayloadAttrs(m)
	if err != nil {
		return 0, false, err
	}
	err = nlcodec.EachAttr(attrs, func(a nlcodec.Attr) error {
		if a.Type != nl.IPSET_ATTR_REVISION || found {
			return nil
		}
		found = true
		rev, err = a.U8()
		return err
	})
	return rev, found, err
}

// Create implements Kernel.
func (k *NetlinkKernel) Create(s Spec) error {
	rev, err := k.revision(s.Type, s.Family)
	if err != nil {
		return fmt.Errorf("create %s: %w", s.Name, err)
	}
	req := k.request(nl.IPSET_CMD_CREATE, unix.NLM_F_ACK|unix.NLM_F_EXCL|unix.NLM_F_CREATE, func(b []byte) []byte {
		b = appendSetName(b, s.Name)
		b = nlcodec.AppendString(b, nl.IPSET_ATTR_TYPENAME, string(s.Type))
		b = nlcodec.AppendU8(b, nl.IPSET_ATTR_REVISION, rev)
		b = nlcodec.AppendU8(b, nl.IPSET_ATTR_FAMILY, nfproto(s.Family))
		b, data := nlcodec.BeginNest(b, nl.IPSET_ATTR_DATA)
		if s.Type == firewall.BitmapPort {
			b = nlcodec.AppendBE16(b, nl.IPSET_ATTR_PORT_FROM|netByteOrder, s.PortFrom)
			b = nlcodec.AppendBE16(b, nl.IPSET_ATTR_PORT_TO|netByteOrder, s.PortTo)
		} else {
			b = nlcodec.AppendBE32(b, nl.IPSET_ATTR_HASHSIZE|netByteOrder, s.HashSize)
			b = nlcodec.AppendBE32(b, nl.IPSET_ATTR_MAXELEM|netByteOrder, s.MaxElem)
		}
		if s.SkbInfo {
			b = nlcodec.AppendBE32(b, nl.IPSET_ATTR_CADT_FLAGS|netByteOrder, nl.IPSET_FLAG_WITH_SKBINFO)
		}
		return nlcodec.EndNest(b, data)
	})
	_, err = k.exec(req, "create "+string(s.Name))
	return err
}

// Destroy implements Kernel.
func (k *NetlinkKernel) Destroy(name firewall.SetName) error {
	// With NLM_F_EXCL the kernel reports a missing set instead of ignoring it.
	req := k.request(nl.IPSET_CMD_DESTROY, unix.NLM_F_ACK|unix.NLM_F_EXCL, func(b []byte) []byte {
		return appendSetName(b, name)
	})
	_, err := k.exec(req, "destroy "+string(name))
	return err
}

// Swap implements Kernel.
func (k *NetlinkKernel) Swap(a, b firewall.SetName) error {
	req := k.request(nl.IPSET_CMD_SWAP, unix.NLM_F_ACK, func(m []byte) []byte {
		return nlcodec.AppendString(appendSetName(m, a), attrSetName2, string(b))
	})
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
	req := k.request(cmd, unix.NLM_F_ACK, func(b []byte) []byte {
		b = appendSetName(b, name)
		// The kernel takes IPSET_ATTR_ADT only with IPSET_ATTR_LINENO beside it (batch mode).
		// Line 0: errors come back as a plain error, not ipset restore's line report.
		b = nlcodec.AppendBE32(b, nl.IPSET_ATTR_LINENO|netByteOrder, 0)
		b, adt := nlcodec.BeginNest(b, nl.IPSET_ATTR_ADT)
		for _, e := range entries {
			b = appendEntry(b, e)
		}
		return nlcodec.EndNest(b, adt)
	})
	what := fmt.Sprintf("%s %s (%d entries)", verb, name, len(entries))
	if len(entries) == 1 {
		what = fmt.Sprintf("%s %s: %s", verb, name, entries[0])
	}
	_, err := k.exec(req, what)
	return err
}

// appendEntry encodes one entry: the fields it has decide the attributes (see
// firewall.Entry).
func appendEntry(b []byte, e firewall.Entry) []byte {
	b, data := nlcodec.BeginNest(b, nl.IPSET_ATTR_DATA)
	if !e.IP.IsValid() && e.Net.IsValid() {
		// hash:net: the network is the first and only dimension.
		b = appendIP(b, nl.IPSET_ATTR_IP, e.Net.Addr())
		b = nlcodec.AppendU8(b, nl.IPSET_ATTR_CIDR, uint8(e.Net.Bits()))
		return nlcodec.EndNest(b, data)
	}
	if e.IP.IsValid() {
		b = appendIP(b, nl.IPSET_ATTR_IP, e.IP)
	}
	if e.Proto != 0 {
		b = nlcodec.AppendU8(b, nl.IPSET_ATTR_PROTO, uint8(e.Proto))
	}
	if e.Port != 0 || e.Proto != 0 || !e.IP.IsValid() {
		b = nlcodec.AppendBE16(b, nl.IPSET_ATTR_PORT|netByteOrder, e.Port)
	}
	if e.IP2.IsValid() {
		b = appendIP(b, nl.IPSET_ATTR_IP2, e.IP2)
	}
	if e.Net.IsValid() {
		b = appendIP(b, nl.IPSET_ATTR_IP2, e.Net.Addr())
		b = nlcodec.AppendU8(b, nl.IPSET_ATTR_CIDR2, uint8(e.Net.Bits()))
	}
	if e.Mark != 0 {
		// The mark and, below it, the mask of the bits SET --map-mark sets: all of them.
		b = nlcodec.AppendBE64(b, nl.IPSET_ATTR_SKBMARK|netByteOrder, uint64(e.Mark)<<32|0xffffffff)
	}
	return nlcodec.EndNest(b, data)
}

func appendIP(b []byte, typ uint16, a netip.Addr) []byte {
	b, nest := nlcodec.BeginNest(b, typ)
	if a.Is4() {
		v := a.As4()
		b = nlcodec.AppendAttr(b, nl.IPSET_ATTR_IPADDR_IPV4|netByteOrder, v[:])
	} else {
		v := a.As16()
		b = nlcodec.AppendAttr(b, nl.IPSET_ATTR_IPADDR_IPV6|netByteOrder, v[:])
	}
	return nlcodec.EndNest(b, nest)
}

// ListHeaders implements Kernel.
func (k *NetlinkKernel) ListHeaders() ([]Header, error) {
	req := k.request(nl.IPSET_CMD_LIST, unix.NLM_F_DUMP, func(b []byte) []byte {
		return nlcodec.AppendBE32(b, nl.IPSET_ATTR_FLAGS|netByteOrder, ipsetFlagListHeader)
	})
	msgs, err := k.exec(req, "list headers")
	if err != nil {
		return nil, err
	}
	var out []Header
	index := map[firewall.SetName]int{}
	for _, m := range msgs {
		h, _, err := parseSetMessage(m, false, nil)
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

// EachEntry implements Kernel: a large set comes in several messages, each handed over
// entry by entry as it is parsed.
func (k *NetlinkKernel) EachEntry(name firewall.SetName, fn func(firewall.Entry)) error {
	req := k.request(nl.IPSET_CMD_LIST, unix.NLM_F_DUMP, func(b []byte) []byte {
		return appendSetName(b, name)
	})
	var perr error
	var es []firewall.Entry
	err := k.dump(req, func(m []byte) bool {
		var h Header
		var err error
		h, es, err = parseSetMessage(m, true, es[:0])
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

// dump sends a dump request and calls fn with the payload of each answer until the kernel
// is done, fn returns false, or an error comes; as the library's ExecuteIter, but through
// one reused receive buffer (nlsock.Receiver). The answers to an earlier request are passed
// over by their sequence number. A dump the kernel reports interrupted returns
// nl.ErrDumpInterrupted (its answers were all read).
func (k *NetlinkKernel) dump(req *nl.NetlinkRequest, fn func(payload []byte) bool) error {
	s := k.sock.Socket
	req.Seq = atomic.AddUint32(&k.sock.Seq, 1)
	s.Lock()
	defer s.Unlock()
	if err := s.Send(req); err != nil {
		return err
	}
	if k.in == nil {
		k.in = nlsock.NewReceiver(s.GetFd(), false)
	}
	a := nlsock.Answers{Seq: req.Seq, Dump: true, Each: func(payload []byte) error {
		if !fn(payload) {
			return errStopped
		}
		return nil
	}}
	// A set of half a million entries lists for seconds, in a repair's background: give the
	// P to the sync loop (and the informers) between datagrams, or a change waits behind the
	// listing (see the yield in package ipvs' dumps); a background listing parks while a
	// change is applied, which holds the kernel's next datagram back too.
	if err := k.in.Read(&a, listTimeout, k.Pause); err != nil {
		return err
	}
	if err := a.Err(nl.ErrDumpInterrupted); !errors.Is(err, errStopped) {
		return err
	}
	return nil
}

// errStopped ends the calls of a dump's callback once it returned false.
var errStopped = errors.New("listing stopped by its reader")
