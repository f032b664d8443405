package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/kube-ipvs/kube-ipvs/introspect"
)

const explainHelp = `Usage: kube-ipvs explain NAMESPACE/NAME [flags]

Explains, from the running proxy's desired state (its --state-socket), why traffic to a
Service goes where it goes: each VIP and how it is bound, its virtual servers and real
servers (draining ones with their time left), which endpoints were chosen and why every
other one was not (not ready, terminating, traffic policy Local on another node,
topology hints), its ipset entries and the fixed iptables rules that match them, its
scheduler, and the problems (rejected annotations, conflicts) its Warning Events report.

Exit status: 0 explained; 1 the proxy does not handle that Service (or ignores it); 2
usage error; 3 the state socket did not answer (the reason is on stderr).

Flags:
`

func runExplain(args []string, stdout, stderr io.Writer) int {
	var socket, output string
	fs := pflag.NewFlagSet("explain", pflag.ContinueOnError)
	fs.StringVarP(&output, "output", "o", "text", "output format: text or json")
	fs.StringVar(&socket, "state-socket", introspect.DefaultSocket, "the running proxy's state socket (its --state-socket)")
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stdout, explainHelp+fs.FlagUsages()) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	ns, name, ok := strings.Cut(fs.Arg(0), "/")
	if fs.NArg() != 1 || !ok || ns == "" || name == "" || (output != "text" && output != "json") {
		fmt.Fprintf(stderr, "kube-ipvs explain: want one NAMESPACE/NAME and -o text or json (got %q, -o %q)\n", fs.Args(), output)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), stateDeadline)
	defer cancel()
	doc, err := introspect.Fetch(ctx, socket)
	if err != nil {
		fmt.Fprintf(stderr, "kube-ipvs explain: %v\n", err)
		return exitNoState
	}
	svc := doc.FindService(ns, name)
	if svc == nil {
		fmt.Fprintf(stderr, "kube-ipvs explain: the proxy on node %s has no Service %s/%s (absent, headless, ExternalName, or another proxy's)\n", doc.Node, ns, name)
		return exitKernel
	}
	if output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(svc)
	} else {
		err = introspect.WriteExplain(stdout, svc)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kube-ipvs explain: %v\n", err)
		return exitKernel
	}
	return 0
}
