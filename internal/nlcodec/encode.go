package nlcodec

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// Header sizes and the alignment of messages and attributes.
const (
	MsgHeaderLen  = unix.NLMSG_HDRLEN // struct nlmsghdr
	AttrHeaderLen = unix.SizeofNlAttr // struct nlattr
	align         = 4                 // NLMSG_ALIGNTO and NLA_ALIGNTO
)

func alignLen(n int) int { return (n + align - 1) &^ (align - 1) }

// AppendMsgHeader appends a netlink message header with a zero length: FinishMsg sets it
// once the message is complete. Port id 0 addresses the kernel.
func AppendMsgHeader(b []byte, typ, flags uint16, seq uint32) []byte {
	var h [MsgHeaderLen]byte
	binary.NativeEndian.PutUint16(h[4:], typ)
	binary.NativeEndian.PutUint16(h[6:], flags)
	binary.NativeEndian.PutUint32(h[8:], seq)
	return append(b, h[:]...)
}

// AppendGenlHeader appends a generic netlink header (struct genlmsghdr).
func AppendGenlHeader(b []byte, cmd, version uint8) []byte {
	return append(b, cmd, version, 0, 0)
}

// AppendNfgenHeader appends an nfnetlink header (struct nfgenmsg; res_id is big-endian 0).
func AppendNfgenHeader(b []byte, family, version uint8) []byte {
	return append(b, family, version, 0, 0)
}

// FinishMsg sets the length of the message that starts at m[0] and runs to the end of m.
func FinishMsg(m []byte) { binary.NativeEndian.PutUint32(m[0:], uint32(len(m))) }

// SetMsgFlags replaces the flags of the message that starts at m[0].
func SetMsgFlags(m []byte, flags uint16) { binary.NativeEndian.PutUint16(m[6:], flags) }

// AppendAttr appends one attribute with its value, padded to the attribute alignment.
func AppendAttr(b []byte, typ uint16, v []byte) []byte {
	b = appendAttrHeader(b, typ, len(v))
	b = append(b, v...)
	return pad(b, len(v))
}

// AppendString appends a NUL-terminated string attribute (NLA_NUL_STRING).
func AppendString(b []byte, typ uint16, s string) []byte {
	b = appendAttrHeader(b, typ, len(s)+1)
	b = append(b, s...)
	b = append(b, 0)
	return pad(b, len(s)+1)
}

// AppendU8 appends a one-byte attribute.
func AppendU8(b []byte, typ uint16, v uint8) []byte {
	return pad(append(appendAttrHeader(b, typ, 1), v), 1)
}

// AppendU16 appends a 16-bit attribute in host byte order.
func AppendU16(b []byte, typ uint16, v uint16) []byte {
	return pad(binary.NativeEndian.AppendUint16(appendAttrHeader(b, typ, 2), v), 2)
}

// AppendU32 appends a 32-bit attribute in host byte order.
func AppendU32(b []byte, typ uint16, v uint32) []byte {
	return binary.NativeEndian.AppendUint32(appendAttrHeader(b, typ, 4), v)
}

// AppendBE16 appends a 16-bit attribute in network byte order. The type is written as
// given: protocols that want NLA_F_NET_BYTEORDER set (ipset) pass it in typ.
func AppendBE16(b []byte, typ uint16, v uint16) []byte {
	return pad(binary.BigEndian.AppendUint16(appendAttrHeader(b, typ, 2), v), 2)
}

// AppendBE32 appends a 32-bit attribute in network byte order (see AppendBE16).
func AppendBE32(b []byte, typ uint16, v uint32) []byte {
	return binary.BigEndian.AppendUint32(appendAttrHeader(b, typ, 4), v)
}

// AppendBE64 appends a 64-bit attribute in network byte order (see AppendBE16).
func AppendBE64(b []byte, typ uint16, v uint64) []byte {
	return binary.BigEndian.AppendUint64(appendAttrHeader(b, typ, 8), v)
}

// BeginNest appends the header of a nested attribute (NLA_F_NESTED is added to typ) and
// returns where it starts; EndNest(b, start) closes it after its content is appended.
func BeginNest(b []byte, typ uint16) ([]byte, int) {
	start := len(b)
	return appendAttrHeader(b, typ|unix.NLA_F_NESTED, 0), start
}

// EndNest sets the length of the nested attribute opened at start to cover everything
// appended since. Its content is made of attributes, so it is already aligned.
func EndNest(b []byte, start int) []byte {
	binary.NativeEndian.PutUint16(b[start:], uint16(len(b)-start))
	return b
}

func appendAttrHeader(b []byte, typ uint16, valueLen int) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(AttrHeaderLen+valueLen))
	return binary.NativeEndian.AppendUint16(b, typ)
}

func pad(b []byte, valueLen int) []byte {
	for range alignLen(valueLen) - valueLen {
		b = append(b, 0)
	}
	return b
}
