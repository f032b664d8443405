package proxy

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// schedulers are the IPVS schedulers a Service may ask for. The names are the kernel's:
// module ip_vs_<name>.
var schedulers = []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "mh", "twos"}

// Schedulers returns the scheduler names the annotation accepts (a copy: callers such as
// flag validation may keep or sort it).
func Schedulers() []string { return slices.Clone(schedulers) }

// builtinDefaultScheduler is used when Config.DefaultScheduler is empty; it matches the
// `--scheduler` default.
const builtinDefaultScheduler = "rr"

// schedulerFlag is one word of the scheduler-flags annotation: the scheduler it belongs to
// and the service flag bit it sets. sh and mh share the two bits.
type schedulerFlag struct {
	name      string
	scheduler string
	bit       uint32
}

var schedulerFlags = []schedulerFlag{
	{"sh-fallback", "sh", model.FlagSchedFallbk},
	{"sh-port", "sh", model.FlagSchedPort},
	{"mh-fallback", "mh", model.FlagSchedFallbk},
	{"mh-port", "mh", model.FlagSchedPort},
}

const acceptedFlagsText = "sh-fallback, sh-port (scheduler sh), mh-fallback, mh-port (scheduler mh)"

// scheduler returns the scheduler of svc: its annotation if valid and available, else the
// default, with a Problem saying why the annotation was not used.
func scheduler(svc *v1.Service, cfg *Config, probs *problems) string {
	def := cfg.DefaultScheduler
	if def == "" {
		def = builtinDefaultScheduler
	}
	raw, name, ok := annotatedScheduler(svc)
	switch {
	case !ok:
		return def
	case cfg.NoSchedulers:
		probs.add(ReasonSchedulerIgnored, "annotation %s %s has no effect: this node runs the iptables fallback proxier, which balances randomly",
			AnnotationScheduler, quoteValue(raw))
		return def
	case !slices.Contains(schedulers, name):
		probs.add(ReasonInvalidScheduler, "annotation %s %s is not an IPVS scheduler (accepted: %s); using %q instead",
			AnnotationScheduler, quoteValue(raw), strings.Join(schedulers, ", "), def)
		return def
	case cfg.UnavailableSchedulers[name]:
		probs.add(ReasonSchedulerUnavailable, "annotation %s %s: the kernel has no module ip_vs_%s, so this node cannot use it; using %q instead",
			AnnotationScheduler, quoteValue(raw), name, def)
		return def
	}
	return name
}

// annotatedScheduler reads svc's scheduler annotation: raw as written, name as it is
// matched (trimmed, lower case). ok is false when the annotation is absent or blank, which
// means the default scheduler.
func annotatedScheduler(svc *v1.Service) (raw, name string, ok bool) {
	raw = svc.Annotations[AnnotationScheduler]
	name = strings.ToLower(strings.TrimSpace(raw))
	return raw, name, name != ""
}

// schedulerFlagBits returns the flag bits the scheduler-flags annotation asks for, checked
// against sched, the scheduler actually used. Any bad word voids the whole annotation: a
// half-applied list would make behaviour depend on which word had the typo.
func schedulerFlagBits(svc *v1.Service, sched string, probs *problems) uint32 {
	raw, ok := svc.Annotations[AnnotationSchedulerFlags]
	if !ok {
		return 0
	}
	var bits uint32
	var bad []string
	for item := range strings.SplitSeq(raw, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		i := slices.IndexFunc(schedulerFlags, func(f schedulerFlag) bool { return f.name == item })
		switch {
		case i < 0:
			bad = append(bad, fmt.Sprintf("%s is not a scheduler flag", quoteValue(item)))
		case schedulerFlags[i].scheduler != sched:
			bad = append(bad, fmt.Sprintf("%q needs scheduler %s but the Service uses %s", item, schedulerFlags[i].scheduler, sched))
		default:
			bits |= schedulerFlags[i].bit
		}
	}
	if len(bad) > 0 {
		probs.add(ReasonInvalidSchedulerFlags, "annotation %s %s: %s (accepted: %s); no scheduler flags are applied",
			AnnotationSchedulerFlags, quoteValue(raw), strings.Join(bad, "; "), acceptedFlagsText)
		return 0
	}
	return bits
}
