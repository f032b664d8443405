package nlsock

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/nlcodec"
)

// A datagram socket pair stands in for the netlink socket: the reader only receives
// datagrams and walks the messages in them.
func pair(t *testing.T) (reader, writer int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	return fds[0], fds[1]
}

func msg(typ, flags uint16, seq uint32, payload []byte) []byte {
	b := nlcodec.AppendMsgHeader(nil, typ, flags, seq)
	b = append(b, payload...)
	nlcodec.FinishMsg(b)
	return b
}

func errPayload(errno int32) []byte {
	b := make([]byte, 4+16)
	binary.NativeEndian.PutUint32(b, uint32(-errno))
	return b
}

func send(t *testing.T, fd int, msgs ...[]byte) {
	t.Helper()
	var b []byte
	for _, m := range msgs {
		b = append(b, m...)
	}
	if _, err := unix.Write(fd, b); err != nil {
		t.Fatal(err)
	}
}

const obj = 0x20 // any message type that is not NLMSG_DONE or NLMSG_ERROR

func TestDumpReadsEveryDatagramUntilDoneAndSkipsOtherRequests(t *testing.T) {
	r, w := pair(t)
	// An answer to an earlier request, then the dump's objects over two datagrams.
	send(t, w, msg(obj, 0, 6, []byte("old!")), msg(obj, unix.NLM_F_MULTI, 7, []byte("one.")))
	send(t, w, msg(obj, unix.NLM_F_MULTI, 7, []byte("two.")), msg(unix.NLMSG_DONE, unix.NLM_F_MULTI, 7, errPayload(0)))
	var got []string
	a := Answers{Seq: 7, Dump: true, Each: func(p []byte) error { got = append(got, string(p)); return nil }}
	yields := 0
	rc := NewReceiver(r, false)
	if err := rc.Read(&a, time.Second, func() { yields++ }); err != nil {
		t.Fatal(err)
	}
	if err := a.Err(errors.New("interrupted")); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "one." || got[1] != "two." {
		t.Fatalf("objects %q, want one. and two.", got)
	}
	if yields != 2 {
		t.Fatalf("gave way %d times, want once per datagram (2)", yields)
	}
}

func TestDumpInterruptedIsReportedAfterEveryAnswerIsRead(t *testing.T) {
	r, w := pair(t)
	send(t, w, msg(obj, unix.NLM_F_MULTI|unix.NLM_F_DUMP_INTR, 3, []byte("one.")))
	send(t, w, msg(unix.NLMSG_DONE, unix.NLM_F_MULTI, 3, errPayload(0)))
	interrupted := errors.New("interrupted")
	a := Answers{Seq: 3, Dump: true, Each: func([]byte) error { return nil }}
	if err := NewReceiver(r, false).Read(&a, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Err(interrupted); err != interrupted {
		t.Fatalf("Err = %v, want the interrupted error", err)
	}
	if _, err := unix.Read(r, make([]byte, 64)); err != unix.EAGAIN {
		t.Fatalf("an answer was left on the socket (read: %v)", err)
	}
}

func TestCallbackErrorStopsCallsButEveryAnswerIsRead(t *testing.T) {
	r, w := pair(t)
	stop := errors.New("stop")
	send(t, w, msg(obj, unix.NLM_F_MULTI, 1, []byte("one.")), msg(obj, unix.NLM_F_MULTI, 1, []byte("two.")))
	send(t, w, msg(unix.NLMSG_DONE, unix.NLM_F_MULTI, 1, errPayload(0)))
	calls := 0
	a := Answers{Seq: 1, Dump: true, Each: func([]byte) error { calls++; return stop }}
	if err := NewReceiver(r, false).Read(&a, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Err(nil); err != stop || calls != 1 {
		t.Fatalf("Err = %v after %d calls, want stop after 1", err, calls)
	}
	if _, err := unix.Read(r, make([]byte, 64)); err != unix.EAGAIN {
		t.Fatalf("an answer was left on the socket (read: %v)", err)
	}
}

func TestKernelErrorsOfAGetAndADump(t *testing.T) {
	r, w := pair(t)
	// A get answered by an acknowledgement alone: no object.
	send(t, w, msg(unix.NLMSG_ERROR, 0, 1, errPayload(0)))
	a := Answers{Seq: 1, Each: func([]byte) error { t.Fatal("no object was sent"); return nil }}
	rc := NewReceiver(r, false)
	if err := rc.Read(&a, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Err(nil); !errors.Is(err, ErrNoAnswer) {
		t.Fatalf("get: Err = %v, want ErrNoAnswer", err)
	}
	// A get answered by its object ends at the object.
	send(t, w, msg(obj, 0, 2, []byte("one.")))
	got := ""
	a = Answers{Seq: 2, Each: func(p []byte) error { got = string(p); return nil }}
	if err := rc.Read(&a, time.Second, nil); err != nil || a.Err(nil) != nil || got != "one." {
		t.Fatalf("get: read %v, Err %v, object %q", err, a.Err(nil), got)
	}
	// A dump whose DONE carries the kernel's error.
	send(t, w, msg(unix.NLMSG_DONE, unix.NLM_F_MULTI, 3, errPayload(int32(unix.ENOENT))))
	a = Answers{Seq: 3, Dump: true, Each: func([]byte) error { return nil }}
	if err := rc.Read(&a, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Err(nil); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("dump: Err = %v, want ENOENT", err)
	}
}

func TestReadGivesUpAtTheTimeout(t *testing.T) {
	r, _ := pair(t)
	a := Answers{Seq: 1, Dump: true, Each: func([]byte) error { return nil }}
	began := time.Now()
	if err := NewReceiver(r, false).Read(&a, 50*time.Millisecond, nil); err == nil {
		t.Fatal("Read returned without an answer")
	}
	if waited := time.Since(began); waited > 5*time.Second {
		t.Fatalf("Read waited %s for a 50 ms timeout", waited)
	}
}
