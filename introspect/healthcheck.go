package introspect

import (
	"github.com/kube-ipvs/kube-ipvs/backendcheck"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// healthCheckOf is the Service's check settings with each checked endpoint's state, in the
// order of the check's targets; an endpoint the checker has not reported yet is pending.
func healthCheckOf(st *model.ServiceState, checks func(model.ServiceName) []backendcheck.EndpointState) *HealthCheck {
	hc := st.HealthCheck
	if hc == nil {
		return nil
	}
	probe := hc.Kind.String()
	if hc.Kind == model.CheckHTTP {
		probe += ":" + hc.Path
	}
	out := &HealthCheck{Probe: probe, IntervalSeconds: hc.Interval.Seconds(), TimeoutSeconds: hc.Timeout.Seconds(),
		HealthyThreshold: hc.HealthyThreshold, UnhealthyThreshold: hc.UnhealthyThreshold, Endpoints: []Check{}}
	known := map[model.RSKey]backendcheck.EndpointState{}
	if checks != nil {
		for _, e := range checks(st.Name) {
			known[e.Endpoint] = e
		}
	}
	for _, t := range hc.Targets {
		c := Check{Address: t.String(), State: "pending"}
		if e, ok := known[t]; ok {
			c.Checks, c.LastCheck, c.LastError = e.Checks, e.LastCheck, e.LastError
			switch {
			case !e.Healthy:
				c.State = "unhealthy"
			case e.Checks > 0:
				c.State = "healthy"
			}
		}
		out.Endpoints = append(out.Endpoints, c)
	}
	return out
}
