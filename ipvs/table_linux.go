package ipvs

import (
	"fmt"
	"net/netip"
	"sort"

	mobyipvs "github.com/moby/ipvs"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// forwardNames are the forwarding methods (IP_VS_CONN_F_FWD_MASK of the connection
// flags), as ipvsadm names them.
var forwardNames = map[uint32]string{0: "Masq", 1: "Local", 2: "Tunnel", 3: "Route", 4: "Bypass"}

// ReadTable reads every virtual server with its real servers, connection counts, counters
// and rates, on a handle of its own (a read only: `kube-ipvs list` runs next to the
// proxy), firewall-mark ones included (model.FWMarkKey).
// Sorted by address, protocol, port; real servers by address, port.
func ReadTable() ([]TableVS, error) {
	var out []TableVS
	err := withMoby(func(h *mobyipvs.Handle) error {
		svcs, err := h.GetServices()
		if err != nil {
			return fmt.Errorf("list virtual servers: %w", err)
		}
		for _, s := range svcs {
			key, ok := keyOf(s)
			if !ok {
				continue
			}
			vs := TableVS{Key: key, Scheduler: s.SchedName, Flags: s.Flags, Timeout: s.Timeout, Stats: counters(mobyipvs.DstStats(s.Stats))}
			dests, err := h.GetDestinations(s)
			if err != nil {
				return fmt.Errorf("list real servers of %s: %w", key, err)
			}
			for _, d := range dests {
				if r, ok := tableReal(d); ok {
					vs.Reals = append(vs.Reals, r)
				}
			}
			sort.Slice(vs.Reals, func(i, j int) bool { return model.RSKeyLess(vs.Reals[i].RS, vs.Reals[j].RS) })
			out = append(out, vs)
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return model.VSKeyLess(out[i].Key, out[j].Key) })
	return out, err
}

func tableReal(d *mobyipvs.Destination) (TableReal, bool) {
	addr, ok := netip.AddrFromSlice(d.Address)
	if !ok {
		return TableReal{}, false
	}
	fwd := forwardNames[d.ConnectionFlags&0x7]
	if fwd == "" {
		fwd = fmt.Sprintf("fwd-%d", d.ConnectionFlags&0x7)
	}
	return TableReal{RS: model.RSKey{Addr: addr.Unmap(), Port: d.Port}, Weight: uint32(max(d.Weight, 0)), Forward: fwd,
		ActiveConns: uint32(max(d.ActiveConnections, 0)), InactiveConns: uint32(max(d.InactiveConnections, 0)),
		Stats: counters(d.Stats)}, true
}

func counters(s mobyipvs.DstStats) Counters {
	return Counters{Conns: uint64(s.Connections), PacketsIn: uint64(s.PacketsIn), PacketsOut: uint64(s.PacketsOut),
		BytesIn: s.BytesIn, BytesOut: s.BytesOut, CPS: uint64(s.CPS), PPSIn: uint64(s.PPSIn), PPSOut: uint64(s.PPSOut),
		BPSIn: uint64(s.BPSIn), BPSOut: uint64(s.BPSOut)}
}
