package bench

import (
	"fmt"
	"io"
)

// splitGate separates the runs made with the foreground gate setting most runs had (the
// report's tables) from those made with the other (compared in their own section). On a
// tie the gate on wins, as in production.
func splitGate(all []*Result) (main, other []*Result) {
	on := 0
	for _, r := range all {
		if r.GateOf() == "on" {
			on++
		}
	}
	mainSetting := "on"
	if 2*on < len(all) {
		mainSetting = "off"
	}
	for _, r := range all {
		if r.GateOf() == mainSetting {
			main = append(main, r)
		} else {
			other = append(other, r)
		}
	}
	return main, other
}

// writeGate compares the churn with and without the foreground gate, for each N and binding
// that ran both ways in the boot.
func writeGate(w io.Writer, main, other []*Result) {
	type pair struct{ on, off *Result }
	var pairs []pair
	for _, o := range other {
		m := resultOf(main, o.N, o.BindingOf())
		if m == nil || m.Churn == nil || o.Churn == nil {
			continue
		}
		pr := pair{on: m, off: o}
		if m.GateOf() == "off" {
			pr = pair{on: o, off: m}
		}
		pairs = append(pairs, pr)
	}
	if len(pairs) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## The foreground gate\n\n")
	p("The controller raises a gate while a change is due or being applied, and the repair\n")
	p("cycle's background listings (the IPVS table, the ipsets) park at it between datagrams\n")
	p("(package `internal/foreground`). The same churn, in the same boot, with the gate and\n")
	p("without it (a nil gate: the listings only yield the processor between datagrams):\n\n")
	p("| Services | VIP binding | gate | changes | repair cycles (each) | p50 | p90 | p99 | max | during cycles: p99 (n) | idle median | p99 / idle |\n")
	p("|---:|---|---|---:|---|---:|---:|---:|---:|---|---:|---:|\n")
	for _, pr := range pairs {
		for _, r := range []*Result{pr.on, pr.off} {
			c := r.Churn
			pc := Percentiles(c.Latencies)
			during, _ := c.DuringCycles()
			pd := Percentiles(during)
			var cys string
			for i, cy := range c.Cycles {
				if i > 0 {
					cys += ", "
				}
				cys += ms(cy.Seconds)
			}
			idle := idleMedian(r)
			p("| %s | %s | %s | %s | %d: %s | %s | %s | %s | %s | %s (%d) | %s | %.1fx |\n", commas(r.N), r.BindingOf(), r.GateOf(),
				commas(c.Changes), len(c.Cycles), cys, ms(pc.P50), ms(pc.P90), ms(pc.P99), ms(pc.Max), ms(pd.P99), len(during), ms(idle), pc.P99/idle)
		}
	}
	p("\n")
	for _, pr := range pairs {
		on, off := Percentiles(pr.on.Churn.Latencies).P99, Percentiles(pr.off.Churn.Latencies).P99
		p("- %s (%s): p99 %s with the gate, %s without (without / with: %.2f).\n", label(pr.on.N), pr.on.BindingOf(), ms(on), ms(off), off/on)
	}
	p("\n")
}
