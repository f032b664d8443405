package ipvs

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// A handover is what a proxy that stops cleanly leaves its successor on the same node: the
// virtual servers it had applied, real servers and all. The successor's first repair (a
// whole check) then takes the real servers of every listed virtual server whose spec is
// unchanged from it, instead of reading them back one dump each.
//
// Why: the kernel lists its real servers one virtual server per request, and under emulation
// each request cost 0.2 ms at 14,000 virtual servers and 0.7 ms at 70,000 (the service
// lookup walks a hash chain that grows with the table), so a restart at 50,000 Services spent
// a minute reading back what the proxy before it had just written, longer than a cold start
// spends writing it.
//
// What it trusts: that no one changed a real server of a virtual server whose spec stayed
// the same in the seconds between the two processes. Anything else is still read: the
// service table is listed as always, a virtual server the handover lacks or holds with
// another spec is read whole, and one the handover holds but the kernel lacks is absent.
// Drift the handover hides is the same as drift at any other time: the next repair cycle
// reads every virtual server and repairs it.

// handoverMagic starts a handover; its last byte is the format's version.
var handoverMagic = [8]byte{'K', 'I', 'P', 'V', 'S', 'H', 'O', 1}

// WriteHandover encodes vses (as Reconciler.Handover returns them) to w.
func WriteHandover(w io.Writer, vses map[model.VSKey]*model.VirtualServer) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	var b []byte
	b = append(b, handoverMagic[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(vses)))
	for key, vs := range vses {
		b = appendAddr(b, key.Addr)
		b = append(b, byte(key.Proto))
		b = binary.BigEndian.AppendUint16(b, key.Port)
		b = binary.BigEndian.AppendUint32(b, key.FWMark)
		if len(vs.Spec.Scheduler) > 255 {
			return fmt.Errorf("handover: %s: scheduler name too long", key)
		}
		b = append(b, byte(len(vs.Spec.Scheduler)))
		b = append(b, vs.Spec.Scheduler...)
		b = binary.BigEndian.AppendUint32(b, vs.Spec.Flags)
		b = binary.BigEndian.AppendUint32(b, vs.Spec.Timeout)
		b = binary.BigEndian.AppendUint32(b, uint32(len(vs.Reals)))
		for rs, weight := range vs.Reals {
			b = appendAddr(b, rs.Addr)
			b = binary.BigEndian.AppendUint16(b, rs.Port)
			b = binary.BigEndian.AppendUint32(b, weight)
		}
		if len(b) >= 1<<15 {
			if _, err := bw.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	if _, err := bw.Write(b); err != nil {
		return err
	}
	return bw.Flush()
}

func appendAddr(b []byte, a netip.Addr) []byte {
	if !a.IsValid() {
		return append(b, 0)
	}
	if a.Is4() {
		v := a.As4()
		return append(append(b, 4), v[:]...)
	}
	v := a.As16()
	return append(append(b, 16), v[:]...)
}

// ReadHandover decodes what WriteHandover wrote. Anything else, or a truncated handover, is
// an error: the caller then reads the kernel as without one.
func ReadHandover(r io.Reader) (map[model.VSKey]*model.VirtualServer, error) {
	d := handoverDecoder{r: bufio.NewReaderSize(r, 1<<16)}
	var magic [8]byte
	d.read(magic[:])
	if d.err == nil && magic != handoverMagic {
		return nil, errors.New("handover: not a handover of this version")
	}
	n := d.u32()
	if d.err != nil {
		return nil, fmt.Errorf("handover: %w", d.err)
	}
	out := make(map[model.VSKey]*model.VirtualServer, min(n, 1<<20))
	for range n {
		key := model.VSKey{Addr: d.addr(), Proto: model.Protocol(d.u8()), Port: d.u16(), FWMark: d.u32()}
		sched := make([]byte, d.u8())
		d.read(sched)
		spec := model.VSSpec{Scheduler: string(sched), Flags: d.u32(), Timeout: d.u32()}
		reals := d.u32()
		if d.err != nil {
			break
		}
		vs := &model.VirtualServer{Key: key, Spec: spec, Reals: make(map[model.RSKey]uint32, min(reals, 1<<16))}
		for range reals {
			rs := model.RSKey{Addr: d.addr(), Port: d.u16()}
			vs.Reals[rs] = d.u32()
		}
		if d.err != nil {
			break
		}
		out[key] = vs
	}
	if d.err != nil {
		return nil, fmt.Errorf("handover: %w", d.err)
	}
	return out, nil
}

// handoverDecoder reads big-endian fields, remembering the first error.
type handoverDecoder struct {
	r   *bufio.Reader
	err error
	buf [16]byte
}

func (d *handoverDecoder) read(b []byte) {
	if d.err == nil {
		_, d.err = io.ReadFull(d.r, b)
		if errors.Is(d.err, io.EOF) {
			d.err = io.ErrUnexpectedEOF
		}
	}
}

func (d *handoverDecoder) u8() uint8 { d.read(d.buf[:1]); return d.buf[0] }
func (d *handoverDecoder) u16() uint16 {
	d.read(d.buf[:2])
	return binary.BigEndian.Uint16(d.buf[:2])
}
func (d *handoverDecoder) u32() uint32 {
	d.read(d.buf[:4])
	return binary.BigEndian.Uint32(d.buf[:4])
}

func (d *handoverDecoder) addr() netip.Addr {
	switch n := d.u8(); {
	case d.err != nil, n == 0:
		return netip.Addr{}
	case n == 4:
		d.read(d.buf[:4])
		return netip.AddrFrom4([4]byte(d.buf[:4]))
	case n == 16:
		d.read(d.buf[:16])
		return netip.AddrFrom16(d.buf)
	default:
		d.err = fmt.Errorf("an address of %d bytes", n)
		return netip.Addr{}
	}
}

// Handover returns what the reconciler believes the kernel holds, for WriteHandover. The
// objects are the reconciler's (some the caller's own, see ShareDesired): encode them before
// anything is applied again.
func (r *Reconciler) Handover() map[model.VSKey]*model.VirtualServer {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[model.VSKey]*model.VirtualServer, len(r.applied))
	for key, vs := range r.applied {
		out[key] = vs
	}
	return out
}

// TakeHandover makes the next whole check (BeginWholeCheck) read the kernel with the help
// of a predecessor's handover (see the top of this file), once: the one after it reads
// everything again.
// The kernel must be able to list its services alone (every Kernel of this package can);
// one that cannot is read whole.
func (r *Reconciler) TakeHandover(vses map[model.VSKey]*model.VirtualServer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handover = vses
}

// eachWithHandover calls fn with every virtual server of the kernel's service listing, its
// real servers taken from the handover when it holds the virtual server with the same spec,
// else read (through the stepped Check's reads: the listing alone, then one virtual server
// at a time). It returns how many it read.
func eachWithHandover(k Kernel, handover map[model.VSKey]*model.VirtualServer, fn func(vs *model.VirtualServer)) (int, error) {
	listed, err := k.ListServices()
	if err != nil {
		return 0, err
	}
	read := 0
	for key, spec := range listed {
		if h := handover[key]; h != nil && h.Spec == normalizedSpec(spec) {
			fn(&model.VirtualServer{Key: key, Spec: spec, Reals: h.Reals})
			continue
		}
		reals, err := k.RealServers(key, nil) // kept: a map of its own
		if err != nil {
			return read, fmt.Errorf("list real servers of %s: %w", key, err)
		}
		read++
		fn(&model.VirtualServer{Key: key, Spec: spec, Reals: reals})
	}
	return read, nil
}

func normalizedSpec(s model.VSSpec) model.VSSpec {
	s.Flags &= model.FlagsWeManage
	return s
}

// HandoverReads is how many virtual servers the last whole check with a handover read from
// the kernel because the handover did not hold them as listed (-1: none had one).
func (r *Reconciler) HandoverReads() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.handoverRead
}
