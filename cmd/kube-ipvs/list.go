package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/spf13/pflag"

	"github.com/kube-ipvs/kube-ipvs/dataplane/ipvsmode"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/introspect"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
)

// Exit codes of list and explain besides 0 (done) and 2 (usage).
const (
	exitKernel    = 1 // the IPVS table could not be read (list), or the Service is unknown (explain)
	exitNoState   = 3 // the state endpoint did not answer: list printed the kernel table without names
	stateDeadline = 5 * time.Second
)

// listOptions are the flags of `kube-ipvs list`.
type listOptions struct {
	socket, output          string
	stats, rate             bool
	namespace, service, vip string
}

func listFlags(o *listOptions) *pflag.FlagSet {
	fs := pflag.NewFlagSet("list", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.BoolVar(&o.stats, "stats", false, "show the counters (Conns InPkts OutPkts InBytes OutBytes) instead of weights and connections, as ipvsadm --stats")
	fs.BoolVar(&o.rate, "rate", false, "show the rates (CPS InPPS OutPPS InBPS OutBPS) instead, as ipvsadm --rate")
	fs.StringVarP(&o.namespace, "namespace", "n", "", "only the virtual servers of Services in this namespace")
	fs.StringVar(&o.service, "service", "", "only the virtual servers of this Service (NAME or NAMESPACE/NAME)")
	fs.StringVar(&o.vip, "vip", "", "only the virtual servers on this address")
	fs.StringVarP(&o.output, "output", "o", "text", "output format: text, wide (adds each endpoint's node and each VIP's binding) or json")
	fs.StringVar(&o.socket, "state-socket", introspect.DefaultSocket, "the running proxy's state socket (its --state-socket)")
	documentZeroDefaults(fs)
	return fs
}

const listHelp = `Usage: kube-ipvs list [flags]

Prints this node's IPVS table as ipvsadm -Ln does, read from the kernel, with the names
the running proxy gives it (from its --state-socket): per virtual server its Service,
port name and kind, per real server its pod, and draining real servers with their time
left. The last column marks drift: "unexpected" for kernel objects of the proxy's that no
Service wants (foreign virtual servers are shown, never marked), "missing" for wanted
ones the kernel lacks, and differing weights, schedulers or flags.

Exit status: 0 printed with names; 1 the IPVS table could not be read; 2 usage error;
3 the state socket did not answer (the reason is on stderr) and the kernel table was
printed without names or drift marks.

Flags:
`

func runList(args []string, stdout, stderr io.Writer) int {
	var o listOptions
	fs := listFlags(&o)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stdout, listHelp+fs.FlagUsages()) }
	if code, ok := parseArgs(fs, args, stderr); !ok {
		return code
	}
	filter, err := o.filter()
	if err != nil {
		fmt.Fprintf(stderr, "kube-ipvs list: %v\n", err)
		return 2
	}
	kernel, err := ipvs.ReadTable()
	if err != nil {
		fmt.Fprintf(stderr, "kube-ipvs list: reading the IPVS table: %v\n", err)
		return exitKernel
	}
	ctx, cancel := context.WithTimeout(context.Background(), stateDeadline)
	defer cancel()
	doc, stateErr := introspect.Fetch(ctx, o.socket)
	code := 0
	var owns func(model.VSKey) bool
	if stateErr != nil {
		fmt.Fprintf(stderr, "kube-ipvs list: no Service names and no drift marks: %v\n", stateErr)
		code = exitNoState
	} else if owns, err = ownsFunc(doc); err != nil {
		fmt.Fprintf(stderr, "kube-ipvs list: %v\n", err)
		return exitKernel
	}
	var rows []introspect.Row
	for _, r := range introspect.Merge(kernel, doc, owns) {
		if filter.Keep(&r) {
			rows = append(rows, r)
		}
	}
	if err := writeListing(stdout, rows, doc, stateErr, o); err != nil {
		fmt.Fprintf(stderr, "kube-ipvs list: %v\n", err)
		return exitKernel
	}
	return code
}

func (o *listOptions) filter() (introspect.Filter, error) {
	f := introspect.Filter{Namespace: o.namespace, Service: o.service}
	switch o.output {
	case "text", "wide", "json":
	default:
		return f, fmt.Errorf("-o %q: use text, wide or json", o.output)
	}
	if o.stats && o.rate {
		return f, errors.New("--stats and --rate: choose one")
	}
	if o.vip != "" {
		a, err := netip.ParseAddr(o.vip)
		if err != nil {
			return f, fmt.Errorf("--vip %q: not an IP address", o.vip)
		}
		f.VIP = a
	}
	return f, nil
}

func writeListing(w io.Writer, rows []introspect.Row, doc *introspect.Document, stateErr error, o listOptions) error {
	if o.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(introspect.ToListing(rows, doc, stateErr))
	}
	return introspect.WriteText(w, rows, introspect.TextOptions{Stats: o.stats, Rate: o.rate, Wide: o.output == "wide"})
}

// ownsFunc applies the proxy's ownership rule (ipvsmode.Config.OwnsVirtualServer) with the
// settings the document carries: addresses on the dummy link or wanted there, and node
// addresses selected by the NodePort CIDRs with a port in the NodePort range.
func ownsFunc(doc *introspect.Document) (func(model.VSKey) bool, error) {
	own := doc.Ownership
	cfg := ipvsmode.Config{NodePortMin: own.NodePortMin, NodePortMax: own.NodePortMax}
	var err error
	if cfg.ExcludeCIDRs, err = parsePrefixes(own.ExcludeCIDRs); err != nil {
		return nil, err
	}
	cidrs, err := parsePrefixes(own.NodePortCIDRs)
	if err != nil {
		return nil, err
	}
	bound, err := dummyAddrs(own.DummyInterface)
	if err != nil {
		return nil, err
	}
	for _, s := range doc.Services {
		for _, v := range s.VIPs {
			if a, err := netip.ParseAddr(v.Address); err == nil && v.Binding == introspect.BoundDummy {
				bound[a] = true
			}
		}
	}
	host, err := dummyif.NodeAddresses(own.DummyInterface)
	if err != nil {
		return nil, err
	}
	node := map[netip.Addr]bool{}
	for _, a := range proxy.NodePortAddresses(cidrs, host) {
		node[a] = true
	}
	return func(k model.VSKey) bool {
		return cfg.OwnsVirtualServer(k, func(a netip.Addr) bool { return bound[a] }, func(a netip.Addr) bool { return node[a] })
	}, nil
}

// dummyAddrs are the VIPs bound through the dummy link (none when it does not exist): its
// addresses and the proxy's local routes through it.
func dummyAddrs(name string) (map[netip.Addr]bool, error) {
	nl := dummyif.NewNetlink()
	out := map[netip.Addr]bool{}
	link, err := nl.LinkByName(name)
	if errors.Is(err, dummyif.ErrLinkNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	addrs, err := nl.AddrList(link.Index)
	if err != nil {
		return nil, fmt.Errorf("reading the addresses of %s: %w", name, err)
	}
	for _, a := range addrs {
		out[a.Prefix.Addr()] = true
	}
	// With --vip-binding=route the VIPs are the proxy's local routes through the link (its
	// own route protocol); both are read, so the marks hold in either binding and mid-switch.
	routes, err := nl.LocalRouteList(link.Index)
	if err != nil {
		return nil, fmt.Errorf("reading the local routes through %s: %w", name, err)
	}
	for _, r := range routes {
		out[r.Addr()] = true
	}
	return out, nil
}

func parsePrefixes(ss []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("state document: CIDR %q: %v", s, err)
		}
		out = append(out, p)
	}
	return out, nil
}
