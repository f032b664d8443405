package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/spf13/pflag"

	"github.com/kube-ipvs/kube-ipvs/cleanup"
	"github.com/kube-ipvs/kube-ipvs/config"
	"github.com/kube-ipvs/kube-ipvs/dataplane/ipvsmode"
	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/proxy"
)

// cleanupOptions are the flags of `kube-ipvs cleanup`.
type cleanupOptions struct {
	configFile        string
	dummyInterface    string
	nodePortRange     string
	excludeCIDRs      []string
	nodePortAddresses []string
	lockFile          string
	output            string
	dryRun            bool
	kubeProxy         bool
	force             bool
}

func cleanupFlags(o *cleanupOptions) *pflag.FlagSet {
	fs := pflag.NewFlagSet("cleanup", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.BoolVar(&o.dryRun, "dry-run", false, "print what would be removed, one line per object, and change nothing")
	fs.BoolVar(&o.kubeProxy, "kube-proxy", false, "remove what kube-proxy's IPVS (or iptables) mode left instead: its KUBE-* chains, the rules that jump to them and its KUBE-* ipsets; its virtual servers and kube-ipvs0, which kube-ipvs adopts, stay (safe while kube-ipvs runs)")
	fs.BoolVar(&o.force, "force", false, "remove kube-ipvs' objects even while a `kube-ipvs run` holds --lock-file")
	fs.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	fs.StringVar(&o.lockFile, "lock-file", defaultLockFile, "the file `kube-ipvs run` holds while it runs (its --lock-file)")
	fs.StringVar(&o.configFile, "config", "", "the proxy's configuration file; cleanup takes --dummy-interface, --service-node-port-range, --exclude-cidrs and --nodeport-addresses from it, flags on the command line win")
	fs.StringVar(&o.dummyInterface, "dummy-interface", config.DefaultDummyInterface, "the dummy interface that holds the Service addresses")
	fs.StringVar(&o.nodePortRange, "service-node-port-range", config.DefaultNodePortRange, "virtual servers on node IPs with a port in this range are the proxy's")
	fs.StringSliceVar(&o.excludeCIDRs, "exclude-cidrs", nil, "CIDRs whose virtual servers are never removed, comma-separated (as run's)")
	fs.StringSliceVar(&o.nodePortAddresses, "nodeport-addresses", nil, "CIDRs of the node IPs that carry NodePorts, as run's (default: every address but loopback and link-local; \"primary\" counts as the default, since cleanup reads no Node)")
	documentZeroDefaults(fs)
	return fs
}

const cleanupHelp = `Usage: kube-ipvs cleanup [flags]

Removes what kube-ipvs programmed on this node: its IPVS virtual servers (on addresses
of the dummy interface, and on node IPs with a port in the NodePort range; never in
--exclude-cidrs), the dummy interface with its addresses, and the KIPVS-* ipsets and
iptables chains with the rules that jump to them, in both address families and on both
iptables backends. Nothing else: no foreign virtual server, address, set, chain or rule.
It refuses while a kube-ipvs run is active on the node (see --lock-file), unless --force.

With --kube-proxy it removes kube-proxy's leftovers instead (see the flag).

Exit status: 0 everything selected was removed (or --dry-run), 1 something could not be
removed (each one is named on stderr) or a run is active, 2 usage error.

Flags:
`

func runCleanup(args []string, stdout, stderr io.Writer) int {
	var o cleanupOptions
	fs := cleanupFlags(&o)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stdout, cleanupHelp+fs.FlagUsages()) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	cfg, err := o.config(fs)
	if err != nil {
		fmt.Fprintf(stderr, "kube-ipvs cleanup: %v\n", err)
		return 2
	}
	if !o.dryRun && !o.kubeProxy {
		release, err := takeCleanupLock(o.lockFile)
		switch {
		case errors.Is(err, errProxyRunning) && o.force:
			fmt.Fprintf(stderr, "kube-ipvs cleanup: %v; going on because of --force\n", err)
		case errors.Is(err, errProxyRunning):
			fmt.Fprintf(stderr, "kube-ipvs cleanup: %v: stop it first (for example, remove the kube-ipvs DaemonSet's Pod from this node), or use --force\n", err)
			return 1
		case err != nil:
			fmt.Fprintf(stderr, "kube-ipvs cleanup: %v\n", err)
			return 1
		default:
			defer release()
		}
	}
	return cleanNode(cfg, o, stdout, stderr)
}

// config checks the flags (and the configuration file) and turns them into the cleanup's
// configuration, the node IPs aside.
func (o *cleanupOptions) config(fs *pflag.FlagSet) (cleanup.Config, error) {
	var cfg cleanup.Config
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.output != "text" && o.output != "json" {
		return cfg, fmt.Errorf("-o %q: use text or json", o.output)
	}
	if o.configFile != "" {
		s, _, err := config.Load(o.configFile)
		if err != nil {
			return cfg, fmt.Errorf("--config %s: %v", o.configFile, err)
		}
		for name := range s.Values {
			if fs.Lookup(name) == nil {
				delete(s.Values, name) // a proxy setting cleanup has no use for
			}
		}
		if err := config.ApplyToFlags(s, fs); err != nil {
			return cfg, fmt.Errorf("--config %s: %v", o.configFile, err)
		}
	}
	var err error
	own := ipvsmode.Config{}
	if own.NodePortMin, own.NodePortMax, err = config.FlagNodePortRange(o.nodePortRange); err != nil {
		return cfg, err
	}
	if own.ExcludeCIDRs, err = config.FlagCIDRs("exclude-cidrs", o.excludeCIDRs); err != nil {
		return cfg, err
	}
	if _, _, err = config.FlagNodePortAddresses(o.nodePortAddresses); err != nil {
		return cfg, err
	}
	if o.dummyInterface == "" {
		return cfg, errors.New("--dummy-interface must not be empty")
	}
	return cleanup.Config{Dummy: o.dummyInterface, Ownership: own, KubeProxy: o.kubeProxy}, nil
}

// cleanNode opens the kernel, plans, and removes (or, with --dry-run, prints) the plan.
func cleanNode(cfg cleanup.Config, o cleanupOptions, stdout, stderr io.Writer) int {
	k, notes, err := openKernel()
	if err == nil && !cfg.KubeProxy {
		cfg.NodeIPs, err = nodePortIPs(o)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kube-ipvs cleanup: %v\n", err)
		return 1
	}
	plan, err := cleanup.Make(cfg, k)
	if err != nil {
		fmt.Fprintf(stderr, "kube-ipvs cleanup: nothing removed: %v\n", err)
		return 1
	}
	rep := report{DryRun: o.dryRun, KubeProxy: cfg.KubeProxy, Notes: append(notes, plan.Notes...), Objects: plan.Objects}
	if !o.dryRun {
		rep.Objects = plan.Run()
	}
	if err := rep.write(stdout, stderr, o.output); err != nil {
		fmt.Fprintf(stderr, "kube-ipvs cleanup: %v\n", err)
		return 1
	}
	if len(cleanup.Failed(rep.Objects)) > 0 {
		return 1
	}
	return 0
}

// openKernel opens the node's IPVS, links, ipsets and iptables tools. A kernel without the
// ip_vs module loaded has no virtual servers: that is a note, not an error.
func openKernel() (cleanup.Kernel, []string, error) {
	k := cleanup.Kernel{Links: dummyif.NewNetlink(), Tables: iptables.NewTools(iptables.OSExec{}, iptables.Config{})}
	var notes []string
	if _, err := os.Stat("/proc/net/ip_vs"); err == nil {
		if k.IPVS, err = ipvs.NewKernel(); err != nil {
			return k, nil, fmt.Errorf("opening IPVS: %w", err)
		}
	} else {
		notes = append(notes, "IPVS: the ip_vs module is not loaded, so there are no virtual servers")
	}
	sets, err := ipset.NewKernel()
	if err != nil {
		return k, nil, fmt.Errorf("opening ipset: %w", err)
	}
	k.Sets = sets
	return k, notes, nil
}

// nodePortIPs are the node's addresses that carry NodePorts, as run selects them.
func nodePortIPs(o cleanupOptions) ([]netip.Addr, error) {
	host, err := dummyif.NodeAddresses(o.dummyInterface)
	if err != nil {
		return nil, err
	}
	primary, cidrs, _ := config.FlagNodePortAddresses(o.nodePortAddresses) // checked in config
	if primary {
		// The Node's InternalIPs are among the usable addresses; cleanup reads no Node.
		cidrs = nil
	}
	return proxy.NodePortAddresses(cidrs, host), nil
}
