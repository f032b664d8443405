package ipvs

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/foreground"
	"github.com/kube-ipvs/kube-ipvs/internal/nlcodec"
	"github.com/kube-ipvs/kube-ipvs/internal/nlsock"
)

// genl talks to IPVS over a generic netlink socket of its own, with the project's own
// encoding (internal/nlcodec, and the IPVS messages in genl_msgs_linux.go) of the few
// messages the reconciler sends and the two dumps it reads. The socket (opened in a chosen
// network namespace) and the family lookup are vishvananda/netlink's; moby/ipvs stays the
// timeouts and the per-scrape statistics, and the reference encoding that the guest tests
// cross-check this one against (genl_cross_guest_test.go). Compared
// with moby/ipvs it allocates nothing per write and asks the kernel for no socket name,
// deadline or 64 KiB stack buffer per request, and it can queue writes and send hundreds
// in one system call: between startBatch and flush, successful writes produce no reply at
// all (no NLM_F_ACK), only failures do, and the last message of each send asks for the one
// acknowledgement that closes it. Under emulation, where every system call costs a TLB
// flush, that is most of a cold start's cost.
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
	sock   *nl.NetlinkSocket
	fd     int // sock's, non-blocking
	family uint16
	seq    uint32

	batching bool
	out      []byte // queued messages
	queued   []queuedMsg
	sent     int           // writes of the open batch already sent
	failed   []failedWrite // their failures, by index in the batch
	// in receives the answers; its Busy, with the read requests' sends added, is about how
	// long the kernel worked on them (a dump's rounds run inside the receives), which is
	// what a listing of the table makes writers wait for. in.Background: the socket lists
	// beside the sync loop (NewBackgroundKernel), and its dumps park while a change is
	// applied.
	in       *nlsock.Receiver
	gate     *foreground.Gate // where a background socket's dumps park (nil: never)
	req      []byte           // a read request's message, reused (a repair reads 70,000 at 50,000 Services)
	syscalls uint64           // sends so far; with in's receives and waits, what batching saves (tests read it)
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
	// maxBatchBytes keeps one send well inside the default socket send buffer (the kernel
	// answers EMSGSIZE to a message larger than it); maxBatchMsgs bounds how many answers
	// one send can cause.
	maxBatchBytes = 48 << 10
	maxBatchMsgs  = 400
	// rcvBufBytes is the receive buffer asked for (SO_RCVBUFFORCE as root, else SO_RCVBUF up
	// to the system's maximum): room for the answers of a whole send failing.
	rcvBufBytes = 4 << 20
	// replyTimeout bounds the wait for the kernel's answer.
	replyTimeout = 60 * time.Second
)

// newGenl opens the socket in network namespace ns (netns.None(): the calling thread's) and
// resolves the IPVS family there. The socket stays in ns whatever thread uses it later.
func newGenl(ns netns.NsHandle) (*genl, error) {
	fam, err := ipvsFamilyID(ns)
	if err != nil {
		return nil, fmt.Errorf("resolve the IPVS generic netlink family: %w", err)
	}
	sock, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("open a generic netlink socket: %w", err)
	}
	g := &genl{sock: sock, fd: sock.GetFd(), family: fam, in: nlsock.NewReceiver(sock.GetFd(), false)}
	if err := unix.SetsockoptInt(g.fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1); err != nil {
		sock.Close()
		return nil, fmt.Errorf("generic netlink socket: NETLINK_CAP_ACK: %w", err)
	}
	if err := sock.SetReceiveBufferSize(rcvBufBytes, true); err != nil {
		_ = sock.SetReceiveBufferSize(rcvBufBytes, false)
	}
	return g, nil
}

// ipvsFamilyID looks the IPVS generic netlink family up in network namespace ns.
func ipvsFamilyID(ns netns.NsHandle) (uint16, error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_GENERIC)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	f, err := h.GenlFamilyGet(ipvsGenlName)
	if err != nil {
		return 0, err
	}
	return f.ID, nil
}

func (g *genl) close() error {
	g.sock.Close()
	return nil
}

// setReceiveBuffer sets the socket's receive buffer (tests make it small to provoke ENOBUFS).
func (g *genl) setReceiveBuffer(n int) error { return g.sock.SetReceiveBufferSize(n, true) }

// systemCalls returns how many system calls the socket has made.
func (g *genl) systemCalls() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.syscalls + g.in.SystemCalls
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

// appendRequest appends the headers of one IPVS request; nlcodec.FinishMsg closes it.
func (g *genl) appendRequest(b []byte, flags uint16, seq uint32, cmd uint8) []byte {
	b = nlcodec.AppendMsgHeader(b, g.family, flags, seq)
	return nlcodec.AppendGenlHeader(b, cmd, ipvsGenlVersion)
}

// write builds one message with fill and either queues it (in a batch: the return is nil,
// its outcome comes from flush) or sends it and waits for the answer.
func (g *genl) write(cmd uint8, wrap func(error) error, fill func(b []byte) []byte) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq++
	off := len(g.out)
	g.out = g.appendRequest(g.out, unix.NLM_F_REQUEST, g.seq, cmd)
	g.out = fill(g.out)
	nlcodec.FinishMsg(g.out[off:])
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
	nlcodec.SetMsgFlags(g.out[last.off:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	results := make([]error, len(q))
	answered := make([]bool, len(q))
	index := make(map[uint32]int, len(q))
	for i, m := range q {
		index[m.seq] = i
	}
	err := g.sendAll(g.out, false)
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

// sendAll hands b to the kernel, which handles every message in it before it returns;
// quick for a read request (see quicksys_linux.go).
func (g *genl) sendAll(b []byte, quick bool) error {
	for {
		g.syscalls++
		var err error
		if quick {
			err = nlsock.QuickWrite(g.fd, b)
		} else {
			_, err = unix.Write(g.fd, b)
		}
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
	done := false
	take := func(m nlcodec.Msg) error {
		if m.Seq == lastSeq {
			done = true
		}
		i, ok := index[m.Seq]
		if !ok || m.Type != unix.NLMSG_ERROR {
			return nil
		}
		answered[i] = true
		results[i] = nlcodec.AckError(m.Payload)
		return nil
	}
	for {
		n, err := g.in.Receive(true, replyTimeout)
		if errors.Is(err, unix.ENOBUFS) {
			for {
				n, err := g.in.Receive(false, replyTimeout)
				if err != nil {
					break // EAGAIN: nothing more queued
				}
				_ = nlcodec.EachMsg(g.in.Buf[:n], take) // best effort: the rest is unknown anyway
			}
			return unix.ENOBUFS
		}
		if err != nil {
			return err
		}
		if err := nlcodec.EachMsg(g.in.Buf[:n], take); err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

// Reads. A dump answers in as many messages as it takes and ends with NLMSG_DONE; the
// parsers read the attributes in place, allocating nothing per entry.

// dump sends a dump request for cmd with the attributes fill writes and calls fn with the
// attributes of each answer, until the end. fn must not keep its argument.
func (g *genl) dump(cmd uint8, fill func([]byte) []byte, fn func(attrs []byte) error) error {
	return g.request(cmd, true, fill, fn)
}

// get sends a request for one object and calls fn with the attributes of the answer.
func (g *genl) get(cmd uint8, fill func([]byte) []byte, fn func(attrs []byte) error) error {
	return g.request(cmd, false, fill, fn)
}

// request sends one read request and reads its answers: for a dump, messages until
// NLMSG_DONE (or an error); otherwise the one answer, or the error in its place. An error
// from fn is returned once the answers are all read, so that none is left on the socket.
func (g *genl) request(cmd uint8, dump bool, fill func([]byte) []byte, fn func(attrs []byte) error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.send() // anything queued goes first, in order
	g.seq++
	flags := uint16(unix.NLM_F_REQUEST)
	if dump {
		flags |= unix.NLM_F_DUMP
	}
	b := fill(g.appendRequest(g.req[:0], flags, g.seq, cmd))
	nlcodec.FinishMsg(b)
	g.req = b
	if err := g.sendAll(b, true); err != nil {
		return err
	}
	rd := nlsock.Answers{Seq: g.seq, Dump: dump, Each: func(payload []byte) error {
		attrs, err := nlcodec.PayloadAttrs(payload)
		if err != nil {
			return err
		}
		return fn(attrs)
	}}
	// A listing of the whole table runs for seconds beside the sync loop (a repair's
	// listing in the background): without a yield per datagram, a change's sync sat
	// runnable behind it for hundreds of milliseconds on two CPUs (execution trace, 50,000
	// Services). A background listing parks there while a change is applied, which also
	// holds the kernel's next round of the dump back.
	if err := g.in.Read(&rd, replyTimeout, g.yield); err != nil {
		return err
	}
	return rd.Err(ErrDumpInterrupted)
}

// yield is where a dump gives way between datagrams (see request).
func (g *genl) yield() { g.gate.Yield() }
