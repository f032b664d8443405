package model

import (
	"slices"
	"time"
)

// CheckKind is how a backend health check probes an endpoint.
type CheckKind uint8

// The kinds of check: a TCP connect to the endpoint's target port, or an HTTP GET there
// (2xx and 3xx are healthy).
const (
	CheckTCP CheckKind = iota + 1
	CheckHTTP
)

var checkKindNames = map[CheckKind]string{CheckTCP: "tcp", CheckHTTP: "http"}

func (k CheckKind) String() string { return EnumName(checkKindNames, k, "check-") }

// HealthCheck is a Service's opt-in backend health check, as package proxy read it from
// the Service's annotations, and the endpoints it applies to. It is plain data: the
// checker (package backendcheck) runs it, and its verdicts come back to package proxy as
// input (proxy.Config.Unhealthy), so the weights stay a pure function of the inputs.
type HealthCheck struct {
	Kind     CheckKind
	Path     string // CheckHTTP: the request path, starting with "/"
	Interval time.Duration
	Timeout  time.Duration
	// HealthyThreshold consecutive passes bring an unhealthy endpoint back;
	// UnhealthyThreshold consecutive failures take a healthy one out.
	HealthyThreshold, UnhealthyThreshold int
	// Targets are the endpoints checked, IP and target port, sorted: every real server of
	// the Service's TCP virtual servers (UDP and SCTP ports are not checked).
	Targets []RSKey
}

// SameProbe reports whether two checks probe the same way (everything but Targets).
func (h *HealthCheck) SameProbe(o *HealthCheck) bool {
	return h.Kind == o.Kind && h.Path == o.Path && h.Interval == o.Interval && h.Timeout == o.Timeout &&
		h.HealthyThreshold == o.HealthyThreshold && h.UnhealthyThreshold == o.UnhealthyThreshold
}

// Equal reports whether two checks are the same, targets included (nil equals only nil).
func (h *HealthCheck) Equal(o *HealthCheck) bool {
	if h == nil || o == nil {
		return h == o
	}
	return h.SameProbe(o) && slices.Equal(h.Targets, o.Targets)
}
