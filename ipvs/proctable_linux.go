package ipvs

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// procTable reads every virtual server's real servers at once from /proc/net/ip_vs, the
// text table `ipvsadm -Ln` once printed. Over netlink the kernel lists real servers one
// virtual server per request, so a full repair of 70,000 virtual servers costs 70,000 round
// trips; the text table gives them all in a few large reads. It is opened once, in the
// network namespace the netlink socket was opened in (the file stays bound to it), and read
// again from the start each time.
//
// The text is a convenience, never trusted alone: its list of virtual servers must be the
// netlink dump's exactly (a table changed between reads can make the text skip or repeat
// one), and anything it cannot parse makes the caller fall back to netlink.
type procTable struct {
	f *os.File
	r *bufio.Reader
}

// procIPVSPath is the calling thread's network namespace's table (not /proc/net, which is
// the main thread's).
const procIPVSPath = "/proc/thread-self/net/ip_vs"

// procReadBytes is the size of each read: seq_file fills a read with as many whole lines as
// fit, so 70,000 virtual servers with 700,000 real servers (about 45 MB of text) take
// about 45 system calls, and the buffer is all the memory the listing keeps.
const procReadBytes = 1 << 20

// errProcTable marks a text table that cannot be used: the caller lists over netlink.
var errProcTable = errors.New("/proc/net/ip_vs unusable")

func openProcTable(path string) *procTable {
	f, err := os.Open(path)
	if err != nil {
		return nil // no table (no IPVS in /proc, or no /proc): netlink only
	}
	return &procTable{f: f, r: bufio.NewReaderSize(f, procReadBytes)}
}

func (p *procTable) close() {
	if p != nil {
		p.f.Close()
	}
}

// each reads the table from the start and calls vs with every virtual server a VSKey
// expresses, then real with each of its real servers. A firewall-mark service or one of a
// protocol we do not handle is skipped with its real servers.
func (p *procTable) each(vs func(model.VSKey) error, real func(model.RSKey, uint32)) error {
	if _, err := p.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("%w: %w", errProcTable, err)
	}
	p.r.Reset(p.f)
	return parseProcTable(p.r, vs, real)
}

func parseProcTable(r *bufio.Reader, vs func(model.VSKey) error, real func(model.RSKey, uint32)) error {
	have := false // the current virtual server is one whose real servers we report
	for lineNo := 1; ; lineNo++ {
		line, err := r.ReadSlice('\n')
		if err == io.EOF && len(line) == 0 {
			return nil
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("%w: line %d: %w", errProcTable, lineNo, err)
		}
		bad := func(what string) error {
			return fmt.Errorf("%w: line %d %q: %s", errProcTable, lineNo, bytes.TrimSpace(line), what)
		}
		f := bytes.Fields(line)
		switch {
		case lineNo <= 3 || len(f) == 0:
			// the version, and the two column headings
		case string(f[0]) == "->":
			if !have {
				break // a real server of a skipped service
			}
			if len(f) < 4 {
				return bad("too few fields for a real server")
			}
			ap, ok := parseProcAddrPort(f[1])
			if !ok {
				return bad("real server address")
			}
			w, perr := strconv.ParseUint(string(f[3]), 10, 32)
			if perr != nil {
				return bad("weight")
			}
			real(model.RSKey{Addr: ap.Addr(), Port: ap.Port()}, uint32(w))
		default:
			if len(f) < 3 {
				return bad("too few fields for a virtual server")
			}
			proto, known := procProtocols[string(f[0])]
			if !known { // FWM, or a protocol that is not ours
				have = false
				break
			}
			ap, ok := parseProcAddrPort(f[1])
			if !ok {
				return bad("virtual server address")
			}
			have = true
			if err := vs(model.VSKey{Addr: ap.Addr(), Proto: proto, Port: ap.Port()}); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}

var procProtocols = map[string]model.Protocol{"TCP": model.TCP, "UDP": model.UDP, "SCTP": model.SCTP}

// parseProcAddrPort reads the table's address forms: 0A600001:0050 (IPv4, hex, host
// order) and [fd00:0097:0000:0000:0000:0000:0000:0001]:01BB (IPv6).
func parseProcAddrPort(b []byte) (netip.AddrPort, bool) {
	i := bytes.LastIndexByte(b, ':')
	if i < 0 || len(b)-i-1 != 4 {
		return netip.AddrPort{}, false
	}
	port, err := strconv.ParseUint(string(b[i+1:]), 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	a := b[:i]
	if len(a) > 2 && a[0] == '[' && a[len(a)-1] == ']' {
		addr, err := netip.ParseAddr(string(a[1 : len(a)-1]))
		if err != nil || !addr.Is6() {
			return netip.AddrPort{}, false
		}
		return netip.AddrPortFrom(addr, uint16(port)), true
	}
	if len(a) != 8 {
		return netip.AddrPort{}, false
	}
	v, err := strconv.ParseUint(string(a), 16, 32)
	if err != nil {
		return netip.AddrPort{}, false
	}
	var ip [4]byte
	binary.BigEndian.PutUint32(ip[:], uint32(v))
	return netip.AddrPortFrom(netip.AddrFrom4(ip), uint16(port)), true
}
