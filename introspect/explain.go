package introspect

import (
	"fmt"
	"io"
	"strings"
)

// FindService returns the Service NAMESPACE/NAME of the document, or nil.
func (d *Document) FindService(namespace, name string) *Service {
	for i := range d.Services {
		if s := &d.Services[i]; s.Namespace == namespace && s.Name == name {
			return s
		}
	}
	return nil
}

// WriteExplain prints why traffic to one Service goes where it goes: its VIPs and how they
// are bound, its virtual servers and real servers, each endpoint's choice with the
// reason, its set entries and the rules that match them, and the problems its Events
// report.
func WriteExplain(w io.Writer, s *Service) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Service %s/%s\n", s.Namespace, s.Name)
	fmt.Fprintf(&b, "  scheduler: %s", s.Scheduler)
	if len(s.Flags) > 0 {
		fmt.Fprintf(&b, " (flags %s)", strings.Join(s.Flags, ","))
	}
	if s.Persistence > 0 {
		fmt.Fprintf(&b, ", persistent %ds (sessionAffinity ClientIP)", s.Persistence)
	}
	b.WriteString("\n")
	section(&b, "problems (Warning Events on the Service)", len(s.Problems), "none: every annotation and field was accepted")
	for _, p := range s.Problems {
		fmt.Fprintf(&b, "    %s: %s\n", p.Reason, p.Message)
	}
	section(&b, "VIPs", len(s.VIPs), "none")
	for _, v := range s.VIPs {
		fmt.Fprintf(&b, "    %-40s %-12s %s\n", v.Address, v.Kind, bindingText(v.Binding))
	}
	section(&b, "virtual servers", len(s.VirtualServers), "none")
	for _, vs := range s.VirtualServers {
		fmt.Fprintf(&b, "    %s %s  port %q, %s, %s, %d real servers\n", vs.Protocol, vs.Address, vs.PortName, vs.Kind, vs.Scheduler, len(vs.Reals))
		for _, r := range vs.Reals {
			fmt.Fprintf(&b, "      -> %s weight %d%s\n", r.Address, r.Weight, realNote(r))
		}
	}
	section(&b, "endpoints", len(s.Endpoints), "none: no EndpointSlice lists an endpoint for its ports")
	for _, e := range s.Endpoints {
		fmt.Fprintf(&b, "    port %-10q policy %-7s %-40s %-24s %s\n", e.PortName, e.Policy, e.Address, orDash(e.Pod)+" on "+orDash(e.Node), choiceText(e))
	}
	writeHealthCheck(&b, s.HealthCheck)
	section(&b, "ipset entries", len(s.SetEntries), "none")
	for _, e := range s.SetEntries {
		fmt.Fprintf(&b, "    %s\n", e)
	}
	section(&b, "iptables rules that match those sets (shared by every Service)", len(s.Rules), "none")
	for _, r := range s.Rules {
		fmt.Fprintf(&b, "    %s\n", r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func section(b *strings.Builder, title string, n int, empty string) {
	if n == 0 {
		fmt.Fprintf(b, "  %s: %s\n", title, empty)
		return
	}
	fmt.Fprintf(b, "  %s:\n", title)
}

func bindingText(binding string) string {
	switch binding {
	case BoundDummy:
		return "bound to kube-ipvs0"
	case BoundNodeAddr:
		return "the node's own address (not bound)"
	case BoundNodeIP:
		return "node IP (NodePort)"
	}
	return binding
}

func realNote(r Real) string {
	var parts []string
	if r.Pod != "" {
		parts = append(parts, "pod "+r.Pod)
	}
	if r.Draining {
		parts = append(parts, fmt.Sprintf("draining, %gs left", r.DrainSecondsLeft))
	}
	if len(parts) == 0 {
		return ""
	}
	return "  (" + strings.Join(parts, ", ") + ")"
}

func choiceText(e Endpoint) string {
	switch {
	case e.Chosen && e.Why != "":
		return "chosen: " + e.Why
	case e.Chosen:
		return "chosen"
	}
	return "not chosen: " + e.Why
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeHealthCheck shows the Service's backend check and each endpoint's state: why an
// endpoint a slice calls ready may still be at weight 0.
func writeHealthCheck(b *strings.Builder, hc *HealthCheck) {
	if hc == nil {
		return
	}
	fmt.Fprintf(b, "  health check from this node: %s every %gs, timeout %gs, %d passes to come back, %d failures to go out\n",
		hc.Probe, hc.IntervalSeconds, hc.TimeoutSeconds, hc.HealthyThreshold, hc.UnhealthyThreshold)
	for _, c := range hc.Endpoints {
		line := fmt.Sprintf("    %-40s %-9s checks %d", c.Address, c.State, c.Checks)
		if c.LastError != "" {
			line += " last error: " + c.LastError
		}
		b.WriteString(line + "\n")
	}
}
