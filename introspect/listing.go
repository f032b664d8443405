package introspect

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"

	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
)

// Drift marks of Row and RealRow: how the kernel differs from what the proxy wants.
const (
	DriftUnexpected = "unexpected" // in the kernel and the proxy's, but no Service wants it
	DriftMissing    = "missing"    // wanted, not in the kernel
)

// Owners of a Row.
const (
	OwnerProxy   = "kube-ipvs"
	OwnerForeign = "foreign" // not the proxy's: another program's virtual server
	OwnerUnknown = "unknown" // no state document, so no way to tell
)

// Row is one virtual server of `kube-ipvs list`: the kernel's, the proxy's wish, or both.
type Row struct {
	Key    model.VSKey
	Kernel *ipvs.TableVS  // nil: missing from the kernel
	Want   *VirtualServer // nil: no Service wants it
	Svc    *Service       // the Service of Want
	Owner  string
	Drift  string
	Reals  []RealRow
}

// RealRow is one real server of a Row.
type RealRow struct {
	RS     model.RSKey
	Kernel *ipvs.TableReal // nil: missing from the kernel
	Want   *Real           // nil: not wanted (nor draining)
	Drift  string
}

// Merge joins the kernel's table with the document (nil: the state endpoint could not be
// read, so every row is the kernel's alone and nothing is marked). owns applies the
// ownership rule to a kernel virtual server no Service wants: only then is it drift.
func Merge(kernel []ipvs.TableVS, doc *Document, owns func(model.VSKey) bool) []Row {
	wanted := map[model.VSKey]int{}
	var rows []Row
	if doc != nil {
		for i := range doc.Services {
			s := &doc.Services[i]
			for j := range s.VirtualServers {
				vs := &s.VirtualServers[j]
				key, err := vsKey(vs)
				if err != nil {
					continue // a document this build wrote always parses
				}
				wanted[key] = len(rows)
				rows = append(rows, Row{Key: key, Want: vs, Svc: s, Owner: OwnerProxy, Drift: DriftMissing})
			}
		}
	}
	for i := range kernel {
		k := &kernel[i]
		at, ok := wanted[k.Key]
		switch {
		case ok:
			rows[at].Kernel, rows[at].Drift = k, specDrift(k, rows[at].Want)
		case doc == nil:
			rows = append(rows, Row{Key: k.Key, Kernel: k, Owner: OwnerUnknown})
		case owns(k.Key):
			rows = append(rows, Row{Key: k.Key, Kernel: k, Owner: OwnerProxy, Drift: DriftUnexpected})
		default:
			rows = append(rows, Row{Key: k.Key, Kernel: k, Owner: OwnerForeign})
		}
	}
	for i := range rows {
		rows[i].Reals = mergeReals(&rows[i])
	}
	sort.Slice(rows, func(i, j int) bool { return model.VSKeyLess(rows[i].Key, rows[j].Key) })
	return rows
}

// specDrift compares the kernel's scheduler, scheduler flags and persistence with the
// wanted ones. The fallback flag the proxy forces on sh and mh while a real server drains
// is not drift.
func specDrift(k *ipvs.TableVS, w *VirtualServer) string {
	got := proxy.FlagNames(k.Scheduler, k.Flags)
	if hasDraining(w) {
		got = slices.DeleteFunc(got, func(f string) bool { return f == k.Scheduler+"-fallback" })
	}
	want := slices.DeleteFunc(slices.Clone(w.Flags), func(f string) bool { return hasDraining(w) && f == k.Scheduler+"-fallback" })
	var persist uint32
	if k.Flags&model.FlagPersistent != 0 {
		persist = k.Timeout
	}
	switch {
	case k.Scheduler != w.Scheduler:
		return fmt.Sprintf("scheduler %s, want %s", k.Scheduler, w.Scheduler)
	case !slices.Equal(got, want):
		return fmt.Sprintf("flags %v, want %v", got, want)
	case persist != w.Persistence:
		return fmt.Sprintf("persistence %d, want %d", persist, w.Persistence)
	}
	return ""
}

func hasDraining(w *VirtualServer) bool {
	return slices.ContainsFunc(w.Reals, func(r Real) bool { return r.Draining })
}

// mergeReals pairs the kernel's real servers of a row with the wanted ones. Drift is
// marked only on rows the proxy owns and knows (a foreign or unknown row's real servers
// are whatever they are).
func mergeReals(r *Row) []RealRow {
	var out []RealRow
	at := map[model.RSKey]int{}
	if r.Want != nil {
		for i := range r.Want.Reals {
			w := &r.Want.Reals[i]
			ap, err := netip.ParseAddrPort(w.Address)
			if err != nil {
				continue
			}
			rs := model.RSKey{Addr: ap.Addr(), Port: ap.Port()}
			at[rs] = len(out)
			drift := DriftMissing
			if w.Draining {
				drift = "" // may be gone already: that is what draining ends in
			}
			out = append(out, RealRow{RS: rs, Want: w, Drift: drift})
		}
	}
	if r.Kernel != nil {
		for i := range r.Kernel.Reals {
			k := &r.Kernel.Reals[i]
			if j, ok := at[k.RS]; ok {
				out[j].Kernel, out[j].Drift = k, weightDrift(k, out[j].Want)
				continue
			}
			drift := ""
			if r.Want != nil || r.Drift == DriftUnexpected {
				drift = DriftUnexpected
			}
			out = append(out, RealRow{RS: k.RS, Kernel: k, Drift: drift})
		}
	}
	sort.Slice(out, func(i, j int) bool { return model.RSKeyLess(out[i].RS, out[j].RS) })
	return out
}

func weightDrift(k *ipvs.TableReal, w *Real) string {
	if k.Weight != w.Weight {
		return fmt.Sprintf("weight %d, want %d", k.Weight, w.Weight)
	}
	return ""
}

// vsKey parses a document virtual server's key.
func vsKey(vs *VirtualServer) (model.VSKey, error) {
	ap, err := netip.ParseAddrPort(vs.Address)
	if err != nil {
		return model.VSKey{}, err
	}
	if vs.FWMark != 0 {
		return model.FWMarkKey(vs.FWMark, ap.Addr().Is6()), nil
	}
	var proto model.Protocol
	switch vs.Protocol {
	case "TCP":
		proto = model.TCP
	case "UDP":
		proto = model.UDP
	case "SCTP":
		proto = model.SCTP
	default:
		return model.VSKey{}, fmt.Errorf("protocol %q", vs.Protocol)
	}
	return model.VSKey{Addr: ap.Addr().Unmap(), Proto: proto, Port: ap.Port()}, nil
}

// Filter selects rows by Service and address; empty fields select everything. Rows
// without a Service (foreign, or no document) pass only when neither Namespace nor
// Service is set.
type Filter struct {
	Namespace string
	// Service is NAME or NAMESPACE/NAME.
	Service string
	VIP     netip.Addr
}

// Keep reports whether the filter selects the row.
func (f Filter) Keep(r *Row) bool {
	if f.VIP.IsValid() && r.Key.Addr != f.VIP.Unmap() {
		return false
	}
	if f.Namespace == "" && f.Service == "" {
		return true
	}
	if r.Svc == nil {
		return false
	}
	if f.Namespace != "" && r.Svc.Namespace != f.Namespace {
		return false
	}
	return f.Service == "" || f.Service == r.Svc.Name || f.Service == r.Svc.Namespace+"/"+r.Svc.Name
}
