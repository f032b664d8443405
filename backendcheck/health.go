package backendcheck

// health is one endpoint's check state machine: consecutive failures take a healthy
// endpoint out once they reach the unhealthy threshold, consecutive passes bring an
// unhealthy one back once they reach the healthy threshold, and any other result resets
// the count. Only a crossing is a verdict.
type health struct {
	healthy bool
	passes  int // consecutive passes while unhealthy
	fails   int // consecutive failures while healthy
	checks  int // checks done so far
}

// observe records one check result and reports whether the endpoint changed state.
func (h *health) observe(ok bool, healthyThreshold, unhealthyThreshold int) bool {
	h.checks++
	switch {
	case h.healthy && ok:
		h.fails = 0
	case h.healthy:
		h.fails++
		if h.fails >= unhealthyThreshold {
			h.healthy, h.fails = false, 0
			return true
		}
	case ok:
		h.passes++
		if h.passes >= healthyThreshold {
			h.healthy, h.passes = true, 0
			return true
		}
	default:
		h.passes = 0
	}
	return false
}
