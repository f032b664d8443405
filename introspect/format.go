package introspect

import (
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
)

// TextOptions choose the columns of WriteText, as ipvsadm's options do.
type TextOptions struct {
	Stats, Rate bool // counters (--stats) or rates (--rate) instead of weights and connections
	Wide        bool // also each endpoint's node and each VIP's binding
}

// counterHeads are the column heads of --stats and --rate, as ipvsadm's.
var (
	statsHeads = []string{"Conns", "InPkts", "OutPkts", "InBytes", "OutBytes"}
	rateHeads  = []string{"CPS", "InPPS", "OutPPS", "InBPS", "OutBPS"}
)

// WriteText prints rows as `ipvsadm -Ln` does, with each virtual server's Service, port
// name and kind and each real server's pod, and a last column marking drift.
func WriteText(w io.Writer, rows []Row, o TextOptions) error {
	aw, fw := len("LocalAddress:Port"), len("Flags")
	for i := range rows {
		r := &rows[i]
		_, flags := rowSpec(r)
		fw = max(fw, len(flags))
		aw = max(aw, len(vsAddress(r.Key)))
		for _, rr := range r.Reals {
			aw = max(aw, len(rr.RS.String())+3)
		}
	}
	var b strings.Builder
	head := fmt.Sprintf("Prot %-*s %-9s %-*s %s", aw, "LocalAddress:Port", "Scheduler", fw, "Flags", strings.Join(vsHeads(o), " "))
	b.WriteString(strings.TrimRight(head, " ") + "\n")
	fmt.Fprintf(&b, "  -> %-*s %s\n", aw, "RemoteAddress:Port", strings.Join(realHeads(o), " "))
	for i := range rows {
		writeRow(&b, &rows[i], aw, fw, o)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func vsHeads(o TextOptions) []string {
	h := []string{fmt.Sprintf("%-30s %-12s", "Service", "Kind")}
	if o.Wide {
		h = append(h, fmt.Sprintf("%-12s", "Binding"))
	}
	if c := counterHeadsOf(o); c != nil {
		h = append(h, counterCols(c))
	}
	return h
}

func realHeads(o TextOptions) []string {
	var h []string
	if c := counterHeadsOf(o); c != nil {
		h = append(h, counterCols(c))
	} else {
		h = append(h, fmt.Sprintf("%-7s %-6s %-10s %-9s", "Forward", "Weight", "ActiveConn", "InActConn"))
	}
	if o.Wide {
		return append(h, fmt.Sprintf("%-20s %s", "Endpoint", "Node"))
	}
	return append(h, "Endpoint")
}

func counterHeadsOf(o TextOptions) []string {
	switch {
	case o.Rate:
		return rateHeads
	case o.Stats:
		return statsHeads
	}
	return nil
}

func counterCols(cols []string) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = fmt.Sprintf("%10s", c)
	}
	return strings.Join(parts, " ")
}

func counterValues(c ipvs.Counters, o TextOptions) string {
	v := []uint64{c.Conns, c.PacketsIn, c.PacketsOut, c.BytesIn, c.BytesOut}
	if o.Rate {
		v = []uint64{c.CPS, c.PPSIn, c.PPSOut, c.BPSIn, c.BPSOut}
	}
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = fmt.Sprintf("%10d", n)
	}
	return strings.Join(parts, " ")
}

func writeRow(b *strings.Builder, r *Row, aw, fw int, o TextOptions) {
	sched, flags := rowSpec(r)
	cols := []string{fmt.Sprintf("%-30s %-12s", rowService(r), rowKind(r))}
	if o.Wide {
		cols = append(cols, fmt.Sprintf("%-12s", rowBinding(r)))
	}
	if o.Stats || o.Rate {
		var c ipvs.Counters
		if r.Kernel != nil {
			c = r.Kernel.Stats
		}
		cols = append(cols, counterValues(c, o))
	}
	line := fmt.Sprintf("%-4s %-*s %-9s %-*s %s", vsProto(r.Key), aw, vsAddress(r.Key), sched, fw, flags, strings.Join(cols, " "))
	b.WriteString(strings.TrimRight(withDrift(line, r.Drift), " ") + "\n")
	for i := range r.Reals {
		writeReal(b, &r.Reals[i], aw, o)
	}
}

func writeReal(b *strings.Builder, rr *RealRow, aw int, o TextOptions) {
	var cols []string
	k := rr.Kernel
	if k == nil {
		k = &ipvs.TableReal{Forward: "-"}
		if rr.Want != nil {
			k.Weight = rr.Want.Weight
		}
	}
	if o.Stats || o.Rate {
		cols = append(cols, counterValues(k.Stats, o))
	} else {
		cols = append(cols, fmt.Sprintf("%-7s %-6d %-10d %-9d", k.Forward, k.Weight, k.ActiveConns, k.InactiveConns))
	}
	ep, node := "-", "-"
	if w := rr.Want; w != nil {
		if w.Pod != "" {
			ep = w.Pod
		}
		if w.Draining {
			ep = fmt.Sprintf("draining, %s left", strconv.FormatFloat(w.DrainSecondsLeft, 'f', -1, 64)+"s")
		}
		if w.Node != "" {
			node = w.Node
		}
	}
	if o.Wide {
		ep = fmt.Sprintf("%-20s %s", ep, node)
	}
	cols = append(cols, ep)
	line := fmt.Sprintf("  -> %-*s %s", aw, rr.RS, strings.Join(cols, " "))
	b.WriteString(strings.TrimRight(withDrift(line, rr.Drift), " ") + "\n")
}

func withDrift(line, drift string) string {
	if drift == "" {
		return line
	}
	return strings.TrimRight(line, " ") + "  ! " + drift
}

// rowSpec is the scheduler and the flag text of a row: the kernel's, or the wanted one
// for a missing virtual server.
func rowSpec(r *Row) (string, string) {
	var sched string
	var flags []string
	var persist uint32
	switch {
	case r.Kernel != nil:
		sched = r.Kernel.Scheduler
		flags = proxy.FlagNames(sched, r.Kernel.Flags)
		if r.Kernel.Flags&model.FlagPersistent != 0 {
			persist = r.Kernel.Timeout
		}
	case r.Want != nil:
		sched, flags, persist = r.Want.Scheduler, r.Want.Flags, r.Want.Persistence
	}
	if persist != 0 {
		flags = append(flags, "persistent "+strconv.Itoa(int(persist)))
	}
	if len(flags) == 0 {
		return sched, ""
	}
	return sched, strings.Join(flags, ",")
}

func rowService(r *Row) string {
	switch {
	case r.Svc != nil:
		name := r.Svc.Namespace + "/" + r.Svc.Name
		if r.Want.PortName != "" {
			name += ":" + r.Want.PortName
		}
		return name
	case r.Owner == OwnerForeign:
		return "(foreign)"
	}
	return "-"
}

func rowKind(r *Row) string {
	if r.Want != nil {
		return r.Want.Kind
	}
	return "-"
}

func rowBinding(r *Row) string {
	if r.Svc == nil {
		return "-"
	}
	for _, v := range r.Svc.VIPs {
		if a, err := netip.ParseAddr(v.Address); err == nil && a == r.Key.Addr {
			return v.Binding
		}
	}
	return "-"
}

func addrPort(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

// vsProto and vsAddress are a virtual server's first two columns, as ipvsadm -Ln prints
// them: "FWM" and "MARK" (with "IPv6" for that family) for a firewall-mark one.
func vsProto(k model.VSKey) string {
	if k.FWMark != 0 {
		return "FWM"
	}
	return k.Proto.String()
}

func vsAddress(k model.VSKey) string {
	if k.FWMark == 0 {
		return addrPort(k.Addr, k.Port)
	}
	if k.Addr.Is6() {
		return fmt.Sprintf("%d IPv6", k.FWMark)
	}
	return fmt.Sprintf("%d", k.FWMark)
}
