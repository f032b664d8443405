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
	res.AddFailures(dataplane.SubsystemAddress, failedCalls(len(r.Errors), r.Err))
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
	res.AddFailures(dataplane.SubsystemIPVS, failedCalls(len(r.Errors), r.Err))
	return res
}

// failedCalls is how many kernel calls a reconciler's result reports failed: one per key it
// names, and one more for an error of the whole call (a failed dump, say).
func failedCalls(perKey int, err error) int {
	if err != nil {
		return perKey + 1
	}
	return perKey
}
