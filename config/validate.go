package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/proxy"
	"github.com/kube-ipvs/kube-ipvs/sysctl"
)

// Parsed holds what Validate read out of the options, in the types the proxy uses.
type Parsed struct {
	LogLevel slog.Level
	// NodePortPrimary is "primary" in --nodeport-addresses: the Node object's InternalIPs
	// get NodePorts, and so do the node addresses in NodePortAddresses, the CIDRs (masked).
	// Neither (or "all") means every usable node address.
	NodePortPrimary   bool
	NodePortAddresses []netip.Prefix
	// LocalInterface is the iptables input interface match of pod traffic for
	// --detect-local-mode BridgeInterface ("br0") or InterfaceNamePrefix ("veth+"); "" for
	// the CIDR modes.
	LocalInterface string
	// LocalFromNode is --detect-local-mode NodeCIDR: the local CIDRs are the Node object's
	// spec.podCIDRs, not ClusterCIDRs.
	LocalFromNode bool
	// MasqueradeMark is the mark of --iptables-masquerade-bit.
	MasqueradeMark uint32
	// PrimaryNodeIP is --bind-address, unless unspecified (then invalid).
	PrimaryNodeIP netip.Addr
	ExcludeCIDRs  []netip.Prefix // masked
	ClusterCIDRs  []netip.Prefix // masked
	ServiceCIDRs  []netip.Prefix // masked, none /0
	// NodePortMin and NodePortMax are the bounds of --service-node-port-range.
	NodePortMin, NodePortMax uint16
	VIPBinding               dummyif.Binding
	RateEstimation           sysctl.RateEstimation
	Conntrack                sysctl.Conntrack
}

// DebugVerbosity is the -v from which debug messages are logged: kube-proxy logs its
// per-sync and per-object detail at V(4).
const DebugVerbosity = 4

// Validate checks the options, naming the flag of the first bad one, and returns their
// parsed values. It is the one check of the run settings, whether they came from the
// command line or from the configuration file; the file reader applies the same rules to
// each field, only to name the field in its errors.
func (o *Options) Validate() (Parsed, error) {
	var p Parsed
	for _, parse := range []func(*Parsed) error{
		o.parseLogging, o.parseProcess, o.parseSync, o.parseAddresses, o.parseLocalDetection, o.parseNode, o.parseKernel,
	} {
		if err := parse(&p); err != nil {
			return p, err
		}
	}
	return p, nil
}

// parseLogging reads the log level, verbosity and format.
func (o *Options) parseLogging(p *Parsed) error {
	var err error
	if p.LogLevel, err = parseLevel(o.LogLevel); err != nil {
		return fmt.Errorf("--log-level=%q: %v", o.LogLevel, err)
	}
	if err := checkVerbosity(o.Verbosity); err != nil {
		return fmt.Errorf("-v=%d: %v", o.Verbosity, err)
	}
	if o.Verbosity >= DebugVerbosity {
		p.LogLevel = min(p.LogLevel, slog.LevelDebug)
	}
	if err := checkLogFormat(o.LoggingFormat); err != nil {
		return fmt.Errorf("--logging-format=%q: %v", o.LoggingFormat, err)
	}
	return nil
}

// parseProcess reads what the process sets once at start (OOM score, conntrack limits) and
// how it runs (--init-only, --once).
func (o *Options) parseProcess(p *Parsed) error {
	var err error
	if err := checkOOMScoreAdj(o.OOMScoreAdj); err != nil {
		return fmt.Errorf("--oom-score-adj=%d: %v", o.OOMScoreAdj, err)
	}
	if p.Conntrack, err = o.Conntrack.parse(); err != nil {
		return err
	}
	if o.InitOnly && o.Once {
		return errors.New("--init-only and --once: pick one (--init-only programs no Service)")
	}
	if o.CleanupKubeProxy && o.Once {
		// --once exits after its sync; the cleanup would have no time to retry.
		return fmt.Errorf("--%s needs a running proxy, not --once: after a --once sync, run `kube-ipvs cleanup --kube-proxy`", FlagCleanupKubeProxy)
	}
	return nil
}

// parseSync checks the default scheduler and the sync and repair timing.
func (o *Options) parseSync(*Parsed) error {
	if err := CheckScheduler(o.Scheduler); err != nil {
		return fmt.Errorf("--scheduler=%q: %v", o.Scheduler, err)
	}
	if err := checkPositive(o.SyncPeriod); err != nil {
		return fmt.Errorf("--sync-period=%s: %v", o.SyncPeriod, err)
	}
	if o.MinSyncPeriod < 0 || o.MinSyncPeriod > o.SyncPeriod {
		return fmt.Errorf("--min-sync-period=%s: must be between 0 and --sync-period", o.MinSyncPeriod)
	}
	if o.RepairStep < 0 {
		return fmt.Errorf("--repair-step=%d: must be 0 or more", o.RepairStep)
	}
	if o.ConfigSyncPeriod < 0 {
		return fmt.Errorf("--config-sync-period=%s: must be 0 or more", o.ConfigSyncPeriod)
	}
	return nil
}

// parseAddresses reads the node-port addresses and the excluded, cluster and Service CIDRs.
func (o *Options) parseAddresses(p *Parsed) error {
	var err error
	flagName := func(name string) func(int) string { return func(int) string { return "--" + name } }
	if p.NodePortPrimary, p.NodePortAddresses, err = nodePortAddresses(o.NodePortAddresses, flagName("nodeport-addresses")); err != nil {
		return err
	}
	if p.ExcludeCIDRs, err = cidrs(o.ExcludeCIDRs, flagName(FlagExcludeCIDRs)); err != nil {
		return err
	}
	if p.ClusterCIDRs, err = cidrs(o.ClusterCIDRs, flagName(FlagClusterCIDR)); err != nil {
		return err
	}
	if p.ServiceCIDRs, err = serviceCIDRs(o.ServiceCIDRs, flagName(FlagServiceCIDR)); err != nil {
		return err
	}
	for _, s := range p.ServiceCIDRs {
		for _, c := range p.ClusterCIDRs {
			if s.Overlaps(c) {
				return fmt.Errorf("--%s=%s overlaps --%s=%s: connections to pods there would be refused", FlagServiceCIDR, s, FlagClusterCIDR, c)
			}
		}
	}
	return nil
}

// parseLocalDetection reads --detect-local-mode and the interface it may need.
func (o *Options) parseLocalDetection(p *Parsed) error {
	mode, err := detectLocalMode(o.DetectLocalMode)
	if err != nil {
		return fmt.Errorf("--detect-local-mode=%q: %v", o.DetectLocalMode, err)
	}
	switch mode {
	case LocalModeNodeCIDR:
		p.LocalFromNode = true
	case LocalModeBridgeInterface:
		if _, err := parseInterfaceName("--pod-bridge-interface", o.PodBridgeInterface); err != nil {
			return fmt.Errorf("--detect-local-mode=%s needs --pod-bridge-interface (detectLocal.bridgeInterface), a Linux interface name: %q", mode, o.PodBridgeInterface)
		}
		p.LocalInterface = o.PodBridgeInterface
	case LocalModeInterfaceNamePrefix:
		if err := checkInterfacePrefix(o.PodInterfaceNamePrefix); err != nil {
			return fmt.Errorf("--detect-local-mode=%s needs --pod-interface-name-prefix (detectLocal.interfaceNamePrefix): %q %v", mode, o.PodInterfaceNamePrefix, err)
		}
		p.LocalInterface = o.PodInterfaceNamePrefix + "+"
	}
	return nil
}

// parseNode reads the node's primary IP override and the API client's rate limits.
func (o *Options) parseNode(p *Parsed) error {
	var err error
	if p.PrimaryNodeIP, err = primaryNodeIP(o.BindAddress); err != nil {
		return fmt.Errorf("--bind-address=%q: %v", o.BindAddress, err)
	}
	if o.KubeAPIQPS < 0 || o.KubeAPIBurst < 0 {
		return fmt.Errorf("--kube-api-qps=%v --kube-api-burst=%d: must be 0 or more", o.KubeAPIQPS, o.KubeAPIBurst)
	}
	return nil
}

// parseKernel reads what shapes the kernel state: the mode, the iptables backend and mark,
// the node-port range, the VIP binding and the IPVS rate estimation.
func (o *Options) parseKernel(p *Parsed) error {
	var err error
	switch o.Mode {
	case ModeAuto, ModeIPVS, ModeIPTables:
	default:
		return fmt.Errorf("--mode=%q: use auto, ipvs or iptables", o.Mode)
	}
	switch o.IPTablesBackend {
	case "", "legacy", "nft":
	default:
		return fmt.Errorf("--iptables-backend=%q: use legacy or nft, or leave it empty to detect", o.IPTablesBackend)
	}
	if p.MasqueradeMark, err = masqueradeMark(o.MasqueradeBit); err != nil {
		return fmt.Errorf("--iptables-masquerade-bit=%d: %v", o.MasqueradeBit, err)
	}
	if p.NodePortMin, p.NodePortMax, err = portRange(o.NodePortRange); err != nil {
		return fmt.Errorf("--service-node-port-range=%q: %v", o.NodePortRange, err)
	}
	if p.VIPBinding, err = dummyif.ParseBinding(o.VIPBinding); err != nil {
		return fmt.Errorf("--vip-binding=%q: %v", o.VIPBinding, err)
	}
	if p.RateEstimation, err = sysctl.ParseRateEstimation(o.RateEstimation); err != nil {
		return fmt.Errorf("--ipvs-rate-estimation=%q: %v", o.RateEstimation, err)
	}
	return nil
}

// The rules below are each written once: Validate applies them to the options, the file
// reader (values.go) to the file's fields. Their errors say what is wrong with the value;
// the caller says where it was.

// CheckScheduler accepts the IPVS schedulers a Service or --scheduler may name.
func CheckScheduler(name string) error {
	if !slices.Contains(proxy.Schedulers(), name) {
		return fmt.Errorf("not an IPVS scheduler; use one of %s", strings.Join(proxy.Schedulers(), ", "))
	}
	return nil
}

func checkPositive(d time.Duration) error {
	if d <= 0 {
		return errors.New("must be positive")
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, errors.New("not a log level; use debug, info, warn or error")
	}
	return l, nil
}

func parseCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil {
		return p, fmt.Errorf("%q is not a CIDR (e.g. 10.0.0.0/8 or fd00::/64)", s)
	}
	return p, nil
}

// cidrs reads a list of CIDRs, masked. where(i) names entry i in an error.
func cidrs(l []string, where func(i int) string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, c := range l {
		p, err := parseCIDR(c)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", where(i), err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// serviceCIDRs reads the Service CIDRs, masked: a whole address family (/0) is refused, as
// the API server refuses it in a ServiceCIDR, since every routed connection would be.
func serviceCIDRs(l []string, where func(i int) string) ([]netip.Prefix, error) {
	out, err := cidrs(l, where)
	if err != nil {
		return nil, err
	}
	for i, p := range out {
		switch {
		case p.Bits() == 0:
			return nil, fmt.Errorf("%s: %q is a whole address family; a Service CIDR must be narrower", where(i), l[i])
		case p.Addr().Is4In6():
			return nil, fmt.Errorf("%s: %q is IPv4-mapped; write the IPv4 CIDR", where(i), l[i])
		}
	}
	return out, nil
}

// nodePortAddresses reads kube-proxy's nodePortAddresses list: CIDRs (masked) and the
// keywords "primary" (the Node object's InternalIPs) and "all" (every usable node address,
// as with an empty list), in any combination. "all" wins over everything else. "localhost"
// is refused: see NodePortAddressesLocalhost. where(i) names entry i in an error.
func nodePortAddresses(l []string, where func(i int) string) (primary bool, out []netip.Prefix, err error) {
	all := false
	for i, c := range l {
		switch strings.TrimSpace(c) {
		case NodePortAddressesPrimary:
			primary = true
			continue
		case NodePortAddressesAll:
			all = true
			continue
		case NodePortAddressesLocalhost:
			return false, nil, fmt.Errorf("%s: %q is not supported: NodePorts on loopback addresses exist only in kube-proxy's iptables and nftables modes; IPVS cannot serve them (kube-proxy's IPVS mode refuses them too): a connection from 127.0.0.1 sent on to a pod would need a masquerade of loopback sources that IPVS does not do", where(i), c)
		}
		p, err := parseCIDR(c)
		if err != nil {
			return false, nil, fmt.Errorf("%s: %v (or one of the keywords primary, all)", where(i), err)
		}
		out = append(out, p.Masked())
	}
	if all {
		return false, nil, nil
	}
	return primary, out, nil
}

func checkVerbosity(v int) error {
	if v < 0 {
		return errors.New("must be 0 or more")
	}
	return nil
}

func checkLogFormat(f string) error {
	if f != LogFormatText && f != LogFormatJSON {
		return errors.New("use text or json")
	}
	return nil
}

func checkOOMScoreAdj(v int) error {
	if v < -1000 || v > 1000 {
		return errors.New("must be between -1000 and 1000")
	}
	return nil
}

// parse checks the conntrack settings, naming the flag of a bad one.
func (c ConntrackOptions) parse() (sysctl.Conntrack, error) {
	for _, n := range []struct {
		flag string
		v    int
	}{{"conntrack-max-per-core", c.MaxPerCore}, {"conntrack-min", c.Min}} {
		if n.v < 0 || n.v > math.MaxInt32 {
			return sysctl.Conntrack{}, fmt.Errorf("--%s=%d: must be between 0 and %d", n.flag, n.v, math.MaxInt32)
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"conntrack-tcp-timeout-established", c.TCPEstablishedTimeout}, {"conntrack-tcp-timeout-close-wait", c.TCPCloseWaitTimeout},
		{"conntrack-udp-timeout", c.UDPTimeout}, {"conntrack-udp-timeout-stream", c.UDPStreamTimeout}} {
		if d.v < 0 {
			return sysctl.Conntrack{}, fmt.Errorf("--%s=%s: must not be negative", d.flag, d.v)
		}
	}
	return sysctl.Conntrack{MaxPerCore: c.MaxPerCore, Min: c.Min,
		TCPEstablishedTimeout: c.TCPEstablishedTimeout, TCPCloseWaitTimeout: c.TCPCloseWaitTimeout,
		TCPBeLiberal: c.TCPBeLiberal, UDPTimeout: c.UDPTimeout, UDPStreamTimeout: c.UDPStreamTimeout}, nil
}

// portRange reads LOW-HIGH.
func portRange(s string) (uint16, uint16, error) {
	lo, hi, ok := strings.Cut(s, "-")
	l, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
	h, err2 := strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
	if !ok || err1 != nil || err2 != nil || l == 0 {
		return 0, 0, errors.New("want LOW-HIGH with ports 1 to 65535, e.g. 30000-32767")
	}
	if l > h {
		return 0, 0, fmt.Errorf("the low port %d is above the high port %d", l, h)
	}
	return uint16(l), uint16(h), nil
}

// The modes of --detect-local-mode (kube-proxy's detectLocalMode): how traffic from this
// node's pods is told from other traffic.
const (
	LocalModeClusterCIDR         = "ClusterCIDR"         // from --cluster-cidr
	LocalModeNodeCIDR            = "NodeCIDR"            // from the Node object's spec.podCIDRs
	LocalModeBridgeInterface     = "BridgeInterface"     // arriving on --pod-bridge-interface
	LocalModeInterfaceNamePrefix = "InterfaceNamePrefix" // arriving on --pod-interface-name-prefix*
)

// detectLocalMode reads a mode; "" is ClusterCIDR, kube-proxy's default.
func detectLocalMode(s string) (string, error) {
	switch s {
	case "":
		return LocalModeClusterCIDR, nil
	case LocalModeClusterCIDR, LocalModeNodeCIDR, LocalModeBridgeInterface, LocalModeInterfaceNamePrefix:
		return s, nil
	}
	return "", fmt.Errorf("not a local traffic detection mode; use %s, %s, %s or %s",
		LocalModeClusterCIDR, LocalModeNodeCIDR, LocalModeBridgeInterface, LocalModeInterfaceNamePrefix)
}

func checkInterfacePrefix(s string) error {
	if s == "" || len(s) > 14 || strings.ContainsAny(s, "/: \t\n+") {
		return errors.New("is not the start of a Linux interface name (1 to 14 characters, no '/', ':', '+' or spaces)")
	}
	return nil
}

// masqueradeMark turns kube-proxy's masqueradeBit into the mark. Only bits 14 (kube-proxy's
// and kube-ipvs's default) and 15 are free: every other bit is part of the in-cluster marks
// (model.InClusterMark), which IPVS matches whole, so a masquerade bit there could turn a
// marked packet into another Service port's in-cluster mark.
func masqueradeMark(bit int) (uint32, error) {
	switch {
	case bit < 0 || bit > 31:
		return 0, errors.New("must be a bit number from 0 to 31")
	case bit != 14 && bit != 15:
		return 0, errors.New("kube-ipvs can use bit 14 (the default) or 15 only: bits 0 to 13 and 16 to 31 make up its in-cluster marks of externalTrafficPolicy Local ports")
	}
	return 1 << bit, nil
}

// primaryNodeIP reads --bind-address; the unspecified addresses (0.0.0.0, ::) and "" give
// the zero Addr: no override.
func primaryNodeIP(s string) (netip.Addr, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, errors.New("not an IP address")
	}
	a = a.Unmap()
	if a.IsUnspecified() {
		return netip.Addr{}, nil
	}
	return a, nil
}
