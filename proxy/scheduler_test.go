package proxy

import (
	"slices"
	"testing"
)

func TestSchedulersList(t *testing.T) {
	want := []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "mh", "twos"}
	got := Schedulers()
	if !slices.Equal(got, want) {
		t.Fatalf("Schedulers() = %v, want %v", got, want)
	}
	got[0] = "changed"
	if Schedulers()[0] != "rr" {
		t.Fatal("Schedulers() returns the package's own slice")
	}
}

func TestBuildServiceEachSchedulerAccepted(t *testing.T) {
	var cases []buildCase
	for _, s := range Schedulers() {
		cases = append(cases, buildCase{
			name: s, svc: service(sched(s)),
			want: []string{vs("TCP 10.0.0.1:80 " + s)}, bind: bindCIP,
		})
	}
	runBuildCases(t, cases)
}

func TestBuildServiceScheduler(t *testing.T) {
	runBuildCases(t, []buildCase{{
		name: "absent: config default",
		svc:  service(), cfg: config(defaultSched("wlc")),
		want: []string{vs("TCP 10.0.0.1:80 wlc")}, bind: bindCIP,
	}, {
		name: "empty config default: rr",
		svc:  service(), cfg: config(defaultSched("")),
		want: []string{vs("TCP 10.0.0.1:80 rr")}, bind: bindCIP,
	}, {
		name: "blank annotation: default, no problem",
		svc:  service(sched("  ")), cfg: config(defaultSched("lc")),
		want: []string{vs("TCP 10.0.0.1:80 lc")}, bind: bindCIP,
	}, {
		name: "spaces and case are normalised",
		svc:  service(sched(" MH ")),
		want: []string{vs("TCP 10.0.0.1:80 mh")}, bind: bindCIP,
	}, {
		name: "unknown: default and InvalidScheduler",
		svc:  service(sched("maglev")), cfg: config(defaultSched("wrr")),
		want:     []string{vs("TCP 10.0.0.1:80 wrr")},
		bind:     bindCIP,
		problems: []string{"InvalidScheduler"},
		msgs: []string{`annotation kube-ipvs.io/scheduler "maglev" is not an IPVS scheduler`,
			"rr, wrr, lc, wlc, lblc, lblcr, dh, sh, sed, nq, fo, ovf, mh, twos", `using "wrr" instead`},
	}, {
		name: "unavailable in the kernel: default and SchedulerUnavailable",
		svc:  service(sched("twos")), cfg: config(unavailable("twos", "mh")),
		want:     []string{vs("TCP 10.0.0.1:80 rr")},
		bind:     bindCIP,
		problems: []string{"SchedulerUnavailable"},
		msgs:     []string{`annotation kube-ipvs.io/scheduler "twos"`, "no module ip_vs_twos", `using "rr" instead`},
	}, {
		name: "unavailable check uses the normalised name",
		svc:  service(sched("MH")), cfg: config(unavailable("mh")),
		want:     []string{vs("TCP 10.0.0.1:80 rr")},
		bind:     bindCIP,
		problems: []string{"SchedulerUnavailable"},
		msgs:     []string{"no module ip_vs_mh"},
	}, {
		name: "same spec on every VS of the Service",
		svc:  service(sched("lc"), externalIPs("192.0.2.1"), ports(tcp("http", 80, 30080))), cfg: config(nodeIPs("192.168.1.10")),
		want: []string{vs("TCP 10.0.0.1:80 lc"), vs("TCP 192.0.2.1:80 lc"), vs("TCP 192.168.1.10:30080 lc")},
		bind: []string{"10.0.0.1", "192.0.2.1"},
	}})
}

func TestBuildServiceSchedulerFlags(t *testing.T) {
	accepted := "accepted: sh-fallback, sh-port (scheduler sh), mh-fallback, mh-port (scheduler mh)"
	runBuildCases(t, []buildCase{{
		name: "sh-fallback", svc: service(sched("sh"), flags("sh-fallback")),
		want: []string{vs("TCP 10.0.0.1:80 sh fallback")}, bind: bindCIP,
	}, {
		name: "sh-port", svc: service(sched("sh"), flags("sh-port")),
		want: []string{vs("TCP 10.0.0.1:80 sh port")}, bind: bindCIP,
	}, {
		name: "mh both, spaces and empty items ignored", svc: service(sched("mh"), flags(" mh-port, ,mh-fallback,")),
		want: []string{vs("TCP 10.0.0.1:80 mh fallback port")}, bind: bindCIP,
	}, {
		name: "repeated flag", svc: service(sched("mh"), flags("mh-port,mh-port")),
		want: []string{vs("TCP 10.0.0.1:80 mh port")}, bind: bindCIP,
	}, {
		name: "empty annotation: no flags, no problem", svc: service(sched("sh"), flags(" , ")),
		want: []string{vs("TCP 10.0.0.1:80 sh")}, bind: bindCIP,
	}, {
		name: "sh flags via the default scheduler", svc: service(flags("sh-port")), cfg: config(defaultSched("sh")),
		want: []string{vs("TCP 10.0.0.1:80 sh port")}, bind: bindCIP,
	}, {
		name: "unknown word: no flags at all",
		svc:  service(sched("sh"), flags("sh-port,sh-fallbak")),
		want: []string{vs("TCP 10.0.0.1:80 sh")}, bind: bindCIP,
		problems: []string{"InvalidSchedulerFlags"},
		msgs: []string{`annotation kube-ipvs.io/scheduler-flags "sh-port,sh-fallbak"`, `"sh-fallbak" is not a scheduler flag`,
			accepted, "no scheduler flags are applied"},
	}, {
		name: "flag of the wrong scheduler: no flags at all",
		svc:  service(sched("mh"), flags("mh-port,sh-port")),
		want: []string{vs("TCP 10.0.0.1:80 mh")}, bind: bindCIP,
		problems: []string{"InvalidSchedulerFlags"},
		msgs:     []string{`"sh-port" needs scheduler sh but the Service uses mh`},
	}, {
		name: "flags with a scheduler that has none",
		svc:  service(flags("mh-port")),
		want: []string{vs("TCP 10.0.0.1:80 rr")}, bind: bindCIP,
		problems: []string{"InvalidSchedulerFlags"},
		msgs:     []string{`"mh-port" needs scheduler mh but the Service uses rr`},
	}, {
		name: "every bad item named",
		svc:  service(sched("sh"), flags("x,mh-port")),
		want: []string{vs("TCP 10.0.0.1:80 sh")}, bind: bindCIP,
		problems: []string{"InvalidSchedulerFlags"},
		msgs:     []string{`"x" is not a scheduler flag; "mh-port" needs scheduler mh but the Service uses sh`},
	}, {
		name: "scheduler fell back (invalid): its flags become invalid too",
		svc:  service(sched("shh"), flags("sh-port")),
		want: []string{vs("TCP 10.0.0.1:80 rr")}, bind: bindCIP,
		problems: []string{"InvalidScheduler", "InvalidSchedulerFlags"},
		msgs:     []string{`"sh-port" needs scheduler sh but the Service uses rr`},
	}, {
		name: "scheduler fell back (unavailable): its flags become invalid too",
		svc:  service(sched("mh"), flags("mh-fallback")), cfg: config(unavailable("mh")),
		want: []string{vs("TCP 10.0.0.1:80 rr")}, bind: bindCIP,
		problems: []string{"InvalidSchedulerFlags", "SchedulerUnavailable"},
		msgs:     []string{`"mh-fallback" needs scheduler mh but the Service uses rr`},
	}, {
		name: "flags are case-sensitive words",
		svc:  service(sched("sh"), flags("SH-PORT")),
		want: []string{vs("TCP 10.0.0.1:80 sh")}, bind: bindCIP,
		problems: []string{"InvalidSchedulerFlags"},
	}, {
		name: "flags combine with persistence",
		svc:  service(sched("sh"), flags("sh-port"), clientIP(nil)),
		want: []string{vs("TCP 10.0.0.1:80 sh port persistent 10800")}, bind: bindCIP,
	}})
}
