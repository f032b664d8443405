package introspect

import (
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/ipvs"
)

// Listing is `kube-ipvs list -o json`.
type Listing struct {
	// StateError says why there are no names and no drift marks ("" when the state
	// endpoint answered).
	StateError     string     `json:"stateError,omitempty"`
	Node           string     `json:"node,omitempty"`
	VirtualServers []ListedVS `json:"virtualServers"`
}

// ListedVS is one Row in JSON.
type ListedVS struct {
	Protocol    string   `json:"protocol"`
	Address     string   `json:"address"`
	Scheduler   string   `json:"scheduler"`
	Flags       []string `json:"flags,omitempty"`
	Persistence uint32   `json:"persistence,omitempty"`
	Namespace   string   `json:"namespace,omitempty"`
	Service     string   `json:"service,omitempty"`
	PortName    string   `json:"portName,omitempty"`
	Kind        string   `json:"kind,omitempty"`
	Binding     string   `json:"binding,omitempty"`
	// Owner is kube-ipvs, foreign or unknown (no state document).
	Owner    string         `json:"owner"`
	InKernel bool           `json:"inKernel"`
	Drift    string         `json:"drift,omitempty"`
	Stats    *ipvs.Counters `json:"stats,omitempty"`
	Reals    []ListedReal   `json:"reals"`
}

// ListedReal is one RealRow in JSON.
type ListedReal struct {
	Address          string         `json:"address"`
	Forward          string         `json:"forward,omitempty"`
	Weight           uint32         `json:"weight"`
	ActiveConns      uint32         `json:"activeConns"`
	InactiveConns    uint32         `json:"inactiveConns"`
	Pod              string         `json:"pod,omitempty"`
	Node             string         `json:"node,omitempty"`
	Draining         bool           `json:"draining,omitempty"`
	DrainSecondsLeft float64        `json:"drainSecondsLeft,omitempty"`
	InKernel         bool           `json:"inKernel"`
	Drift            string         `json:"drift,omitempty"`
	Stats            *ipvs.Counters `json:"stats,omitempty"`
}

// ToListing converts rows for -o json.
func ToListing(rows []Row, doc *Document, stateErr error) Listing {
	l := Listing{VirtualServers: []ListedVS{}}
	if stateErr != nil {
		l.StateError = stateErr.Error()
	}
	if doc != nil {
		l.Node = doc.Node
	}
	for i := range rows {
		r := &rows[i]
		sched, _ := rowSpec(r)
		v := ListedVS{Protocol: r.Key.Proto.String(), Address: netip.AddrPortFrom(r.Key.Addr, r.Key.Port).String(),
			Scheduler: sched, Owner: r.Owner, InKernel: r.Kernel != nil, Drift: r.Drift, Reals: []ListedReal{}}
		if r.Want != nil {
			v.Flags, v.Persistence, v.PortName, v.Kind = r.Want.Flags, r.Want.Persistence, r.Want.PortName, r.Want.Kind
			v.Namespace, v.Service, v.Binding = r.Svc.Namespace, r.Svc.Name, rowBinding(r)
		}
		if r.Kernel != nil {
			st := r.Kernel.Stats
			v.Stats = &st
		}
		for j := range r.Reals {
			v.Reals = append(v.Reals, listedReal(&r.Reals[j]))
		}
		l.VirtualServers = append(l.VirtualServers, v)
	}
	return l
}

func listedReal(rr *RealRow) ListedReal {
	out := ListedReal{Address: rr.RS.String(), InKernel: rr.Kernel != nil, Drift: rr.Drift}
	if w := rr.Want; w != nil {
		out.Weight, out.Pod, out.Node, out.Draining, out.DrainSecondsLeft = w.Weight, w.Pod, w.Node, w.Draining, w.DrainSecondsLeft
	}
	if k := rr.Kernel; k != nil {
		st := k.Stats
		out.Forward, out.Weight, out.ActiveConns, out.InactiveConns, out.Stats = k.Forward, k.Weight, k.ActiveConns, k.InactiveConns, &st
	}
	return out
}
