package dataplane

import "github.com/kube-ipvs/kube-ipvs/model"

// WeightReader is implemented by a dataplane whose kernel weighs real servers (the IPVS
// mode). After a restart the controller reads the weights of the health-checked Services'
// virtual servers once, so that an endpoint a check had taken out stays out until a check
// says otherwise, instead of getting weight 1 back before the first verdict.
type WeightReader interface {
	// RealWeights reads the kernel's real servers and weights of those virtual servers;
	// one the kernel lacks is left out.
	RealWeights(keys []model.VSKey) (map[model.VSKey]map[model.RSKey]uint32, error)
}
