package ipvsmode

import (
	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/model"
)

var _ dataplane.WeightReader = (*Dataplane)(nil)

// RealWeights reads the kernel's weights of those virtual servers (dataplane.WeightReader).
func (d *Dataplane) RealWeights(keys []model.VSKey) (map[model.VSKey]map[model.RSKey]uint32, error) {
	return d.p.IPVS.KernelWeights(keys)
}
