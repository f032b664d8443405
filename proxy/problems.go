package proxy

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Reasons of the Problems BuildService reports. They become the Reason of a Warning Event on
// the Service, so they are stable CamelCase words.
const (
	ReasonInvalidScheduler      = "InvalidScheduler"
	ReasonSchedulerUnavailable  = "SchedulerUnavailable"
	ReasonSchedulerIgnored      = "SchedulerIgnored"
	ReasonInvalidSchedulerFlags = "InvalidSchedulerFlags"
	ReasonInvalidAffinity       = "InvalidSessionAffinityTimeout"
	ReasonInvalidIP             = "InvalidIP"
	ReasonInvalidPort           = "InvalidPort"
	ReasonUnsupportedProtocol   = "UnsupportedProtocol"
	ReasonInvalidEndpoint       = "InvalidEndpoint"
	ReasonDuplicatePort         = "DuplicateServicePort"
	ReasonNodeAddress           = "ServiceAddressIsNodeAddress"
	ReasonInvalidHealthCheck    = "InvalidHealthCheck"
	ReasonHealthCheckIgnored    = "HealthCheckIgnored"
	// ReasonHealthCheckFailOpen: every endpoint of a port fails its health check, so all
	// keep their weight.
	ReasonHealthCheckFailOpen = "HealthCheckFailOpen"
	// ReasonVirtualServerConflict is raised by the controller, which decides between
	// Services that want the same virtual server.
	ReasonVirtualServerConflict = "VirtualServerConflict"
)

// maxMessage bounds a Problem's message: it goes into a log line and an Event, and an
// annotation value can be many kilobytes.
const maxMessage = 1024

// maxValue bounds one user-supplied value quoted in a message.
const maxValue = 64

// quoteValue quotes a user-supplied value for a message, cut to maxValue bytes (on a rune
// boundary) with its full length said.
func quoteValue(s string) string {
	if len(s) <= maxValue {
		return strconv.Quote(s)
	}
	cut := maxValue
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(s[:cut]), len(s))
}

// problems collects what was wrong with the input. The same problem can be found several
// times (an endpoint is examined once per Service port), and EndpointSlices arrive in no
// particular order, so the list is sorted and deduplicated before it is returned: the same
// input must always give the same Events.
type problems struct {
	list []model.Problem
}

func (p *problems) add(reason, format string, args ...any) {
	p.list = append(p.list, model.Problem{Reason: reason, Message: cutMessage(fmt.Sprintf(format, args...))})
}

// cutMessage bounds a message to maxMessage bytes, on a rune boundary.
func cutMessage(m string) string {
	if len(m) <= maxMessage {
		return m
	}
	cut := maxMessage - len(" [cut]")
	for cut > 0 && !utf8.RuneStart(m[cut]) {
		cut--
	}
	return m[:cut] + " [cut]"
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
