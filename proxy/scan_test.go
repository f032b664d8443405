package proxy

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestScanServices(t *testing.T) {
	named := func(ns, name string, opts ...svcOpt) v1.Service {
		s := service(opts...)
		s.Namespace, s.Name = ns, name
		return *s
	}
	svcs := []v1.Service{
		named("a", "web", sched("SH")), named("b", "api", sched(" sh ")), named("a", "db", sched("mh")),
		named("a", "rr", sched("rr")), named("a", "plain"), named("a", "blank", sched(" ")),
		named("a", "typo", sched("roundrobin")), named("a", "typo2", sched("Fastest ")),
		// Not the proxy's, whatever they ask for: BuildService returns nil for each.
		named("a", "headless", sched("lc"), clusterIPs(v1.ClusterIPNone)),
		named("a", "other", sched("dh"), label(LabelServiceProxyName, "x")),
		named("a", "dns", sched("wlc"), svcType(v1.ServiceTypeExternalName), clusterIPs()),
		named("a", "unaddressed", sched("sed"), clusterIPs()),
	}
	for _, s := range svcs[8:] {
		if BuildService(&s, nil, nil) != nil {
			t.Fatalf("%s is handled by BuildService; the test expects it not to be", s.Name)
		}
	}
	got := ScanServices(svcs)
	want := ServiceSchedulers{
		Handled:    8,
		Schedulers: map[string][]string{"sh": {"a/web", "b/api"}, "mh": {"a/db"}, "rr": {"a/rr"}},
		Invalid:    []string{`a/typo2: "Fastest "`, `a/typo: "roundrobin"`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ScanServices:\n got %+v\nwant %+v", got, want)
	}
	if got := ScanServices(nil); got.Handled != 0 || len(got.Schedulers) != 0 || got.Invalid != nil {
		t.Errorf("no Services: %+v", got)
	}
}
