package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// primaryResults is one result per N for the tables that do not depend on the binding: the
// address binding's (the default) where it ran, else the first there is.
func primaryResults(rs []*Result) []*Result {
	var out []*Result
	for _, r := range rs {
		if k := len(out) - 1; k >= 0 && out[k].N == r.N {
			if out[k].BindingOf() != "address" && r.BindingOf() == "address" {
				out[k] = r
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// ofBinding returns the results of one binding, in N order.
func ofBinding(rs []*Result, b string) []*Result {
	var out []*Result
	for _, r := range rs {
		if r.BindingOf() == b {
			out = append(out, r)
		}
	}
	return out
}

// bindings lists the bindings the results ran with, address first.
func bindings(rs []*Result) []string {
	var out []string
	for _, b := range []string{"address", "route"} {
		if len(ofBinding(rs, b)) > 0 {
			out = append(out, b)
		}
	}
	return out
}

func resultOf(rs []*Result, n int, b string) *Result {
	for _, r := range rs {
		if r.N == n && r.BindingOf() == b {
			return r
		}
	}
	return nil
}

// idleMedian is the median latency of one endpoint added on the idle proxy, the yardstick of
// the churn.
func idleMedian(r *Result) float64 { return Summarize(r.Latencies(KindEndpointAdd)).Median }

func writeColdStart(w io.Writer, rs []*Result) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Cold start and restart\n\n")
	p("Cold start: from `controller.Run` (informers listing everything) to the kernel holding\n")
	p("everything: every virtual server with all its real servers (read through a separate IPVS\n")
	p("socket) and the first full sync ended (every VIP, set entry and rule written); writes are\n")
	p("that sync's. Restart: the controller is stopped and a new one (new dataplane, empty caches)\n")
	p("started onto what it left, as a restarted Pod: until its first sync ended (ready), and\n")
	p("what that sync wrote (it must write nothing). Twice: first as after a crash, every virtual\n")
	p("server read back (no handover); then as after a clean stop (an upgrade), which leaves a\n")
	p("handover (`--handover-file`), so that the first sync reads back only the virtual servers it\n")
	p("does not hold as listed.\n\n")
	p("| Services | VIP binding | virtual servers | real servers | cold start | vs smallest N | IPVS writes | VIP writes | ipset writes | iptables restores | restart: ready | restart writes | restart without a handover | kernel read back |\n")
	p("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rs {
		base := ofBinding(rs, r.BindingOf())[0]
		ok := "matches"
		if len(r.Errors) > 0 {
			ok = "**" + strings.Join(r.Errors, "; ") + "**"
		}
		ready, rw := "-", "-"
		if r.Restart != nil {
			ready, rw = ms(r.Restart.Seconds), fmt.Sprint(r.Restart.TotalWrites())
		}
		crash := "-"
		if r.RestartNoHandover != nil {
			crash = fmt.Sprintf("%s, %d writes", ms(r.RestartNoHandover.Seconds), r.RestartNoHandover.TotalWrites())
		}
		p("| %s | %s | %s | %s | %s | %.1fx | %s | %s | %s | %d | %s | %s | %s | %s |\n", commas(r.N), r.BindingOf(), commas(r.Found.VirtualServers),
			commas(r.Found.RealServers), ms(r.ColdStart.Seconds), r.ColdStart.Seconds/base.ColdStart.Seconds,
			commas(r.ColdStart.Writes["ipvs"]), commas(r.ColdStart.Writes["address"]), commas(r.ColdStart.Writes["ipset"]),
			r.ColdStart.Writes["iptables"], ready, rw, crash, ok)
	}
	p("\nSet sizes after the cold start (hairpin set `KIPVS-LOOP-BACK`, one entry per endpoint\n")
	p("and port): ")
	var sets []string
	for _, r := range primaryResults(rs) {
		sets = append(sets, fmt.Sprintf("%s entries with maxelem %s at %s", commas(r.Found.SetEntries["KIPVS-LOOP-BACK"]),
			commas(r.Found.LoopBackMaxElem), label(r.N)))
	}
	p("%s.\n\n", strings.Join(sets, ", "))
	p("Where the first full sync's time went (the sets and rules and the VIPs are written side by\n")
	p("side, and IPVS once the sets and rules are in, so the phases overlap): ")
	var phases []string
	for _, r := range rs {
		if ph := r.ColdStart.PhaseSeconds; len(ph) > 0 {
			phases = append(phases, fmt.Sprintf("at %s (%s), recomputing every Service %s, ipsets and iptables %s, VIPs %s, IPVS %s",
				label(r.N), r.BindingOf(), ms(ph["build"]), ms(ph["firewall"]), ms(ph["addresses"]), ms(ph["ipvs"])))
		}
	}
	if len(phases) == 0 {
		phases = append(phases, "not recorded")
	}
	p("%s.\n\n", strings.Join(phases, "; "))
	var rst []string
	for _, r := range rs {
		if r.Restart != nil && len(r.Restart.PhaseSeconds) > 0 {
			ph := r.Restart.PhaseSeconds
			rst = append(rst, fmt.Sprintf("at %s (%s), recomputing %s, ipsets and iptables read back %s, VIPs %s, IPVS read back %s",
				label(r.N), r.BindingOf(), ms(ph["build"]), ms(ph["firewall"]), ms(ph["addresses"]), ms(ph["ipvs"])))
		}
	}
	if len(rst) > 0 {
		p("And the restart's first sync: %s.\n\n", strings.Join(rst, "; "))
	}
}

func writeChurn(w io.Writer, rs []*Result) {
	var with []*Result
	for _, r := range rs {
		if r.Churn != nil {
			with = append(with, r)
		}
	}
	if len(with) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Churn\n\n")
	p("What an operator sees: after the restart, the controller runs with `--sync-period`'s default\n")
	p("(30 s) and `--repair-step` %d, so its periodic repair cycles run while a steady stream of\n", with[0].RepairStep)
	p("endpoint changes (%.0f a second, each an endpoint added to or removed from a one-port\n", with[0].Churn.Rate)
	p("ClusterIP Service, spread over the cluster) arrives, until two whole repair cycles ended.\n")
	p("Latency runs from the API write to the kernel showing the change (read every 2 ms through\n")
	p("a separate socket). *During cycles* are the changes sent while a repair cycle ran; *idle*\n")
	p("is the same change's median on the idle proxy (One change). A repair cycle waits\n")
	p("`--sync-period` after the last, or five times its own busy time when that is longer (a\n")
	p("fifth of the loop's time at most), so at large N the cycles are further apart.\n\n")
	p("| Services | VIP binding | changes | for | repair cycles (each, longest step) | p50 | p90 | p99 | max | during cycles: p99, max (n) | between cycles: p99 (n) | idle median | p99 / idle | writes per change |\n")
	p("|---:|---|---:|---:|---|---:|---:|---:|---:|---|---|---:|---:|---:|\n")
	for _, r := range with {
		c := r.Churn
		pc := Percentiles(c.Latencies)
		during, between := c.DuringCycles()
		pd, pb := Percentiles(during), Percentiles(between)
		var cys []string
		for _, cy := range c.Cycles {
			cys = append(cys, fmt.Sprintf("%s, %s", ms(cy.Seconds), ms(cy.LongestStep)))
		}
		total := 0
		for _, v := range c.Writes {
			total += v
		}
		perChange := math.NaN()
		if c.Changes > 0 {
			perChange = float64(total) / float64(c.Changes)
		}
		idle := idleMedian(r)
		p("| %s | %s | %s | %s | %d: %s | %s | %s | %s | %s | %s, %s (%d) | %s (%d) | %s | %.1fx | %.2f |\n", commas(r.N), r.BindingOf(), commas(c.Changes),
			ms(c.Seconds), len(c.Cycles), strings.Join(cys, "; "), ms(pc.P50), ms(pc.P90), ms(pc.P99), ms(pc.Max),
			ms(pd.P99), ms(pd.Max), len(during), ms(pb.P99), len(between), ms(idle), pc.P99/idle, perChange)
	}
	p("\nWrites per change count every kernel write during the churn: the changes' own (an added\n")
	p("endpoint: its real server and its hairpin entry; a removed one: weight 0 and the entry,\n")
	p("then the drained real server's delete) and the repair cycles', which find nothing to mend.\n\n")
}

func writeMemory(w io.Writer, rs []*Result) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	last := rs[len(rs)-1]
	p("## Memory\n\n")
	p("The bench is one process: it holds the fake clientset's store (the stand-in API server's\n")
	p("copy of every object) besides the proxy; *proxy* is the peak RSS less that store's live\n")
	p("heap. Measured before the restart (which runs a second controller in the same process).\n")
	if lim := last.GoMemLimitBytes; lim > 0 {
		p("The Go runtime runs with `GOGC=100` and a soft limit\n")
		p("`GOMEMLIMIT=%dMiB`, as `deploy/daemonset.yaml` sets it: near the limit the garbage collector\n", lim>>20)
		p("works harder instead of letting the heap grow to twice what is live. The bench process\n")
		p("raises its own limit by the store's live heap once it is filled, so that the proxy's part\n")
		p("has the headroom it has in production, where the store is the API server's.\n\n")
	} else {
		p("The Go runtime runs with its defaults\n")
		p("(`GOGC=100`, no `GOMEMLIMIT`): the heap may grow to about twice what is live.\n\n")
	}
	p("| Services | VIP binding | peak RSS (VmHWM) | of which the fake clientset's store | proxy | live Go heap after cold start | largest heap in use | guest kernel slab |\n")
	p("|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", commas(r.N), r.BindingOf(), mibs(r.PeakRSSBytes), mibs(r.HeapAPIBytes),
			mibs(proxyRSS(r)), mibs(r.HeapLiveBytes), mibs(r.HeapPeakBytes), mibs(r.KernelSlabBytes))
	}
	p("\n")
}

// proxyRSS is the peak RSS less the stand-in API server's store.
func proxyRSS(r *Result) uint64 {
	if r.HeapAPIBytes >= r.PeakRSSBytes {
		return 0
	}
	return r.PeakRSSBytes - r.HeapAPIBytes
}

func writeTargets(w io.Writer, rs []*Result) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	primary := primaryResults(rs)
	first, last := primary[0], primary[len(primary)-1]
	p("## Targets\n\n")
	p("| target | measured | |\n|---|---|---|\n")

	// Churn against idle, at every N and binding.
	var cs []string
	churnOK, any := true, false
	for _, r := range rs {
		if r.Churn == nil {
			continue
		}
		any = true
		p99, idle := Percentiles(r.Churn.Latencies).P99, idleMedian(r)
		churnOK = churnOK && p99 <= 3*idle && len(r.Churn.Cycles) >= 2
		cs = append(cs, fmt.Sprintf("%s %s: %s vs %s (%.1fx, %d cycles)", label(r.N), r.BindingOf(), ms(p99), ms(idle), p99/idle, len(r.Churn.Cycles)))
	}
	if any {
		p("| churn p99 at every N <= 3 x that N's idle one-change median, through two repair cycles | %s | %s |\n", strings.Join(cs, "; "), passFail(churnOK))
		for _, b := range bindings(rs) {
			var withChurn []*Result
			for _, r := range ofBinding(rs, b) {
				if r.Churn != nil {
					withChurn = append(withChurn, r)
				}
			}
			if len(withChurn) < 2 {
				continue
			}
			lo, hi := withChurn[0], withChurn[len(withChurn)-1]
			a, z := Percentiles(lo.Churn.Latencies).P99, Percentiles(hi.Churn.Latencies).P99
			p("| churn p99 at %s <= 2 x at %s (%s) | %s vs %s (%.2fx) | %s |\n", label(hi.N), label(lo.N), b, ms(z), ms(a), z/a, passFail(z <= 2*a))
		}
	}

	fa, la := idleMedian(first), idleMedian(last)
	p("| one endpoint change at %s costs at most 2x what it costs at %s (idle) | latency %s vs %s (%.2fx) | %s |\n",
		label(last.N), label(first.N), ms(la), ms(fa), la/fa, passFail(la <= 2*fa))

	maxW := 0
	var perN []string
	for _, r := range primary {
		m := 0
		for _, k := range []string{KindEndpointAdd, KindEndpointRemove} {
			for _, s := range r.Changes[k] {
				m = max(m, s.TotalWrites())
			}
		}
		maxW = max(maxW, m)
		perN = append(perN, fmt.Sprintf("%d at %s", m, label(r.N)))
	}
	p("| at most 3 netlink writes per endpoint change, every N | at most %s (added: IPVS 1 + ipset 1; removed: IPVS 2 with the drain's delete + ipset 1) | %s |\n",
		strings.Join(perN, ", "), passFail(maxW <= 3))

	maxNoop := 0
	for _, r := range rs {
		for _, k := range []string{KindNoop, KindFullResync} {
			for _, s := range r.Changes[k] {
				maxNoop = max(maxNoop, s.TotalWrites())
			}
		}
		if r.Restart != nil {
			maxNoop = max(maxNoop, r.Restart.TotalWrites())
		}
	}
	p("| 0 writes for a sync with nothing to change | %d: incremental, full repair and restart alike | %s |\n", maxNoop, passFail(maxNoop == 0))

	var rst []string
	restartOK, anyRestart := true, false
	for _, r := range rs {
		if r.Restart == nil {
			continue
		}
		anyRestart = true
		restartOK = restartOK && r.Restart.Seconds < r.ColdStart.Seconds
		crash := ""
		if r.RestartNoHandover != nil {
			crash = fmt.Sprintf(" (without a handover %s)", ms(r.RestartNoHandover.Seconds))
		}
		rst = append(rst, fmt.Sprintf("%s %s: %s%s vs %s", label(r.N), r.BindingOf(), ms(r.Restart.Seconds), crash, ms(r.ColdStart.Seconds)))
	}
	if anyRestart {
		p("| a restart onto matching state (a clean stop, with its handover) is ready sooner than a cold start, every N | %s | %s |\n", strings.Join(rst, "; "), passFail(restartOK))
	}

	for _, b := range bindings(rs) {
		br := ofBinding(rs, b)
		lo, hi := br[0], br[len(br)-1]
		if lo.N == hi.N {
			continue
		}
		ratio := hi.ColdStart.Seconds / lo.ColdStart.Seconds
		target := "<= 60"
		if b == "address" {
			target = "(no target: the kernel's address list is O(N²), see Limits)"
		}
		p("| cold start time(%s) / time(%s), %s binding %s | %s / %s = %.1f (N grew %.0fx) | %s |\n", label(hi.N), label(lo.N), b, target,
			ms(hi.ColdStart.Seconds), ms(lo.ColdStart.Seconds), ratio, float64(hi.N)/float64(lo.N), map[bool]string{true: passFail(ratio <= 60), false: "-"}[b == "route"])
	}

	for _, m := range []struct {
		n     int
		limit uint64
		why   string
	}{{10000, 260, "kube-proxy's nftables mode at 10k, kubernetes PR #126013"}, {50000, 700, ""}} {
		var got []string
		ok, found := true, false
		for _, r := range rs {
			if r.N != m.n {
				continue
			}
			found = true
			ok = ok && proxyRSS(r) <= m.limit<<20
			got = append(got, fmt.Sprintf("%s %s (peak RSS %s less the store's %s)", r.BindingOf(), mibs(proxyRSS(r)), mibs(r.PeakRSSBytes), mibs(r.HeapAPIBytes)))
		}
		if !found {
			continue
		}
		why := ""
		if m.why != "" {
			why = " (" + m.why + ")"
		}
		p("| peak RSS at %s, the store counted apart, <= %d MiB%s | %s | %s |\n", label(m.n), m.limit, why, strings.Join(got, "; "), passFail(ok))
	}
	p("\n")
}
