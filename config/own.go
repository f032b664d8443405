package config

import (
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/healthcheck"
	"github.com/kube-ipvs/kube-ipvs/metrics"
)

// ownField is one field of KubeIPVSConfiguration and the run flag it sets.
type ownField struct {
	name  string // the YAML field, camelCase
	flag  string // the `kube-ipvs run` flag
	parse parser
}

// ownFields is the KubeIPVSConfiguration format: one field per run flag (except --once,
// --init-only and --lock-file, ways of running rather than settings), plus the settings that only
// kube-proxy files had so far. deploy/configmap.yaml documents every field.
var ownFields = []ownField{
	{"kubeconfig", "kubeconfig", parseString},
	{"manifests", "manifests", parseString},
	{"hostnameOverride", "hostname-override", parseHostname},
	{"scheduler", "scheduler", parseScheduler},
	{"syncPeriod", "sync-period", parsePositiveDuration},
	{"minSyncPeriod", "min-sync-period", parseDuration},
	{"repairStep", "repair-step", parseCount},
	{"nodePortAddresses", "nodeport-addresses", parseNodePortAddresses},
	{"serviceNodePortRange", "service-node-port-range", parsePortRange},
	{"dummyInterface", "dummy-interface", parseInterfaceName},
	{"vipBinding", "vip-binding", parseVIPBinding},
	{"gracefulTerminationTimeout", "graceful-termination-timeout", parseDuration},
	{"ipvsTCPTimeout", "ipvs-tcp-timeout", parseDuration},
	{"ipvsTCPFinTimeout", "ipvs-tcpfin-timeout", parseDuration},
	{"ipvsUDPTimeout", "ipvs-udp-timeout", parseDuration},
	{"strictARP", "strict-arp", parseBool},
	{"ipvsRateEstimation", "ipvs-rate-estimation", parseRateEstimation},
	{"healthzBindAddress", "healthz-bind-address", bindAddress(defaultPort(healthcheck.DefaultProxyHealthAddress))},
	{"metricsBindAddress", "metrics-bind-address", bindAddress(defaultPort(metrics.DefaultAddress))},
	{"stateSocket", "state-socket", parseString},
	{"handoverFile", "handover-file", parseString},
	{"logLevel", "log-level", parseLogLevel},
	{"clusterCIDR", FlagClusterCIDR, parseClusterCIDR},
	{"masqueradeAll", FlagMasqueradeAll, parseBool},
	{"excludeCIDRs", FlagExcludeCIDRs, parseCIDRList},
	{"serviceCIDRs", FlagServiceCIDR, parseServiceCIDRs},
	{"cleanupKubeProxy", FlagCleanupKubeProxy, parseBool},
	{"detectLocalMode", "detect-local-mode", parseDetectLocalMode},
	{"podBridgeInterface", "pod-bridge-interface", orEmpty(parseInterfaceName)},
	{"podInterfaceNamePrefix", "pod-interface-name-prefix", orEmpty(parseInterfacePrefix)},
	{"masqueradeBit", "iptables-masquerade-bit", parseMasqueradeBit},
	{"bindAddress", "bind-address", parseBindAddress},
	{"bindAddressHardFail", "bind-address-hard-fail", parseBool},
	{"kubeAPIQPS", "kube-api-qps", parseQPS},
	{"kubeAPIBurst", "kube-api-burst", parseCount},
	{"kubeAPIContentType", "kube-api-content-type", parseString},
	{"kubeAPIAcceptContentTypes", "kube-api-accept-content-types", parseString},
	{"configSyncPeriod", "config-sync-period", parseDuration},
	{"conntrackMaxPerCore", "conntrack-max-per-core", parseInt32Count},
	{"conntrackMin", "conntrack-min", parseInt32Count},
	{"conntrackTCPEstablishedTimeout", "conntrack-tcp-timeout-established", parseDuration},
	{"conntrackTCPCloseWaitTimeout", "conntrack-tcp-timeout-close-wait", parseDuration},
	{"conntrackTCPBeLiberal", "conntrack-tcp-be-liberal", parseBool},
	{"conntrackUDPTimeout", "conntrack-udp-timeout", parseDuration},
	{"conntrackUDPStreamTimeout", "conntrack-udp-timeout-stream", parseDuration},
	{"oomScoreAdj", "oom-score-adj", parseOOMScoreAdj},
	{"loggingFormat", "logging-format", parseLogFormat},
	{"verbosity", "v", parseInt32Count},
}

// orEmpty also takes "", a setting left empty (the field's default).
func orEmpty(p parser) parser {
	return func(path string, v any) (string, error) {
		if v == "" {
			return "", nil
		}
		return p(path, v)
	}
}

func defaultPort(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		panic(fmt.Sprintf("config: default address %q has no port", addr))
	}
	return port
}

// FieldNames lists the fields of KubeIPVSConfiguration (besides apiVersion and kind), in the
// order deploy/configmap.yaml documents them.
func FieldNames() []string {
	names := make([]string, len(ownFields))
	for i, f := range ownFields {
		names[i] = f.name
	}
	return names
}

// parseOwn reads a KubeIPVSConfiguration. Every problem is reported, not just the first.
func parseOwn(doc map[string]any) (*Settings, []string, error) {
	s := &Settings{Kind: Kind, Values: map[string]string{}}
	var problems []string
	for _, name := range sortedKeys(doc) {
		if name == "apiVersion" || name == "kind" {
			continue
		}
		i := slices.IndexFunc(ownFields, func(f ownField) bool { return f.name == name })
		if i < 0 {
			problems = append(problems, unknownOwnField(name))
			continue
		}
		v := doc[name]
		if v == nil {
			continue // null: as if left out
		}
		val, err := ownFields[i].parse(name, v)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		s.Values[ownFields[i].flag] = val
	}
	if len(problems) > 0 {
		return nil, nil, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return s, nil, nil
}

// unknownOwnField names an unknown field and, when it differs from a real one only in case
// or in its dashes (a flag name), suggests that one.
func unknownOwnField(name string) string {
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "-", "")) }
	for _, f := range ownFields {
		if norm(f.name) == norm(name) || f.flag == name {
			return fmt.Sprintf("unknown field %q (did you mean %q?)", name, f.name)
		}
	}
	return fmt.Sprintf("unknown field %q (%s fields: %s)", name, Kind, strings.Join(FieldNames(), ", "))
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
