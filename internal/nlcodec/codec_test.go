package nlcodec

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// A message with every kind of attribute walks back to what was written, with the padding
// the kernel expects (every attribute starts 4-aligned, lengths exclude padding).
func TestMessageRoundTrip(t *testing.T) {
	b := AppendMsgHeader(nil, 0x1234, unix.NLM_F_REQUEST|unix.NLM_F_ACK, 77)
	b = AppendGenlHeader(b, 5, 1)
	b = AppendU8(b, 1, 0xab)
	b = AppendU16(b, 2, 0xbeef)
	b = AppendU32(b, 3, 0xdeadbeef)
	b = AppendBE16(b, 4|unix.NLA_F_NET_BYTEORDER, 8080)
	b = AppendBE32(b, 5, 0x01020304)
	b = AppendString(b, 6, "wrr")
	b, nest := BeginNest(b, 7)
	b = AppendAttr(b, 1, []byte{10, 0, 0, 1})
	b = AppendString(b, 2, "")
	b = EndNest(b, nest)
	FinishMsg(b)
	if len(b)%4 != 0 {
		t.Fatalf("message of %d bytes is not 4-aligned", len(b))
	}

	var msgs []Msg
	if err := EachMsg(b, func(m Msg) error { msgs = append(msgs, m); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].Type != 0x1234 || msgs[0].Flags != unix.NLM_F_REQUEST|unix.NLM_F_ACK || msgs[0].Seq != 77 {
		t.Fatalf("messages %+v", msgs)
	}
	if p := msgs[0].Payload; p[0] != 5 || p[1] != 1 {
		t.Fatalf("generic netlink header %v", p[:4])
	}
	attrs, err := PayloadAttrs(msgs[0].Payload)
	if err != nil {
		t.Fatal(err)
	}
	var got []Attr
	if err := EachAttr(attrs, func(a Attr) error { got = append(got, a); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 7 {
		t.Fatalf("%d attributes, want 7: %+v", len(got), got)
	}
	check := func(name string, v, want uint64, err error) {
		t.Helper()
		if err != nil || v != want {
			t.Errorf("%s = %#x, %v; want %#x", name, v, err, want)
		}
	}
	u8, err := got[0].U8()
	check("U8", uint64(u8), 0xab, err)
	u16, err := got[1].U16()
	check("U16", uint64(u16), 0xbeef, err)
	u32, err := got[2].U32()
	check("U32", uint64(u32), 0xdeadbeef, err)
	be16, err := got[3].BE16()
	check("BE16", uint64(be16), 8080, err)
	if got[3].Type != 4 {
		t.Errorf("type %#x: NLA_F_NET_BYTEORDER not cleared", got[3].Type)
	}
	be32, err := got[4].BE32()
	check("BE32", uint64(be32), 0x01020304, err)
	if s := CString(got[5].Value); s != "wrr" || len(got[5].Value) != 4 {
		t.Errorf("string %q in %d bytes, want \"wrr\" and its NUL", s, len(got[5].Value))
	}
	if got[6].Type != 7 || !got[6].Nested || got[1].Nested {
		t.Errorf("nested attribute %+v", got[6])
	}
	var inner []Attr
	if err := EachAttr(got[6].Value, func(a Attr) error { inner = append(inner, a); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(inner) != 2 || !bytes.Equal(inner[0].Value, []byte{10, 0, 0, 1}) || CString(inner[1].Value) != "" || len(inner[1].Value) != 1 {
		t.Errorf("inner attributes %+v", inner)
	}
}

// The exact bytes of a small attribute run, so that an encoding change shows even when the
// walker would change the same way.
func TestEncodingBytes(t *testing.T) {
	b := AppendString(nil, 6, "rr")
	b = AppendBE16(b, 4, 80)
	want := []byte{7, 0, 6, 0, 'r', 'r', 0, 0, 6, 0, 4, 0, 0, 80, 0, 0}
	if !nativeLittle() {
		want = []byte{0, 7, 0, 6, 'r', 'r', 0, 0, 0, 6, 0, 4, 0, 80, 0, 0}
	}
	if !bytes.Equal(b, want) {
		t.Errorf("encoded % x, want % x", b, want)
	}
}

func nativeLittle() bool { return AppendU16(nil, 0, 1)[4] == 1 }

// Several messages in one read, the last without padding after it.
func TestEachMsgSeveral(t *testing.T) {
	var b []byte
	for seq := range uint32(3) {
		off := len(b)
		b = AppendMsgHeader(b, unix.NLMSG_ERROR, 0, seq)
		b = append(b, 0, 0, 0, 0)
		FinishMsg(b[off:])
	}
	var seqs []uint32
	err := EachMsg(b, func(m Msg) error {
		if err := AckError(m.Payload); err != nil {
			t.Errorf("acknowledgement read as %v", err)
		}
		seqs = append(seqs, m.Seq)
		return nil
	})
	if err != nil || len(seqs) != 3 || seqs[2] != 2 {
		t.Errorf("seqs %v, %v", seqs, err)
	}
}

func TestAckError(t *testing.T) {
	if err := AckError([]byte{0, 0, 0, 0}); err != nil {
		t.Errorf("acknowledgement: %v", err)
	}
	var p [4]byte
	copy(p[:], AppendU32(nil, 0, uint32(0xffffffff-uint32(unix.ESRCH)+1))[4:])
	if err := AckError(p[:]); !errors.Is(err, unix.ESRCH) {
		t.Errorf("error message: %v, want ESRCH", err)
	}
	if err := AckError([]byte{1, 2}); !errors.Is(err, ErrMalformed) {
		t.Errorf("short error message: %v, want ErrMalformed", err)
	}
}

// An error fn returns stops the walk and comes back unchanged.
func TestWalkStopsAtCallbackError(t *testing.T) {
	b := AppendU8(AppendU8(nil, 1, 1), 2, 2)
	stop := errors.New("stop")
	n := 0
	if err := EachAttr(b, func(Attr) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("err %v after %d attributes", err, n)
	}
}

// Every truncation of a valid message, and lengths that lie, are errors, never panics, and
// never a silently shortened walk that reports success.
func TestMalformed(t *testing.T) {
	good := AppendMsgHeader(nil, 16, 0, 1)
	good = AppendGenlHeader(good, 1, 1)
	good = AppendU32(good, 1, 7)
	good = AppendString(good, 2, "abcdefg")
	FinishMsg(good)
	attrs := good[MsgHeaderLen+4:]
	for n := 1; n < len(attrs); n++ {
		if n%4 == 0 && n == len(AppendU32(nil, 1, 7)) {
			continue // a whole first attribute: valid on its own
		}
		if err := EachAttr(attrs[:n], func(Attr) error { return nil }); !errors.Is(err, ErrMalformed) {
			t.Errorf("attributes cut to %d of %d bytes: %v, want ErrMalformed", n, len(attrs), err)
		}
	}
	for n := 1; n < len(good); n++ {
		if err := EachMsg(good[:n], func(Msg) error { return nil }); !errors.Is(err, ErrMalformed) {
			t.Errorf("message cut to %d of %d bytes: %v, want ErrMalformed", n, len(good), err)
		}
	}
	lies := map[string][]byte{
		"attribute shorter than its header": {2, 0, 1, 0, 0, 0, 0, 0},
		"attribute longer than the buffer":  {200, 0, 1, 0, 0, 0, 0, 0},
		"message shorter than its header":   append([]byte{4, 0, 0, 0}, make([]byte, 12)...),
	}
	for name, b := range lies {
		var err error
		if len(b) == MsgHeaderLen {
			err = EachMsg(b, func(Msg) error { return nil })
		} else {
			err = EachAttr(b, func(Attr) error { return nil })
		}
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	short := Attr{Type: 3, Value: []byte{1}}
	for name, read := range map[string]func() error{
		"U16":  func() error { _, err := short.U16(); return err },
		"U32":  func() error { _, err := short.U32(); return err },
		"BE16": func() error { _, err := short.BE16(); return err },
		"BE32": func() error { _, err := short.BE32(); return err },
		"U8":   func() error { _, err := Attr{}.U8(); return err },
	} {
		if err := read(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s of a short value: %v, want ErrMalformed", name, err)
		}
	}
	if _, err := PayloadAttrs([]byte{1, 2}); !errors.Is(err, ErrMalformed) {
		t.Errorf("payload without a family header: %v", err)
	}
}

// Encoding appends and allocates nothing once the buffer has room: the batched IPVS writes
// rely on it.
func TestEncodingAllocatesNothing(t *testing.T) {
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		b := AppendMsgHeader(buf[:0], 16, 1, 2)
		b = AppendGenlHeader(b, 1, 1)
		b, n := BeginNest(b, 1)
		b = AppendU16(b, 1, 2)
		b = AppendBE16(b, 4, 80)
		b = AppendU32(b, 8, 0)
		b = AppendString(b, 6, "rr")
		b = EndNest(b, n)
		FinishMsg(b)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per message, want 0", allocs)
	}
}

// Walking arbitrary bytes never panics, and whatever it accepts re-encodes to the same
// attributes.
func FuzzEachAttr(f *testing.F) {
	f.Add(AppendString(AppendU32(nil, 1, 7), 2, "x"))
	nested, n := BeginNest(nil, 3)
	nested = EndNest(AppendU8(nested, 1, 1), n)
	f.Add(nested)
	f.Add([]byte{5, 0, 1, 0, 9})
	f.Add([]byte{0xff, 0xff, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var again []byte
		var values [][]byte
		var walkNested func([]byte) error
		walkNested = func(b []byte) error {
			return EachAttr(b, func(a Attr) error {
				_, _ = a.U32()
				_ = CString(a.Value)
				if a.Nested {
					_ = walkNested(a.Value)
				}
				return nil
			})
		}
		_ = walkNested(b)
		_ = EachMsg(b, func(m Msg) error { _ = AckError(m.Payload); return nil })
		err := EachAttr(b, func(a Attr) error {
			typ := a.Type
			if a.Nested {
				typ |= unix.NLA_F_NESTED
			}
			again = AppendAttr(again, typ, a.Value)
			values = append(values, a.Value)
			return nil
		})
		if err != nil {
			return
		}
		var n int
		err = EachAttr(again, func(a Attr) error {
			if n >= len(values) || !bytes.Equal(a.Value, values[n]) {
				t.Fatalf("re-encoded attribute %d reads % x", n, a.Value)
			}
			n++
			return nil
		})
		if err != nil || n != len(values) {
			t.Fatalf("re-encoded attributes walk to %d of %d: %v", n, len(values), err)
		}
	})
}
