package ipvs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// genl talks to IPVS over its own generic netlink socket, with its own encoding of the few
// messages the reconciler sends and the two dumps it reads. moby/ipvs stays the module
// loader, the timeouts and the per-scrape statistics, and the reference encoding that the
// guest tests cross-check this one against (genl_cross_guest_test.go). Compared with it, it
// allocates nothing per write and asks the kernel for no socket name, deadline or 64 KiB
// stack buffer per request, and it can queue writes and send hundreds in one system call:
// between startBatch and flush, successful writes produce no reply at all (no NLM_F_ACK),
// only failures do, and the last message of each send asks for the one acknowledgement
// that closes it. Under emulation, where every system call costs a TLB flush, that is most
// of a cold start's cost.
//
// Limits it handles:
//   - A send is at most maxBatchBytes (the kernel refuses a message larger than the socket's
//     send buffer) and maxBatchMsgs messages.
//   - Failures are answered one message each. If more fail than the receive buffer can hold,
//     the kernel drops answers and reports ENOBUFS: the outcome of every write whose answer
//     is missing is then unknown, and reported as errUnknownOutcome (wrapping ENOBUFS), so
//     that the reconciler re-reads those virtual servers. The receive buffer is raised to
//     rcvBufBytes to make that rare, and NETLINK_CAP_ACK keeps each answer small.
type genl struct {
	mu     sync.Mutex
	fd     int
	family uint16
	seq    uint32

	batching bool
	out      []byte // queued messages
	queued   []queuedMsg
	sent     int           // writes of the open batch already sent
	failed   []failedWrite // their failures, by index in the batch
	rbuf     []byte
}

// failedWrite is the failure of the i-th write of a batch.
type failedWrite struct {
	i   int
	err error
}

// queuedMsg is one queued write: its sequence number, where its header starts in out, and
// how a kernel error becomes the error the caller would have got.
type queuedMsg struct {
	seq  uint32
	off  int
	wrap func(error) error
}

const (
	ipvsGenlName    = "IPVS"
	ipvsGenlVersion = 1

	cmdNewService = 1
	cmdSetService = 2
	cmdDelService = 3
	cmdNewDest    = 5
	cmdSetDest    = 6
	cmdDelDest    = 7
	cmdGetDest    = 8
	cmdGetInfo    = 15
	cmdGetService = 4

	attrCmdService = 1
	attrCmdDest    = 2

	attrSvcAF        = 1
	attrSvcProtocol  = 2
	attrSvcAddr      = 3
	attrSvcPort      = 4
	attrSvcSchedName = 6
	attrSvcFlags     = 7
	attrSvcTimeout   = 8
	attrSvcNetmask   = 9
	attrSvcFWMark    = 5

	attrDestAddr      = 1
	attrDestPort      = 2
	attrDestFwdMethod = 3
	attrDestWeight    = 4
	attrDestUThresh   = 5
	attrDestLThresh   = 6
	attrDestActive    = 7
	attrDestInactive  = 8
	attrDestAF        = 11

	genlCtrlID            = 0x10
	genlCtrlCmdGetFamily  = 3
	genlCtrlAttrFamilyID  = 1
	genlCtrlAttrFamilyNam = 2

	// maxBatchBytes keeps one send well inside the default socket send buffer (the kernel
	// answers EMSGSIZE to a message larger than it); maxBatchMsgs bounds how many answers
	// one send can cause.
	maxBatchBytes = 48 << 10
	maxBatchMsgs  = 400
	// rcvBufBytes is the receive buffer asked for (SO_RCVBUFFORCE as root, else SO_RCVBUF up
	// to the system's maximum): room for the answers of a whole send failing.
	rcvBufBytes = 4 << 20
	// replyTimeout bounds the wait for the kernel's answer.
	replyTimeout = 60
)

// errUnknownOutcome wraps ENOBUFS for writes whose answer the kernel dropped.
var errUnknownOutcome = errors.New("outcome unknown: the kernel dropped its answer (socket receive buffer overrun)")

func newGenl() (*genl, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("open a generic netlink socket: %w", err)
	}
	g := &genl{fd: fd, rbuf: make([]byte, 64<<10)}
	fail := func(what string, err error) (*genl, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("generic netlink socket: %s: %w", what, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fail("bind", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1); err != nil {
		return fail("NETLINK_CAP_ACK", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvBufBytes); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvBufBytes)
	}
	tv := unix.Timeval{Sec: replyTimeout}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fail("SO_RCVTIMEO", err)
	}
	fam, err := g.resolveFamily()
	if err != nil {
		return fail("resolve the IPVS family", err)
	}
	g.family = fam
	return g, nil
}

func (g *genl) close() error { return unix.Close(g.fd) }

// setReceiveBuffer sets the socket's receive buffer (tests make it small to provoke ENOBUFS).
func (g *genl) setReceiveBuffer(n int) error {
	return unix.SetsockoptInt(g.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n)
}

// resolveFamily asks the generic netlink controller for the IPVS family's number.
func (g *genl) resolveFamily() (uint16, error) {
	g.seq++
	b := appendHeader(nil, genlCtrlID, unix.NLM_F_REQUEST, g.seq, genlCtrlCmdGetFamily, 1)
	b = appendAttr(b, genlCtrlAttrFamilyNam, append([]byte(ipvsGenlName), 0))
	finishMsg(b)
	if _, err := unix.Write(g.fd, b); err != nil {
		return 0, err
	}
	for {
		n, err := g.recv(0)
		if err != nil {
			return 0, err
		}
		var fam uint16
		var ferr error
		done := false
		eachMsg(g.rbuf[:n], func(typ uint16, seq uint32, payload []byte) {
			if seq != g.seq {
				return
			}
			done = true
			if typ == unix.NLMSG_ERROR {
				ferr = ackError(payload)
				if ferr == nil {
					ferr = errors.New("no family in the answer")
				}
				return
			}
			if len(payload) < 4 {
				return
			}
			eachAttr(payload[4:], func(t uint16, v []byte) {
				if t == genlCtrlAttrFamilyID && len(v) >= 2 {
					fam = binary.NativeEndian.Uint16(v)
				}
			})
		})
		if done {
			if ferr != nil {
				return 0, ferr
			}
			if fam == 0 {
				return 0, errors.New("no family id in the answer")
			}
			return fam, nil
		}
	}
}

// startBatch queues the writes that follow until flush.
func (g *genl) startBatch() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.batching = true
	g.sent, g.failed = 0, nil
}

// flush sends what is queued, ends the batch, calls failed for every write queued since
// startBatch that failed (by its index, in order), and returns how many were queued. Only
// failures are kept: a batch of a cold start has hundreds of thousands of writes.
func (g *genl) flush(failed func(i int, err error)) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.send()
	g.batching = false
	for _, f := range g.failed {
		failed(f.i, f.err)
	}
	n := g.sent
	g.sent, g.failed = 0, nil
	return n
}

// write builds one message with fill and either queues it (in a batch: the return is nil,
// its outcome comes from flush) or sends it and waits for the answer.
func (g *genl) write(cmd uint8, wrap func(error) error, fill func(b []byte) []byte) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq++
	off := len(g.out)
	g.out = appendHeader(g.out, g.family, unix.NLM_F_REQUEST, g.seq, cmd, ipvsGenlVersion)
	g.out = fill(g.out)
	finishMsg(g.out[off:])
	g.queued = append(g.queued, queuedMsg{seq: g.seq, off: off, wrap: wrap})
	if !g.batching {
		g.sent, g.failed = 0, nil
		g.send()
		var err error
		if len(g.failed) > 0 {
			err = g.failed[0].err
		}
		g.sent, g.failed = 0, nil
		return err
	}
	if len(g.out) >= maxBatchBytes || len(g.queued) >= maxBatchMsgs {
		g.send()
	}
	return nil
}

// send sends the queued messages in one system call, the last one asking for an
// acknowledgement, and records their failures.
func (g *genl) send() {
	if len(g.queued) == 0 {
		return
	}
	q := g.queued
	last := q[len(q)-1]
	setFlags(g.out[last.off:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	results := make([]error, len(q))
	answered := make([]bool, len(q))
	index := make(map[uint32]int, len(q))
	for i, m := range q {
		index[m.seq] = i
	}
	err := g.sendAll(g.out)
	if err == nil {
		err = g.collect(index, results, answered, last.seq)
	}
	for i, m := range q {
		switch {
		case answered[i]:
			if results[i] != nil {
				results[i] = m.wrap(results[i])
			}
		case err != nil && errors.Is(err, unix.ENOBUFS):
			results[i] = m.wrap(fmt.Errorf("%w (%w)", errUnknownOutcome, unix.ENOBUFS))
		case err != nil:
			results[i] = m.wrap(err)
		}
		// Not answered and no error: succeeded (only failures and the last are answered).
	}
	for i, err := range results {
		if err != nil {
			g.failed = append(g.failed, failedWrite{i: g.sent + i, err: err})
		}
	}
	g.sent += len(q)
	g.out = g.out[:0]
	g.queued = g.queued[:0]
}

func (g *genl) sendAll(b []byte) error {
	for {
		_, err := unix.Write(g.fd, b)
		if err == unix.EINTR {
			continue
		}
		return err
	}
}

// collect reads answers until the one to lastSeq. The kernel handles a whole send before
// the system call returns, so when it reports ENOBUFS (it dropped answers) every answer it
// kept is already queued: they are read without waiting, which also empties the socket for
// the next exchange, and ENOBUFS is returned for the writes left unanswered.
func (g *genl) collect(index map[uint32]int, results []error, answered []bool, lastSeq uint32) error {
	take := func(n int) (done bool) {
		eachMsg(g.rbuf[:n], func(typ uint16, seq uint32, payload []byte) {
			if seq == lastSeq {
				done = true
			}
			i, ok := index[seq]
			if !ok || typ != unix.NLMSG_ERROR {
				return
			}
			answered[i] = true
			results[i] = ackError(payload)
		})
		return done
	}
	for {
		n, err := g.recv(0)
		if errors.Is(err, unix.ENOBUFS) {
			for {
				n, err := g.recv(unix.MSG_DONTWAIT)
				if err != nil {
					break // EAGAIN: nothing more queued
				}
				take(n)
			}
			return unix.ENOBUFS
		}
		if err != nil {
			return err
		}
		if take(n) {
			return nil
		}
	}
}

func (g *genl) recv(flags int) (int, error) {
	for {
		n, _, err := unix.Recvfrom(g.fd, g.rbuf, flags)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN && flags&unix.MSG_DONTWAIT == 0:
			return 0, fmt.Errorf("no answer from the kernel within %ds", replyTimeout)
		case err != nil:
			return 0, err
		}
		return n, nil
	}
}

// Message encoding. Every message is nlmsghdr, genlmsghdr, then attributes.

func appendHeader(b []byte, typ uint16, flags uint16, seq uint32, cmd, version uint8) []byte {
	var h [unix.NLMSG_HDRLEN + 4]byte
	binary.NativeEndian.PutUint16(h[4:], typ)
	binary.NativeEndian.PutUint16(h[6:], flags)
	binary.NativeEndian.PutUint32(h[8:], seq)
	h[16], h[17] = cmd, version
	return append(b, h[:]...)
}

// finishMsg sets the length of the message that starts at m[0] and runs to its end.
func finishMsg(m []byte) { binary.NativeEndian.PutUint32(m[0:], uint32(len(m))) }

func setFlags(m []byte, flags uint16) { binary.NativeEndian.PutUint16(m[6:], flags) }

func appendAttr(b []byte, typ uint16, v []byte) []byte {
	l := 4 + len(v)
	b = binary.NativeEndian.AppendUint16(b, uint16(l))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, v...)
	for range (4 - l%4) % 4 {
		b = append(b, 0)
	}
	return b
}

func appendU16(b []byte, typ uint16, v uint16) []byte {
	return appendAttr(b, typ, binary.NativeEndian.AppendUint16(nil, v))
}

func appendU32(b []byte, typ uint16, v uint32) []byte {
	var x [4]byte
	binary.NativeEndian.PutUint32(x[:], v)
	return appendAttr(b, typ, x[:])
}

func appendBE16(b []byte, typ uint16, v uint16) []byte {
	var x [2]byte
	binary.BigEndian.PutUint16(x[:], v)
	return appendAttr(b, typ, x[:])
}

// nest appends a nested attribute whose content fill writes.
func nest(b []byte, typ uint16, fill func([]byte) []byte) []byte {
	off := len(b)
	b = append(b, 0, 0, 0, 0)
	b = fill(b)
	binary.NativeEndian.PutUint16(b[off:], uint16(len(b)-off))
	binary.NativeEndian.PutUint16(b[off+2:], typ|unix.NLA_F_NESTED)
	return b
}

func addrBytes(a [16]byte, is4 bool) []byte {
	if is4 {
		return a[12:16]
	}
	return a[:]
}

// appendService writes the service attribute: the key, and with spec the whole entry.
func appendService(b []byte, key model.VSKey, spec *model.VSSpec) []byte {
	return nest(b, attrCmdService, func(b []byte) []byte {
		af, mask := uint16(unix.AF_INET), uint32(0xffffffff)
		if key.Addr.Is6() {
			af, mask = unix.AF_INET6, 128
		}
		b = appendU16(b, attrSvcAF, af)
		b = appendU16(b, attrSvcProtocol, uint16(key.Proto))
		b = appendAttr(b, attrSvcAddr, addrBytes(key.Addr.As16(), key.Addr.Is4()))
		b = appendBE16(b, attrSvcPort, key.Port)
		if spec != nil {
			b = appendAttr(b, attrSvcSchedName, append([]byte(spec.Scheduler), 0))
			var fl [8]byte
			binary.NativeEndian.PutUint32(fl[0:], spec.Flags&model.FlagsWeManage)
			binary.NativeEndian.PutUint32(fl[4:], 0xffffffff)
			b = appendAttr(b, attrSvcFlags, fl[:])
			b = appendU32(b, attrSvcTimeout, spec.Timeout)
			b = appendU32(b, attrSvcNetmask, mask)
		}
		return b
	})
}

// appendDest writes the destination attribute: the real server, and with full its
// forwarding (masquerade), weight and thresholds.
func appendDest(b []byte, rs model.RSKey, weight uint32, full bool) []byte {
	return nest(b, attrCmdDest, func(b []byte) []byte {
		b = appendAttr(b, attrDestAddr, addrBytes(rs.Addr.As16(), rs.Addr.Is4()))
		b = appendBE16(b, attrDestPort, rs.Port)
		if full {
			b = appendU32(b, attrDestFwdMethod, 0) // IP_VS_CONN_F_MASQ
			b = appendU32(b, attrDestWeight, weight)
			b = appendU32(b, attrDestUThresh, 0)
			b = appendU32(b, attrDestLThresh, 0)
		}
		return b
	})
}

// eachMsg calls fn for every netlink message in b.
func eachMsg(b []byte, fn func(typ uint16, seq uint32, payload []byte)) {
	eachMsgFlags(b, func(typ, _ uint16, seq uint32, payload []byte) { fn(typ, seq, payload) })
}

// eachMsgFlags is eachMsg with the messages' flags.
func eachMsgFlags(b []byte, fn func(typ, flags uint16, seq uint32, payload []byte)) {
	for len(b) >= unix.NLMSG_HDRLEN {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			return
		}
		fn(binary.NativeEndian.Uint16(b[4:6]), binary.NativeEndian.Uint16(b[6:8]), binary.NativeEndian.Uint32(b[8:12]), b[unix.NLMSG_HDRLEN:l])
		al := (l + 3) &^ 3
		if al >= len(b) {
			return
		}
		b = b[al:]
	}
}

// eachAttr calls fn for every attribute in b.
func eachAttr(b []byte, fn func(typ uint16, v []byte)) {
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		if l < 4 || l > len(b) {
			return
		}
		fn(binary.NativeEndian.Uint16(b[2:4])&^(unix.NLA_F_NESTED|unix.NLA_F_NET_BYTEORDER), b[4:l])
		al := (l + 3) &^ 3
		if al >= len(b) {
			return
		}
		b = b[al:]
	}
}

// ackError reads an NLMSG_ERROR payload: nil for an acknowledgement, else the errno.
func ackError(payload []byte) error {
	if len(payload) < 4 {
		return errors.New("short netlink error message")
	}
	if e := int32(binary.NativeEndian.Uint32(payload[0:4])); e != 0 {
		return unix.Errno(-e)
	}
	return nil
}

// Reads. A dump answers in as many messages as it takes and ends with NLMSG_DONE; the
// parsers below read the attributes in place, allocating nothing per entry.

// dump sends a dump request for cmd with the attributes fill writes and calls fn with the
// attributes of each answer, until the end. fn must not keep its argument.
func (g *genl) dump(cmd uint8, fill func([]byte) []byte, fn func(attrs []byte)) error {
	return g.request(cmd, true, fill, fn)
}

// get sends a request for one object and calls fn with the attributes of the answer.
func (g *genl) get(cmd uint8, fill func([]byte) []byte, fn func(attrs []byte)) error {
	return g.request(cmd, false, fill, fn)
}

// request sends one read request and reads its answers: for a dump, messages until
// NLMSG_DONE (or an error); otherwise the one answer, or the error in its place.
func (g *genl) request(cmd uint8, dump bool, fill func([]byte) []byte, fn func(attrs []byte)) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.send() // anything queued goes first, in order
	g.seq++
	seq := g.seq
	flags := uint16(unix.NLM_F_REQUEST)
	if dump {
		flags |= unix.NLM_F_DUMP
	}
	b := appendHeader(nil, g.family, flags, seq, cmd, ipvsGenlVersion)
	b = fill(b)
	finishMsg(b)
	if err := g.sendAll(b); err != nil {
		return err
	}
	for {
		n, err := g.recv(0)
		if err != nil {
			return err
		}
		done := false
		var rerr error
		eachMsgFlags(g.rbuf[:n], func(typ, flags uint16, s uint32, payload []byte) {
			if s != seq || done {
				return
			}
			if dump && flags&unix.NLM_F_DUMP_INTR != 0 {
				rerr = ErrDumpInterrupted
			}
			switch {
			case typ == unix.NLMSG_DONE && dump:
				done = true
			case typ == unix.NLMSG_ERROR:
				done = true
				if err := ackError(payload); err != nil {
					rerr = err
				} else if !dump {
					rerr = errors.New("no answer")
				}
			default:
				done = !dump
				if len(payload) >= 4 {
					fn(payload[4:]) // after the generic netlink header
				}
			}
		})
		if done {
			return rerr
		}
	}
}

// listedService is a service as the kernel lists it.
type listedService struct {
	key    model.VSKey
	spec   model.VSSpec
	af     uint16
	fwmark uint32
	ok     bool // a VSKey expresses it: not a firewall-mark service, a family and protocol we know
}

func parseService(attrs []byte) listedService {
	var ls listedService
	var addr []byte
	var proto uint16
	eachAttr(attrs, func(t uint16, v []byte) {
		if t != attrCmdService {
			return
		}
		eachAttr(v, func(t uint16, v []byte) {
			switch {
			case t == attrSvcAF && len(v) >= 2:
				ls.af = binary.NativeEndian.Uint16(v)
			case t == attrSvcProtocol && len(v) >= 2:
				proto = binary.NativeEndian.Uint16(v)
			case t == attrSvcAddr:
				addr = v
			case t == attrSvcPort && len(v) >= 2:
				ls.key.Port = binary.BigEndian.Uint16(v)
			case t == attrSvcFWMark && len(v) >= 4:
				ls.fwmark = binary.NativeEndian.Uint32(v)
			case t == attrSvcSchedName:
				ls.spec.Scheduler = cstring(v)
			case t == attrSvcFlags && len(v) >= 4:
				ls.spec.Flags = binary.NativeEndian.Uint32(v) & model.FlagsWeManage
			case t == attrSvcTimeout && len(v) >= 4:
				ls.spec.Timeout = binary.NativeEndian.Uint32(v)
			}
		})
	})
	a, okAddr := addrOf(addr, ls.af)
	ls.key.Addr, ls.key.Proto = a, model.Protocol(proto)
	ls.ok = okAddr && ls.fwmark == 0 && proto <= 0xff
	return ls
}

// parseDest reads one real server of a service of family af.
func parseDest(attrs []byte, af uint16) (rs model.RSKey, weight, conns uint32, ok bool) {
	var addr []byte
	eachAttr(attrs, func(t uint16, v []byte) {
		if t != attrCmdDest {
			return
		}
		eachAttr(v, func(t uint16, v []byte) {
			switch {
			case t == attrDestAddr:
				addr = v
			case t == attrDestAF && len(v) >= 2:
				af = binary.NativeEndian.Uint16(v)
			case t == attrDestPort && len(v) >= 2:
				rs.Port = binary.BigEndian.Uint16(v)
			case t == attrDestWeight && len(v) >= 4:
				weight = binary.NativeEndian.Uint32(v)
			case (t == attrDestActive || t == attrDestInactive) && len(v) >= 4:
				conns += binary.NativeEndian.Uint32(v)
			}
		})
	})
	rs.Addr, ok = addrOf(addr, af)
	return rs, weight, conns, ok
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

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// services dumps the service table.
func (g *genl) services(fn func(listedService)) error {
	return g.dump(cmdGetService, func(b []byte) []byte { return b }, func(attrs []byte) { fn(parseService(attrs)) })
}

// dests dumps the real servers of a virtual server (none if it does not exist).
func (g *genl) dests(key model.VSKey, fn func(rs model.RSKey, weight, conns uint32)) error {
	af := uint16(unix.AF_INET)
	if key.Addr.Is6() {
		af = unix.AF_INET6
	}
	var perr error
	err := g.dump(cmdGetDest, func(b []byte) []byte { return appendService(b, key, nil) }, func(attrs []byte) {
		rs, w, c, ok := parseDest(attrs, af)
		if !ok {
			perr = fmt.Errorf("real server of %s has a malformed address", key)
			return
		}
		fn(rs, w, c)
	})
	if err != nil {
		return err
	}
	return perr
}

// service reads one virtual server's service entry; ESRCH when it does not exist.
func (g *genl) service(key model.VSKey) (listedService, error) {
	var ls listedService
	err := g.get(cmdGetService, func(b []byte) []byte { return appendService(b, key, nil) }, func(attrs []byte) {
		ls = parseService(attrs)
	})
	return ls, err
}
