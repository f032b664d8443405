package nlsock

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/nlcodec"
)

// ErrNoAnswer is returned for a request for one object that the kernel acknowledged
// without sending the object.
var ErrNoAnswer = errors.New("no answer")

// Receiver receives a netlink socket's datagrams into one reused buffer. The project's
// own readers (package ipvs' generic netlink socket, package ipset's listings) share it so
// that a dump's receive loop (sequence numbers, DONE, ERROR, DUMP_INTR, the buffer, the
// yield between datagrams) is written once. Not safe for concurrent use: the owner holds
// its socket's lock around it.
type Receiver struct {
	FD int // non-blocking
	// Background receives through the runtime's system-call wrapper (Recv) rather than
	// raw (QuickRecv): a listing that runs beside the sync loop, whose receives each run a
	// long round of the kernel's dump.
	Background bool
	Buf        []byte // one datagram; 64 KiB holds the largest the kernel sends
	// SystemCalls counts receives and waits (tests read what batching saves).
	SystemCalls uint64
}

// NewReceiver returns a Receiver for fd with a 64 KiB buffer.
func NewReceiver(fd int, background bool) *Receiver {
	return &Receiver{FD: fd, Background: background, Buf: make([]byte, 64<<10)}
}

// Receive reads one datagram into Buf and returns its length. With wait it waits for
// one up to timeout; without, it returns EAGAIN when none is queued.
func (r *Receiver) Receive(wait bool, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	receive := QuickRecv
	if r.Background {
		receive = Recv
	}
	for {
		r.SystemCalls++
		n, err := receive(r.FD, r.Buf)
		switch {
		case err == nil:
			return n, nil
		case err == unix.EINTR:
		case err == unix.EAGAIN && wait:
			r.SystemCalls++
			if err := WaitReadable(r.FD, deadline); err != nil {
				return 0, err
			}
		default:
			return 0, err
		}
	}
}

// Read receives datagrams until the answers to a are complete, waiting up to timeout for
// each. After each datagram of a dump it calls between (if set): where a listing in the
// background gives way to the sync loop. Answers to other requests are passed over.
func (r *Receiver) Read(a *Answers, timeout time.Duration, between func()) error {
	for !a.done {
		n, err := r.Receive(true, timeout)
		if err != nil {
			return err
		}
		if err := nlcodec.EachMsg(r.Buf[:n], a.take); err != nil {
			return err
		}
		if a.Dump && between != nil {
			between()
		}
	}
	return nil
}

// Answers collects the answers to one read request: for a dump, messages until
// NLMSG_DONE (or an error in its place); otherwise the one answer, or the error in its
// place.
type Answers struct {
	Seq  uint32
	Dump bool
	// Each is called with the payload of each answer that is an object. After it returns an
	// error it is not called again; the rest of the answers are still read, so that none
	// is left on the socket for the next request.
	Each func(payload []byte) error

	done        bool
	interrupted bool
	err         error
}

// Err returns interrupted for a dump the kernel marked interrupted (the table changed
// while it was read: whatever else went wrong, the caller reads it again), else the first
// error of the answers or of Each.
func (a *Answers) Err(interrupted error) error {
	if a.interrupted {
		return interrupted
	}
	return a.err
}

func (a *Answers) take(m nlcodec.Msg) error {
	if m.Seq != a.Seq || a.done {
		return nil
	}
	if a.Dump && m.Flags&unix.NLM_F_DUMP_INTR != 0 {
		a.interrupted = true
	}
	switch {
	case m.Type == unix.NLMSG_DONE && a.Dump:
		a.done = true
		if len(m.Payload) >= 4 { // the dump's own error, where the kernel reports one here
			a.fail(nlcodec.AckError(m.Payload))
		}
	case m.Type == unix.NLMSG_ERROR:
		a.done = true
		err := nlcodec.AckError(m.Payload)
		if err == nil && !a.Dump {
			err = ErrNoAnswer
		}
		a.fail(err)
	default:
		a.done = !a.Dump
		if a.err == nil {
			a.fail(a.Each(m.Payload))
		}
	}
	return nil
}

func (a *Answers) fail(err error) {
	if a.err == nil {
		a.err = err
	}
}
