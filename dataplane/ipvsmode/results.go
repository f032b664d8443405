package ipvsmode

import (
	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
)

// addrResult turns a kube-ipvs0 reconciler result into the dataplane's.
func addrResult(r dummyif.Result) dataplane.Result {
	res := dataplane.Result{Writes: dataplane.Writes{Addresses: r.Writes}, Err: r.Err}
	res.AddOp(dataplane.SubsystemAddress, dataplane.OpAdd, r.Added)
	res.AddOp(dataplane.SubsystemAddress, dataplane.OpDelete, r.Removed)
	for a, e := range r.Errors {
		res.FailIP(a, e)
	}
	n := len(r.Errors)
	if r.Err != nil {
		n++
	}
	res.AddFailures(dataplane.SubsystemAddress, n)
	return res
}

// ipvsResult turns an IPVS reconciler result into the dataplane's (the UDP clean-up it
// asks for is done by afterIPVS).
func ipvsResult(r ipvs.Result) dataplane.Result {
	res := dataplane.Result{Writes: dataplane.Writes{IPVS: r.Writes}, Err: r.Err}
	for op, n := range r.Ops {
		res.AddOp(dataplane.SubsystemIPVS, op, n)
	}
	for k, e := range r.Errors {
		res.FailVS(k, e)
	}
	n := len(r.Errors)
	if r.Err != nil {
		n++
	}
	res.AddFailures(dataplane.SubsystemIPVS, n)
	return res
}
