package nlcodec

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("malformed netlink data")

// Msg is one netlink message, its payload in place (valid until the buffer is reused).
type Msg struct {
	Type, Flags uint16
	Seq         uint32
	Payload     []byte
}

// EachMsg calls fn for every message in b, in order, and stops at the first error fn
// returns (which it returns) or at a malformed message.
func EachMsg(b []byte, fn func(Msg) error) error {
	for len(b) > 0 {
		l, err := frameLen(b, "message", MsgHeaderLen, func(b []byte) int { return int(binary.NativeEndian.Uint32(b)) })
		if err != nil {
			return err
		}
		m := Msg{
			Type:    binary.NativeEndian.Uint16(b[4:6]),
			Flags:   binary.NativeEndian.Uint16(b[6:8]),
			Seq:     binary.NativeEndian.Uint32(b[8:12]),
			Payload: b[MsgHeaderLen:l],
		}
		if err := fn(m); err != nil {
			return err
		}
		b = b[min(alignLen(l), len(b)):]
	}
	return nil
}

// frameLen reads the length of the message or attribute at the start of b (lenOf reads it
// from the header of hdrLen bytes) and checks that the header and the whole of it are there.
func frameLen(b []byte, what string, hdrLen int, lenOf func([]byte) int) (int, error) {
	if len(b) < hdrLen {
		return 0, fmt.Errorf("%w: %d bytes left, the %s header takes %d", ErrMalformed, len(b), what, hdrLen)
	}
	l := lenOf(b)
	if l < hdrLen || l > len(b) {
		return 0, fmt.Errorf("%w: %s length %d with %d bytes left", ErrMalformed, what, l, len(b))
	}
	return l, nil
}

// Attr is one attribute, its value in place. Type has the NLA_F_NESTED and
// NLA_F_NET_BYTEORDER flags cleared; Nested tells whether the first was set.
type Attr struct {
	Type   uint16
	Nested bool
	Value  []byte
}

const typeMask = ^uint16(unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)

// EachAttr calls fn for every attribute in b, in order, and stops at the first error fn
// returns (which it returns) or at a malformed attribute. The last attribute may lack its
// padding.
func EachAttr(b []byte, fn func(Attr) error) error {
	for len(b) > 0 {
		l, err := frameLen(b, "attribute", AttrHeaderLen, func(b []byte) int { return int(binary.NativeEndian.Uint16(b)) })
		if err != nil {
			return err
		}
		t := binary.NativeEndian.Uint16(b[2:4])
		a := Attr{Type: t & typeMask, Nested: t&unix.NLA_F_NESTED != 0, Value: b[AttrHeaderLen:l]}
		if err := fn(a); err != nil {
			return err
		}
		b = b[min(alignLen(l), len(b)):]
	}
	return nil
}

// PayloadAttrs returns the attributes of a generic netlink or nfnetlink payload: what
// follows its 4-byte family header (genlmsghdr or nfgenmsg).
func PayloadAttrs(payload []byte) ([]byte, error) {
	if len(payload) < 4 {
		return nil, fmt.Errorf("%w: payload of %d bytes has no family header", ErrMalformed, len(payload))
	}
	return payload[4:], nil
}

// AckError reads the payload of an NLMSG_ERROR message: nil for an acknowledgement, else
// the kernel's errno.
func AckError(payload []byte) error {
	if len(payload) < 4 {
		return fmt.Errorf("%w: error message of %d bytes", ErrMalformed, len(payload))
	}
	if e := int32(binary.NativeEndian.Uint32(payload[0:4])); e != 0 {
		return unix.Errno(-e)
	}
	return nil
}

// CString reads a NUL-terminated string; a value without the NUL is taken whole.
func CString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// The readers below check the length and decode in place. They once passed a method value
// (binary.BigEndian.Uint16, say) to a shared helper, and each such value escaped to the heap:
// one allocation per attribute read, 120 MB of garbage per two repair cycles at 50,000
// Services, all of it in the real-server listings.

// U8 reads a one-byte value.
func (a Attr) U8() (uint8, error) {
	if err := a.short(1); err != nil {
		return 0, err
	}
	return a.Value[0], nil
}

// U16 reads a 16-bit value in host byte order.
func (a Attr) U16() (uint16, error) {
	if err := a.short(2); err != nil {
		return 0, err
	}
	return binary.NativeEndian.Uint16(a.Value), nil
}

// U32 reads a 32-bit value in host byte order (the first 4 bytes of a longer value, such as
// IPVS's flags-and-mask pair).
func (a Attr) U32() (uint32, error) {
	if err := a.short(4); err != nil {
		return 0, err
	}
	return binary.NativeEndian.Uint32(a.Value), nil
}

// BE16 reads a 16-bit value in network byte order.
func (a Attr) BE16() (uint16, error) {
	if err := a.short(2); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint16(a.Value), nil
}

// BE32 reads a 32-bit value in network byte order.
func (a Attr) BE32() (uint32, error) {
	if err := a.short(4); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(a.Value), nil
}

// BE64 reads a 64-bit value in network byte order.
func (a Attr) BE64() (uint64, error) {
	if err := a.short(8); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(a.Value), nil
}

// short is the error for a value shorter than n bytes, nil for one long enough.
func (a Attr) short(n int) error {
	if len(a.Value) < n {
		return fmt.Errorf("%w: attribute %d has %d bytes, want %d", ErrMalformed, a.Type, len(a.Value), n)
	}
	return nil
}
