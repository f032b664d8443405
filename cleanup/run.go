package cleanup

import (
	"errors"

	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
)

// Run removes the plan's objects in order and returns them, each failed one with its
// Error set; the others were removed. An object already gone counts as removed. A failure
// does not stop the cleanup: every other object is still tried.
func (p *Plan) Run() []Object {
	out := make([]Object, len(p.Objects))
	copy(out, p.Objects)
	for _, s := range p.steps {
		err := s.do()
		if err == nil || alreadyGone(err) {
			continue
		}
		for i := s.first; i < s.first+s.n; i++ {
			out[i].Error = err.Error()
		}
	}
	return out
}

// Failed returns the objects whose removal failed.
func Failed(objs []Object) []Object {
	var out []Object
	for _, o := range objs {
		if o.Error != "" {
			out = append(out, o)
		}
	}
	return out
}

// alreadyGone reports an error that says the object no longer exists: someone removed it
// between the listing and the removal, which is what the cleanup wanted.
func alreadyGone(err error) bool {
	return errors.Is(err, ipvs.ErrNotFound) || errors.Is(err, ipset.ErrSetNotFound) ||
		errors.Is(err, dummyif.ErrLinkNotFound)
}
