package ipvsmode

import (
	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
)

// afterIPVS converts an IPVS result and clears the UDP conntrack entries it makes stale.
func (d *Dataplane) afterIPVS(r ipvs.Result) dataplane.Result {
	flows := dataplane.UDPFlows{First: r.FirstUDPReals}
	for _, x := range r.RemovedUDP {
		flows.Removed = append(flows.Removed, dataplane.RealServerRef{VS: x.VS, RS: x.RS})
	}
	dataplane.ClearUDPFlows(d.p.Conntrack, d.log, flows)
	return ipvsResult(r)
}
