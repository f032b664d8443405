package ipvsmode

import "github.com/kube-ipvs/kube-ipvs/model"

// RealWeights reads the kernel's real servers and weights of those virtual servers (the
// controller seeds its health checks from them after a restart).
func (d *Dataplane) RealWeights(keys []model.VSKey) (map[model.VSKey]map[model.RSKey]uint32, error) {
	return d.p.IPVS.KernelWeights(keys)
}
