package proxy

import (
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Annotations of the opt-in backend health checks. Only AnnotationHealthCheck turns them
// on; the others tune them and are ignored without it.
const (
	AnnotationHealthCheck                   = "kube-ipvs.io/health-check"
	AnnotationHealthCheckInterval           = "kube-ipvs.io/health-check-interval"
	AnnotationHealthCheckTimeout            = "kube-ipvs.io/health-check-timeout"
	AnnotationHealthCheckHealthyThreshold   = "kube-ipvs.io/health-check-healthy-threshold"
	AnnotationHealthCheckUnhealthyThreshold = "kube-ipvs.io/health-check-unhealthy-threshold"
)

// Health-check defaults and limits. The limits keep a typo from making the checker probe
// every endpoint many times a second, or never.
const (
	DefaultCheckInterval           = 5 * time.Second
	DefaultCheckTimeout            = time.Second
	DefaultCheckHealthyThreshold   = 2
	DefaultCheckUnhealthyThreshold = 3

	minCheckInterval = time.Second
	maxCheckInterval = 5 * time.Minute
	minCheckTimeout  = 10 * time.Millisecond
	maxThreshold     = 10
	maxCheckPath     = 1024
)

// healthCheck reads svc's health-check annotations: nil when the Service has none or its
// kind is invalid (a Problem says so), else the check with every bad parameter replaced by
// its default (a Problem each). Targets are filled in later, from the real servers.
func healthCheck(svc *v1.Service, cfg *Config, probs *problems) *model.HealthCheck {
	raw, ok := svc.Annotations[AnnotationHealthCheck]
	if !ok || strings.TrimSpace(raw) == "" {
		return nil
	}
	if cfg.NoHealthChecks {
		probs.add(ReasonHealthCheckIgnored, "annotation %s %s has no effect: this node runs the iptables fallback proxier; health checks need IPVS mode",
			AnnotationHealthCheck, quoteValue(raw))
		return nil
	}
	hc := &model.HealthCheck{}
	if !parseCheckKind(raw, hc) {
		probs.add(ReasonInvalidHealthCheck, "annotation %s %s is not \"tcp\" or \"http:/path\"; the Service's endpoints are not checked",
			AnnotationHealthCheck, quoteValue(raw))
		return nil
	}
	hc.Interval = durationAnnotation(svc, AnnotationHealthCheckInterval, DefaultCheckInterval, minCheckInterval, maxCheckInterval, probs)
	hc.Timeout = durationAnnotation(svc, AnnotationHealthCheckTimeout, min(DefaultCheckTimeout, hc.Interval), minCheckTimeout, hc.Interval, probs)
	hc.HealthyThreshold = thresholdAnnotation(svc, AnnotationHealthCheckHealthyThreshold, DefaultCheckHealthyThreshold, probs)
	hc.UnhealthyThreshold = thresholdAnnotation(svc, AnnotationHealthCheckUnhealthyThreshold, DefaultCheckUnhealthyThreshold, probs)
	return hc
}

// parseCheckKind sets hc's kind (and path) from the health-check annotation's value.
func parseCheckKind(raw string, hc *model.HealthCheck) bool {
	v := strings.TrimSpace(raw)
	if strings.EqualFold(v, "tcp") {
		hc.Kind = model.CheckTCP
		return true
	}
	scheme, path, ok := strings.Cut(v, ":")
	if !ok || !strings.EqualFold(scheme, "http") || !validCheckPath(path) {
		return false
	}
	hc.Kind, hc.Path = model.CheckHTTP, path
	return true
}

// validCheckPath accepts an absolute request path of printable ASCII without spaces: it
// goes on the request line as it is.
func validCheckPath(p string) bool {
	if !strings.HasPrefix(p, "/") || len(p) > maxCheckPath {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] >= 0x7f {
			return false
		}
	}
	return true
}

// durationAnnotation reads a Go duration ("5s", "500ms") in lo..hi, or def with a Problem.
func durationAnnotation(svc *v1.Service, key string, def, lo, hi time.Duration, probs *problems) time.Duration {
	raw, ok := svc.Annotations[key]
	if !ok {
		return def
	}
	d, err := time.ParseDuration(strings.TrimSpace(raw))
	if err == nil && d >= lo && d <= hi {
		return d
	}
	probs.add(ReasonInvalidHealthCheck, "annotation %s %s is not a duration in %s..%s; using %s", key, quoteValue(raw), lo, hi, def)
	return def
}

// thresholdAnnotation reads a count in 1..maxThreshold, or def with a Problem.
func thresholdAnnotation(svc *v1.Service, key string, def int, probs *problems) int {
	raw, ok := svc.Annotations[key]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(raw))
	if err == nil && n >= 1 && n <= maxThreshold {
		return n
	}
	probs.add(ReasonInvalidHealthCheck, "annotation %s %s is not a whole number in 1..%d; using %d", key, quoteValue(raw), maxThreshold, def)
	return def
}

// applyVerdicts gives weight 0 to the real servers the checker found unhealthy, unless all
// of them are: then every one keeps its weight (fail open, with a Problem), because a
// checker must never turn a partial outage into a full one. reals is not modified.
func (pb *portBuilder) applyVerdicts(reals map[model.RSKey]uint32, is6 bool) map[model.RSKey]uint32 {
	down := pb.cfg.Unhealthy[pb.st.Name]
	if pb.health == nil || pb.proto != model.TCP || len(down) == 0 {
		return reals
	}
	n := 0
	for rs := range reals {
		if down[rs] {
			n++
		}
	}
	switch {
	case n == 0:
		return reals
	case n == len(reals):
		pb.probs.add(ReasonHealthCheckFailOpen, "all %d endpoints of port %q (%s) fail their health check; all keep their weight, as a check must not turn a partial outage into a full one",
			n, pb.sp.Name, familyName(is6))
		return reals
	}
	out := make(map[model.RSKey]uint32, len(reals))
	for rs, w := range reals {
		if down[rs] {
			w = 0
		}
		out[rs] = w
	}
	return out
}

// checkedSpec is the spec of a virtual server with those reals: sh and mh pick a bucket's
// real server even at weight 0 unless their fallback flag is set, so it is set while a
// health check holds any real server at weight 0.
func checkedSpec(spec model.VSSpec, reals map[model.RSKey]uint32) model.VSSpec {
	if spec.Scheduler != "sh" && spec.Scheduler != "mh" {
		return spec
	}
	for _, w := range reals {
		if w == 0 {
			spec.Flags |= model.FlagSchedFallbk
			break
		}
	}
	return spec
}

// checkTargets are the endpoints a Service's check probes: the real servers of its TCP
// virtual servers, whatever their weight, so that an unhealthy one is seen coming back.
func checkTargets(st *model.ServiceState) []model.RSKey {
	seen := map[model.RSKey]bool{}
	for _, vs := range st.VSes {
		if vs.Key.Proto != model.TCP {
			continue
		}
		for rs := range vs.Reals {
			seen[rs] = true
		}
	}
	out := make([]model.RSKey, 0, len(seen))
	for rs := range seen {
		out = append(out, rs)
	}
	sort.Slice(out, func(i, j int) bool { return model.RSKeyLess(out[i], out[j]) })
	return out
}

func familyName(is6 bool) string {
	if is6 {
		return "IPv6"
	}
	return "IPv4"
}
