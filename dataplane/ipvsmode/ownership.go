package ipvsmode

import (
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// OwnsVirtualServer is the one rule that says whether a virtual server is the proxy's, for
// the periodic repair (which deletes the owned ones no Service wants) and for
// `kube-ipvs cleanup` (which deletes every owned one). A virtual server is the proxy's when
// its address is on the dummy interface (onDummy: bound, or to be bound), or when it is a
// node IP (nodeIP) with a port in the NodePort range; never when its address is in
// ExcludeCIDRs, whatever else holds. A firewall-mark virtual server is the proxy's when its
// mark has the layout of the proxy's in-cluster marks (model.IsInClusterMark).
func (c Config) OwnsVirtualServer(k model.VSKey, onDummy, nodeIP func(netip.Addr) bool) bool {
	if k.FWMark != 0 {
		return model.IsInClusterMark(k.FWMark)
	}
	for _, p := range c.ExcludeCIDRs {
		if p.Contains(k.Addr) {
			return false
		}
	}
	if onDummy(k.Addr) {
		return true
	}
	return nodeIP(k.Addr) && k.Port >= c.NodePortMin && k.Port <= c.NodePortMax
}
