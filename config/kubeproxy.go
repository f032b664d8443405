package config

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/healthcheck"
	"github.com/kube-ipvs/kube-ipvs/metrics"
)

// kpStatus is what kube-ipvs does with one field of a KubeProxyConfiguration.
type kpStatus int

const (
	// kpHonoured: applied with kube-proxy's meaning, most through a run flag.
	kpHonoured kpStatus = iota
	// kpRefused: a value other than the default stops the start with the field's name and
	// why, since kube-ipvs cannot do what it asks and silence would change the traffic.
	kpRefused
	// kpIgnored: deliberately not applied (docs/differences-from-kube-proxy.md, D9); a set
	// value is named in one warning line.
	kpIgnored
	// kpNotApplied: not applied yet; a set value is named in one warning line.
	kpNotApplied
)

var kpStatusNames = map[kpStatus]string{kpHonoured: "honoured", kpRefused: "refused",
	kpIgnored: "ignored (D9)", kpNotApplied: "not applied yet"}

// kpField is one field of kube-proxy's KubeProxyConfiguration (v1alpha1, as of Kubernetes
// 1.37, plus fields older and newer files have), by its dotted path. A path whose parent
// ("ipvs" of "ipvs.scheduler") is no field of its own is a mapping of fields; its other keys
// are unknown. kubeProxyFields lists one entry per field, sorted by path, so that an entry
// is added or changed without touching its neighbours; docs/kubeproxyconfiguration.md is
// generated from it (go generate ./config).
type kpField struct {
	path   string
	status kpStatus
	// doc says in one line what the field does in kube-ipvs (for a refused or ignored field:
	// why not). It is the field table's text and a refused field's error.
	doc string
	// flag is the run flag an honoured field sets ("" if none: read directly).
	flag string
	// read reads an honoured field.
	read func(k *kubeProxyReader, path string, v any)
	// unset lists values other than the zero ones (null, false, "", 0, 0s, [], {}) that
	// mean the default for a refused or ignored field.
	unset []string
	// keysAreSettings marks a mapping whose every key is a setting even when false
	// (featureGates: a gate turned off is a choice).
	keysAreSettings bool
}

// honour reads a field kube-ipvs applies through a run flag. As kube-proxy does, it takes a
// zero value ("", 0s, false, an empty list) as "use the default".
func honour(path, flag string, p parser, doc string) kpField {
	return kpField{path: path, status: kpHonoured, flag: flag, doc: doc,
		read: func(k *kubeProxyReader, path string, v any) {
			if val, ok := k.read(path, v, p); ok {
				k.values[flag] = val
			}
		}}
}

// exact is honour for a field whose zero value is a setting of its own (conntrack.maxPerCore
// 0 leaves the table alone, a 0s timeout the kernel's; oomScoreAdj 0 is a score): only
// null means the default.
func exact(path, flag string, p parser, doc string) kpField {
	return kpField{path: path, status: kpHonoured, flag: flag, doc: doc,
		read: func(k *kubeProxyReader, path string, v any) {
			if v == nil {
				return
			}
			val, err := p(path, v)
			if err != nil {
				k.problems = append(k.problems, err.Error())
				return
			}
			k.values[flag] = val
		}}
}

// fallback is honour for a field that yields to another one setting the same flag.
func fallback(path, flag string, p parser, doc string) kpField {
	return kpField{path: path, status: kpHonoured, flag: flag, doc: doc,
		read: func(k *kubeProxyReader, path string, v any) {
			if val, ok := k.read(path, v, p); ok {
				k.fallbacks[flag] = val
			}
		}}
}

func refuse(path, doc string, unset ...string) kpField {
	return kpField{path: path, status: kpRefused, doc: doc, unset: unset}
}

func ignore(path, doc string, unset ...string) kpField {
	return kpField{path: path, status: kpIgnored, doc: doc, unset: unset}
}

func notApplied(path string) kpField {
	return kpField{path: path, status: kpNotApplied, doc: "not applied by kube-ipvs yet: a set value is named in a warning"}
}

const (
	docOtherMode    = "a setting of kube-proxy's %s mode, which kube-ipvs is not: its own setting is %s"
	docMasquerading = "masquerade every connection to a ClusterIP (true in any of masqueradeAll, iptables.masqueradeAll or nftables.masqueradeAll)"
)

// kubeProxyFields are the fields of a KubeProxyConfiguration, sorted by path (a test checks).
var kubeProxyFields = []kpField{
	{path: "apiVersion", status: kpHonoured, doc: "must be kubeproxy.config.k8s.io/v1alpha1", read: func(*kubeProxyReader, string, any) {}},
	honour("bindAddress", "bind-address", parseBindAddress, "the node's primary IP of its family, for nodePortAddresses primary, instead of the Node object's (nothing binds to it: the name is historical)"),
	honour("bindAddressHardFail", "bind-address-hard-fail", parseBool, "a health or metrics server that cannot listen stops kube-ipvs (exit 1) instead of being logged"),
	honour("clientConnection.acceptContentTypes", "kube-api-accept-content-types", parseString, "the Accept header of API requests"),
	honour("clientConnection.burst", "kube-api-burst", parseCount, "API request burst"),
	honour("clientConnection.contentType", "kube-api-content-type", parseString, "the content type of API requests (e.g. application/vnd.kubernetes.protobuf)"),
	honour("clientConnection.kubeconfig", "kubeconfig", parseString, "the kubeconfig file (\"\": in-cluster)"),
	honour("clientConnection.qps", "kube-api-qps", parseQPS, "API requests per second"),
	honour("clusterCIDR", FlagClusterCIDR, parseClusterCIDR, "the pods' CIDRs (a dual-stack pair comma-separated): with detectLocalMode ClusterCIDR, ClusterIP traffic from outside them is masqueraded"),
	honour("configSyncPeriod", "config-sync-period", parseDuration, "how often the informers re-deliver their cached Services, EndpointSlices and Node"),
	refuse("conntrack.max", "removed from kube-proxy: size the table with conntrack.maxPerCore and conntrack.min"),
	exact("conntrack.maxPerCore", "conntrack-max-per-core", parseInt32Count, "nf_conntrack_max is raised (never lowered) to this x the node's CPUs, at most 1048576 and at least conntrack.min, and the conntrack hash size to a quarter of it (0: leave both alone)"),
	exact("conntrack.min", "conntrack-min", parseInt32Count, "the least nf_conntrack_max the table is raised to, whatever maxPerCore gives (kube-proxy 1.37 lets the 1048576 cap win over it: D11)"),
	honour("conntrack.tcpBeLiberal", "conntrack-tcp-be-liberal", parseBool, "nf_conntrack_tcp_be_liberal=1: out-of-window TCP packets are not marked invalid"),
	exact("conntrack.tcpCloseWaitTimeout", "conntrack-tcp-timeout-close-wait", parseDuration, "nf_conntrack_tcp_timeout_close_wait (0s: the kernel's)"),
	exact("conntrack.tcpEstablishedTimeout", "conntrack-tcp-timeout-established", parseDuration, "nf_conntrack_tcp_timeout_established (0s: the kernel's)"),
	honour("conntrack.udpStreamTimeout", "conntrack-udp-timeout-stream", parseDuration, "nf_conntrack_udp_timeout_stream (0s: the kernel's)"),
	honour("conntrack.udpTimeout", "conntrack-udp-timeout", parseDuration, "nf_conntrack_udp_timeout (0s: the kernel's)"),
	honour("detectLocal.bridgeInterface", "pod-bridge-interface", parseInterfaceName, "with detectLocalMode BridgeInterface: traffic arriving on this bridge is from local pods"),
	fallback("detectLocal.clusterCIDRs", FlagClusterCIDR, parseCIDRList, "the pods' CIDRs as a list (newer files); clusterCIDR wins when both are set"),
	honour("detectLocal.interfaceNamePrefix", "pod-interface-name-prefix", parseInterfacePrefix, "with detectLocalMode InterfaceNamePrefix: traffic arriving on an interface named so is from local pods"),
	honour("detectLocalMode", "detect-local-mode", parseDetectLocalMode, "how pod traffic is told from other traffic (ClusterIP traffic from elsewhere is masqueraded): ClusterCIDR, NodeCIDR (the Node's spec.podCIDRs), BridgeInterface or InterfaceNamePrefix"),
	ignore("enableProfiling", "kube-ipvs serves no /debug/pprof: profiles are taken with the Go toolchain against a test binary or the bench"),
	{path: "featureGates", status: kpIgnored, keysAreSettings: true, doc: "kube-ipvs has no feature gates: what kube-proxy 1.37 gates is either always on or not implemented"},
	honour("healthzBindAddress", "healthz-bind-address", bindAddress(defaultPort(healthcheck.DefaultProxyHealthAddress)), "the /healthz and /livez server (a bare IP gets port 10256)"),
	honour("hostnameOverride", "hostname-override", parseHostname, "this node's name, lower-cased"),
	ignore("iptables.localhostNodePorts", "NodePorts on 127.0.0.1 exist only in kube-proxy's iptables mode; IPVS cannot serve them (kube-proxy's IPVS mode does not either)"),
	{path: "iptables.masqueradeAll", status: kpHonoured, flag: FlagMasqueradeAll, doc: docMasquerading, read: (*kubeProxyReader).readMasqueradeAll},
	honour("iptables.masqueradeBit", "iptables-masquerade-bit", parseMasqueradeBit, "the packet-mark bit that asks for masquerade: 14 (the default) or 15; other bits are part of kube-ipvs's in-cluster marks"),
	ignore("iptables.minSyncPeriod", fmt.Sprintf(docOtherMode, "iptables", "ipvs.minSyncPeriod or minSyncPeriod")),
	refuse("iptables.snatNodeInternalIP", "kube-ipvs masquerades to the address of the interface the packet leaves by, never to the Node's InternalIP"),
	ignore("iptables.syncPeriod", fmt.Sprintf(docOtherMode, "iptables", "ipvs.syncPeriod or syncPeriod")),
	honour("ipvs.excludeCIDRs", FlagExcludeCIDRs, parseCIDRList, "virtual servers in these CIDRs are never deleted"),
	honour("ipvs.minSyncPeriod", "min-sync-period", parseDuration, "the shortest time between two syncs"),
	honour("ipvs.scheduler", "scheduler", parseScheduler, "the default IPVS scheduler"),
	honour("ipvs.strictARP", "strict-arp", parseBool, "arp_ignore=1 and arp_announce=2"),
	honour("ipvs.syncPeriod", "sync-period", parsePositiveDuration, "how often the kernel state is compared and repaired"),
	honour("ipvs.tcpFinTimeout", "ipvs-tcpfin-timeout", parseDuration, "IPVS timeout after a FIN (0s: the kernel's)"),
	honour("ipvs.tcpTimeout", "ipvs-tcp-timeout", parseDuration, "IPVS timeout of established TCP connections (0s: the kernel's)"),
	honour("ipvs.udpTimeout", "ipvs-udp-timeout", parseDuration, "IPVS timeout of UDP flows (0s: the kernel's)"),
	{path: "kind", status: kpHonoured, doc: "must be KubeProxyConfiguration", read: func(*kubeProxyReader, string, any) {}},
	{path: "logging.flushFrequency", status: kpHonoured, doc: "nothing to do: kube-ipvs writes each log line unbuffered as it is logged", read: func(*kubeProxyReader, string, any) {}},
	honour("logging.format", "logging-format", parseLogFormat, "text, or json: kube-proxy's JSON lines (ts, caller, msg, v, err)"),
	{path: "logging.options.json.infoBufferSize", status: kpHonoured, doc: "nothing to do: it sizes the stdout buffer of splitStream, which kube-ipvs refuses", read: func(*kubeProxyReader, string, any) {}},
	refuse("logging.options.json.splitStream", "kube-ipvs writes every log line to stderr; it cannot send info lines to stdout"),
	{path: "logging.options.text.infoBufferSize", status: kpHonoured, doc: "nothing to do: it sizes the stdout buffer of splitStream, which kube-ipvs refuses", read: func(*kubeProxyReader, string, any) {}},
	refuse("logging.options.text.splitStream", "kube-ipvs writes every log line to stderr; it cannot send info lines to stdout"),
	honour("logging.verbosity", "v", parseInt32Count, "4 or more also logs kube-ipvs's debug lines, as --log-level=debug"),
	refuse("logging.vmodule", "kube-ipvs has no per-file verbosity: use logging.verbosity"),
	{path: "masqueradeAll", status: kpHonoured, flag: FlagMasqueradeAll, doc: docMasquerading, read: (*kubeProxyReader).readMasqueradeAll},
	honour("metricsBindAddress", "metrics-bind-address", bindAddress(defaultPort(metrics.DefaultAddress)), "the Prometheus /metrics server (a bare IP gets port 10249)"),
	fallback("minSyncPeriod", "min-sync-period", parseDuration, "the shortest time between two syncs; ipvs.minSyncPeriod wins"),
	{path: "mode", status: kpHonoured, doc: "kube-ipvs programs IPVS whatever it says; any mode but ipvs is logged", read: (*kubeProxyReader).readMode},
	{path: "nftables.masqueradeAll", status: kpHonoured, flag: FlagMasqueradeAll, doc: docMasquerading, read: (*kubeProxyReader).readMasqueradeAll},
	ignore("nftables.masqueradeBit", fmt.Sprintf(docOtherMode, "nftables", "iptables.masqueradeBit")),
	ignore("nftables.minSyncPeriod", fmt.Sprintf(docOtherMode, "nftables", "ipvs.minSyncPeriod or minSyncPeriod")),
	ignore("nftables.syncPeriod", fmt.Sprintf(docOtherMode, "nftables", "ipvs.syncPeriod or syncPeriod")),
	ignore("nftables.tableName", "a setting of kube-proxy's nftables mode, which kube-ipvs is not: kube-ipvs's iptables chains are named KIPVS-*"),
	honour("nodePortAddresses", "nodeport-addresses", parseNodePortAddresses, "the node addresses that get NodePorts: CIDRs, primary (the Node's InternalIPs) and all, combined; localhost is refused"),
	exact("oomScoreAdj", "oom-score-adj", parseOOMScoreAdj, "written to /proc/self/oom_score_adj at start (default -999; below the runtime's value it needs CAP_SYS_RESOURCE)"),
	ignore("portRange", "kube-proxy ignores it too (it was the userspace proxy's)"),
	ignore("serviceProxyName", "no kube-proxy reads it; kube-ipvs, like kube-proxy, leaves every Service labelled service.kubernetes.io/service-proxy-name to another proxy"),
	ignore("showHiddenMetricsForVersion", "kube-ipvs has no hidden metrics"),
	fallback("syncPeriod", "sync-period", parsePositiveDuration, "how often the kernel state is compared and repaired; ipvs.syncPeriod wins"),
	ignore("windowsRunAsService", "Windows only"),
	ignore("winkernel", "Windows only"),
}

func init() {
	kpByPath = make(map[string]*kpField, len(kubeProxyFields))
	kpMappings = map[string]bool{}
	for i := range kubeProxyFields {
		f := &kubeProxyFields[i]
		kpByPath[f.path] = f
		for p := f.path; strings.Contains(p, "."); {
			p = p[:strings.LastIndex(p, ".")]
			kpMappings[p] = true
		}
	}
}

var (
	kpByPath   map[string]*kpField
	kpMappings map[string]bool // paths that are mappings of fields
)

// kubeProxyReader collects what a KubeProxyConfiguration says.
type kubeProxyReader struct {
	values     map[string]string
	fallbacks  map[string]string // used for flags that values leaves unset
	problems   []string
	unknown    []string
	ignored    []string
	notApplied []string
	mode       *string
	masquerade bool
}

func (k *kubeProxyReader) read(path string, v any, p parser) (string, bool) {
	if isZero(v) {
		return "", false
	}
	val, err := p(path, v)
	if err != nil {
		k.problems = append(k.problems, err.Error())
		return "", false
	}
	return val, val != "" && val != "0s" && val != "false"
}

func (k *kubeProxyReader) readMode(path string, v any) {
	mode := ""
	if v != nil {
		s, err := asString(path, v)
		if err != nil {
			k.problems = append(k.problems, err.Error())
			return
		}
		mode = s
	}
	k.mode = &mode
}

// readMasqueradeAll reads masqueradeAll at the top level, or in iptables or nftables (where
// older kube-proxy versions have it): true anywhere means true.
func (k *kubeProxyReader) readMasqueradeAll(path string, v any) {
	if v == nil {
		return
	}
	b, err := asBool(path, v)
	if err != nil {
		k.problems = append(k.problems, err.Error())
		return
	}
	k.masquerade = k.masquerade || b
}

// walk visits obj's fields in sorted order.
func (k *kubeProxyReader) walk(prefix string, obj map[string]any) {
	for _, key := range sortedKeys(obj) {
		path := key
		if prefix != "" {
			path = prefix + "." + key
		}
		v := obj[key]
		f := kpByPath[path]
		switch {
		case f != nil && f.status == kpHonoured:
			f.read(k, path, v)
		case f != nil:
			set := setLeaves(path, v, f)
			switch f.status {
			case kpRefused:
				if len(set) > 0 {
					k.problems = append(k.problems, fmt.Sprintf("%s: %s is not supported: %s", path, show(v), f.doc))
				}
			case kpIgnored:
				k.ignored = append(k.ignored, set...)
			default:
				k.notApplied = append(k.notApplied, set...)
			}
		case kpMappings[path]:
			if v == nil {
				continue
			}
			m, ok := v.(map[string]any)
			if !ok {
				k.problems = append(k.problems, fieldError(path, "%s is not a mapping of fields", show(v)).Error())
				continue
			}
			k.walk(path, m)
		default:
			k.unknown = append(k.unknown, path)
		}
	}
}

// setLeaves lists the paths under v that hold a value other than a zero one.
func setLeaves(path string, v any, f *kpField) []string {
	switch v := v.(type) {
	case map[string]any:
		var out []string
		for _, key := range sortedKeys(v) {
			if f.keysAreSettings {
				out = append(out, path+"."+key)
				continue
			}
			out = append(out, setLeaves(path+"."+key, v[key], f)...)
		}
		return out
	case string:
		if slices.Contains(f.unset, v) {
			return nil
		}
		if f.keysAreSettings && v != "" {
			return []string{path} // featureGates as the "A=true,B=false" string of old files
		}
	}
	if isZero(v) {
		return nil
	}
	return []string{path}
}

// isZero reports whether kube-proxy would read v as unset: null, false, "", "0", "0s", a
// zero number, or an empty list or mapping.
func isZero(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case string:
		return v == "" || v == "0" || v == "0s"
	case json.Number:
		f, err := v.Float64()
		return err == nil && f == 0
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}

// parseKubeProxy reads a KubeProxyConfiguration: the fields that apply to an IPVS proxy are
// honoured, a refused field that is set is an error, and every ignored field that is set
// gets a warning, all in one line.
func parseKubeProxy(doc map[string]any) (*Settings, []string, error) {
	k := &kubeProxyReader{values: map[string]string{}, fallbacks: map[string]string{}}
	k.walk("", doc)
	if len(k.problems) > 0 {
		return nil, nil, fmt.Errorf("%s", strings.Join(k.problems, "; "))
	}
	for flag, val := range k.fallbacks {
		if _, set := k.values[flag]; !set {
			k.values[flag] = val
		}
	}
	if k.masquerade {
		k.values[FlagMasqueradeAll] = "true"
	}

	var warnings []string
	switch {
	case k.mode == nil:
		warnings = append(warnings, `kube-proxy configuration: no mode, so kube-proxy ran in its default iptables mode; kube-ipvs is an IPVS proxy and programs IPVS virtual servers whatever the mode says (set mode: ipvs to silence this warning)`)
	case *k.mode == "ipvs":
	case *k.mode == "":
		warnings = append(warnings, `kube-proxy configuration: mode "" means kube-proxy's default iptables mode; kube-ipvs is an IPVS proxy and programs IPVS virtual servers whatever the mode says (set mode: ipvs to silence this warning)`)
	default:
		not := ""
		if *k.mode == "iptables" || *k.mode == "nftables" {
			not = ", not " + *k.mode + " rules,"
		}
		warnings = append(warnings, fmt.Sprintf("kube-proxy configuration: mode %q ignored: kube-ipvs is an IPVS proxy and programs IPVS virtual servers%s whatever the mode says (set mode: ipvs to silence this warning)", *k.mode, not))
	}
	if len(k.unknown) > 0 {
		warnings = append(warnings, "kube-proxy configuration: unknown fields ignored (they may come from another kube-proxy version, or be typos): "+strings.Join(k.unknown, ", "))
	}
	if len(k.ignored) > 0 {
		warnings = append(warnings, "kube-proxy configuration: fields kube-ipvs deliberately ignores (see docs/kubeproxyconfiguration.md for why): "+strings.Join(k.ignored, ", "))
	}
	if len(k.notApplied) > 0 {
		warnings = append(warnings, "kube-proxy configuration: fields set but not applied by kube-ipvs: "+strings.Join(k.notApplied, ", "))
	}
	return &Settings{Kind: KubeProxyKind, Values: k.values}, warnings, nil
}
