// Package nlsock holds the system calls the project's own netlink readers make: a raw
// receive into the caller's buffer and a wait for a non-blocking socket's next datagram.
// The project's own netlink readers use them (package ipvs' generic netlink socket).
package nlsock

import (
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Quick system calls: a read request and every receive go to the kernel through
// unix.RawSyscall, not through the runtime's syscall wrapper.
//
// Why: the wrapper tells the scheduler the goroutine is in a system call, and sysmon hands
// its P to another thread when the call takes longer than about 20 µs while other
// goroutines wait. The kernel answers a netlink dump request within the send, so the send
// takes longer than that whenever the kernel is slow to build the first answers (under
// emulation every request is, at 0.2-0.5 ms). A listing through several sockets then hands
// its Ps between threads on every request, which costs as much as the reading itself
// (about half of a listing's time under emulation); a raw call keeps the P and reads at the
// kernel's pace.
//
// Raw calls are right only where the call never waits (a listing in the background receives
// through Recv): the socket is non-blocking (a receive with nothing queued returns EAGAIN,
// and the wait for an answer is a normal poll), and the kernel handles a request to a
// netlink socket within the send. Batched writes keep the wrapper: a send of hundreds of
// writes runs for milliseconds, and a raw call would hold the P, and any stop-the-world,
// that long.

// QuickWrite writes b to fd in one raw system call.
func QuickWrite(fd int, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	_, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return e
	}
	return nil
}

// QuickRecv receives one datagram from the non-blocking fd into buf in one raw system call.
func QuickRecv(fd int, buf []byte) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// Recv receives one datagram from the non-blocking fd into buf through the runtime's
// system-call wrapper, for a listing that runs in the background: in a dump, each receive
// also runs the kernel's next round of it before it returns, and a round of a large table
// runs for tens of milliseconds under emulation (IPVS walks its service table from the start
// on every round: about 17 ms at 70,000 virtual servers). Through a raw call the goroutine
// kept its P for all of it, and with the IPVS and ipset listings side by side both Ps of the
// 2-CPU guest were taken while a change's sync sat runnable (execution trace, 50,000
// Services). Through the wrapper the scheduler hands the P on.
func Recv(fd int, buf []byte) (int, error) { return unix.Read(fd, buf) }

// WaitReadable waits until fd has data or deadline passes.
func WaitReadable(fd int, deadline time.Time) error {
	left := time.Until(deadline)
	if left <= 0 {
		return fmt.Errorf("no answer from the kernel by %s", deadline.Format(time.TimeOnly))
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if _, err := unix.Poll(fds, int(left/time.Millisecond)+1); err != nil && err != unix.EINTR {
		return fmt.Errorf("wait for the kernel's answer: %w", err)
	}
	return nil
}
