package proxy

import (
	v1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Session affinity limits, as the Kubernetes API defines them.
const (
	DefaultAffinityTimeout = 10800 // 3 hours: v1.DefaultClientIPServiceAffinitySeconds
	MaxAffinityTimeout     = 86400 // 1 day: the API's validation limit
)

// affinity maps ClientIP session affinity to an IPVS persistent service: the kernel then
// keeps a template per client address and sends it to the same real server until the
// timeout expires.
func affinity(svc *v1.Service, probs *problems) (flags, timeout uint32) {
	if svc.Spec.SessionAffinity != v1.ServiceAffinityClientIP {
		return 0, 0
	}
	timeout = DefaultAffinityTimeout
	if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		t := *c.ClientIP.TimeoutSeconds
		if t >= 1 && t <= MaxAffinityTimeout {
			timeout = uint32(t)
		} else {
			probs.add(ReasonInvalidAffinity, "spec.sessionAffinityConfig.clientIP.timeoutSeconds %d is outside 1..%d; using %d",
				t, MaxAffinityTimeout, DefaultAffinityTimeout)
		}
	}
	return model.FlagPersistent, timeout
}
