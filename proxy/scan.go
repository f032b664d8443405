package proxy

import (
	"fmt"
	"slices"
	"sort"

	v1 "k8s.io/api/core/v1"
)

// ServiceSchedulers is what a set of Services asks of the kernel's IPVS schedulers, for a
// check before the proxy runs (kube-ipvs preflight).
type ServiceSchedulers struct {
	// Handled is how many of the Services the proxy would handle (BuildService's rule:
	// another proxy's, ExternalName, headless and not yet addressed ones are not).
	Handled int
	// Schedulers maps each valid scheduler named by an AnnotationScheduler annotation to
	// the handled Services ("namespace/name", sorted) naming it.
	Schedulers map[string][]string
	// Invalid lists annotations that name no IPVS scheduler, `namespace/name: "value"`,
	// sorted; those Services get the default scheduler.
	Invalid []string
}

// ScanServices reads which of svcs the proxy handles and the schedulers their annotations
// ask for, by the rules BuildService applies.
func ScanServices(svcs []v1.Service) ServiceSchedulers {
	s := ServiceSchedulers{Schedulers: map[string][]string{}}
	for i := range svcs {
		svc := &svcs[i]
		if ignored(svc) {
			continue
		}
		s.Handled++
		raw, name, ok := annotatedScheduler(svc)
		if !ok {
			continue
		}
		id := svc.Namespace + "/" + svc.Name
		if !slices.Contains(schedulers, name) {
			s.Invalid = append(s.Invalid, fmt.Sprintf("%s: %q", id, raw))
			continue
		}
		s.Schedulers[name] = append(s.Schedulers[name], id)
	}
	for _, v := range s.Schedulers {
		sort.Strings(v)
	}
	sort.Strings(s.Invalid)
	return s
}
