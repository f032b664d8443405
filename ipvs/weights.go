package ipvs

import (
	"errors"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// KernelWeights reads the real servers and weights of the given virtual servers from the
// kernel, one request each (virtual servers the kernel lacks are left out). It does not
// touch the cache: it is for a caller deciding weights before its first repair.
func (r *Reconciler) KernelWeights(keys []model.VSKey) (map[model.VSKey]map[model.RSKey]uint32, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[model.VSKey]map[model.RSKey]uint32, len(keys))
	for _, k := range keys {
		vs, err := ReadVirtualServer(r.k, k)
		switch {
		case errors.Is(err, ErrNotFound):
			continue
		case err != nil:
			return nil, err
		}
		out[k] = vs.Reals
	}
	return out, nil
}
