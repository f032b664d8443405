package bench

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/nlcodec"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// destReader reads one virtual server's real servers over a generic netlink socket of its
// own, through one reused buffer. The bench polls the kernel every 2 ms per pending change,
// in the proxy's process: moby/ipvs allocates a 64 KiB receive buffer and parses into new
// objects on every call, and over a churn at 50,000 Services that was more garbage than
// the proxy's own (110 MB per two repair cycles), which the proxy's collector then chased
// while the changes were measured. The request and the answer follow the kernel's uapi
// (linux/ip_vs.h), apart from package ipvs; only the byte-level codec is shared.
type destReader struct {
	fd     int
	family uint16
	seq    uint32
	req    []byte
	rbuf   []byte
}

// The kernel's IPVS generic netlink interface (include/uapi/linux/ip_vs.h).
const (
	ipvsCmdGetDest       = 8 // IPVS_CMD_GET_DEST
	ipvsAttrService      = 1 // IPVS_CMD_ATTR_SERVICE
	ipvsAttrDest         = 2 // IPVS_CMD_ATTR_DEST
	ipvsSvcAttrAF        = 1 // IPVS_SVC_ATTR_AF
	ipvsSvcAttrProtocol  = 2
	ipvsSvcAttrAddr      = 3
	ipvsSvcAttrPort      = 4
	ipvsSvcAttrFWMark    = 5
	ipvsDestAttrAddr     = 1 // IPVS_DEST_ATTR_ADDR
	ipvsDestAttrPort     = 2
	ipvsDestAttrWeight   = 4
	ipvsDestAttrAddrFam  = 11
	ipvsGenlVersionProbe = 1
)

func newDestReader() (*destReader, error) {
	fam, err := netlink.GenlFamilyGet("IPVS")
	if err != nil {
		return nil, fmt.Errorf("IPVS generic netlink family: %w", err)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_GENERIC)
	if err != nil {
		return nil, err
	}
	tv := unix.Timeval{Sec: 10}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &destReader{fd: fd, family: fam.ID, rbuf: make([]byte, 1<<16)}, nil
}

// reals calls fn with each real server of key and its weight (none when key is absent).
func (d *destReader) reals(key model.VSKey, fn func(model.RSKey, uint32)) error {
	d.seq++
	b := nlcodec.AppendMsgHeader(d.req[:0], d.family, unix.NLM_F_REQUEST|unix.NLM_F_DUMP, d.seq)
	b = nlcodec.AppendGenlHeader(b, ipvsCmdGetDest, ipvsGenlVersionProbe)
	b, n := nlcodec.BeginNest(b, ipvsAttrService)
	af := uint16(unix.AF_INET)
	if key.Addr.Is6() {
		af = unix.AF_INET6
	}
	b = nlcodec.AppendU16(b, ipvsSvcAttrAF, af)
	if key.FWMark != 0 {
		b = nlcodec.AppendU32(b, ipvsSvcAttrFWMark, key.FWMark)
	} else {
		b = nlcodec.AppendU16(b, ipvsSvcAttrProtocol, uint16(key.Proto))
		a16 := key.Addr.As16()
		if key.Addr.Is4() {
			b = nlcodec.AppendAttr(b, ipvsSvcAttrAddr, a16[12:])
		} else {
			b = nlcodec.AppendAttr(b, ipvsSvcAttrAddr, a16[:])
		}
		b = nlcodec.AppendBE16(b, ipvsSvcAttrPort, key.Port)
	}
	b = nlcodec.EndNest(b, n)
	nlcodec.FinishMsg(b)
	d.req = b
	if _, err := unix.Write(d.fd, b); err != nil {
		return fmt.Errorf("probe %s: %w", key, err)
	}
	for done := false; !done; {
		n, err := unix.Read(d.fd, d.rbuf)
		if err != nil {
			return fmt.Errorf("probe %s: %w", key, err)
		}
		err = nlcodec.EachMsg(d.rbuf[:n], func(m nlcodec.Msg) error {
			switch {
			case m.Seq != d.seq || done:
				return nil
			case m.Type == unix.NLMSG_DONE:
				done = true
				return nil
			case m.Type == unix.NLMSG_ERROR:
				done = true
				return nlcodec.AckError(m.Payload)
			}
			attrs, err := nlcodec.PayloadAttrs(m.Payload)
			if err != nil {
				return err
			}
			return nlcodec.EachAttr(attrs, func(a nlcodec.Attr) error {
				if a.Type != ipvsAttrDest {
					return nil
				}
				return destOf(a.Value, af, fn)
			})
		})
		if err != nil {
			return fmt.Errorf("probe %s: %w", key, err)
		}
	}
	return nil
}

// destOf reads one real server's attributes and hands it to fn; its address is of the
// service's family af unless the kernel says otherwise.
func destOf(attrs []byte, af uint16, fn func(model.RSKey, uint32)) error {
	var raw []byte
	var fam, port uint16
	var weight uint32
	err := nlcodec.EachAttr(attrs, func(a nlcodec.Attr) (err error) {
		switch a.Type {
		case ipvsDestAttrAddr:
			raw = a.Value
		case ipvsDestAttrPort:
			port, err = a.BE16()
		case ipvsDestAttrWeight:
			weight, err = a.U32()
		case ipvsDestAttrAddrFam:
			fam, err = a.U16()
		}
		return err
	})
	if err != nil {
		return err
	}
	if fam == 0 {
		fam = af
	}
	var addr netip.Addr
	switch {
	case fam == unix.AF_INET6 && len(raw) >= 16:
		addr = netip.AddrFrom16([16]byte(raw[:16]))
	case fam == unix.AF_INET && len(raw) >= 4:
		addr = netip.AddrFrom4([4]byte(raw[:4]))
	default:
		return fmt.Errorf("real server address of %d bytes in family %d", len(raw), fam)
	}
	fn(model.RSKey{Addr: addr, Port: port}, weight)
	return nil
}

func (d *destReader) close() { unix.Close(d.fd) }
