package proxy

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Reasons of the Problems BuildService reports. They become the Reason of a Warning Event on
// the Service, so they are stable CamelCase words.
const (
	ReasonInvalidScheduler      = "InvalidScheduler"
	ReasonSchedulerUnavailable  = "SchedulerUnavailable"
	ReasonInvalidSchedulerFlags = "InvalidSchedulerFlags"
	ReasonInvalidAffinity       = "InvalidSessionAffinityTimeout"
	ReasonInvalidIP             = "InvalidIP"
	ReasonInvalidPort           = "InvalidPort"
	ReasonUnsupportedProtocol   = "UnsupportedProtocol"
	ReasonInvalidEndpoint       = "InvalidEndpoint"
)

// problems collects what was wrong with the input. The same problem can be found several
// times (an endpoint is examined once per Service port), and EndpointSlices arrive in no
// particular order, so the list is sorted and deduplicated before it is returned: the same
// input must always give the same Events.
type problems struct {
	list []model.Problem
}

func (p *problems) add(reason, format string, args ...any) {
	p.list = append(p.list, model.Problem{Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// result returns the problems sorted by reason then message, without duplicates; nil when
// there are none.
func (p *problems) result() []model.Problem {
	if len(p.list) == 0 {
		return nil
	}
	slices.SortFunc(p.list, func(a, b model.Problem) int {
		return cmp.Or(cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.Message, b.Message))
	})
	return slices.Compact(p.list)
}
