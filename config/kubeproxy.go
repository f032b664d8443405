package config

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/healthcheck"
	"github.com/kube-ipvs/kube-ipvs/metrics"
)

// kpNode describes one field of kube-proxy's KubeProxyConfiguration (v1alpha1, as of
// Kubernetes 1.37, plus fields older and newer files have).
type kpNode struct {
	// apply reads a field kube-ipvs honours.
	apply func(k *kubeProxyReader, path string, v any)
	// fields describes a mapping whose fields are known one by one: any other is unknown.
	fields map[string]kpNode
	// A node with neither is a known field kube-ipvs does not apply: when it is set (not
	// null, zero, or one of unset) it is listed in one warning line.
	unset []string
	// keysAreSettings marks a mapping whose every key is a setting even when false
	// (featureGates: a gate turned off is a choice).
	keysAreSettings bool
}

var notApplied = kpNode{}

var kubeProxyFields = map[string]kpNode{
	"apiVersion": {apply: func(*kubeProxyReader, string, any) {}},
	"kind":       {apply: func(*kubeProxyReader, string, any) {}},
	"mode":       {apply: (*kubeProxyReader).readMode},

	"clientConnection": {fields: map[string]kpNode{
		"kubeconfig":         honour("kubeconfig", parseString),
		"acceptContentTypes": notApplied,
		"contentType":        notApplied,
		"qps":                notApplied,
		"burst":              notApplied,
	}},
	// kube-proxy's default ports are kube-ipvs's.
	"healthzBindAddress": honour("healthz-bind-address", bindAddress(defaultPort(healthcheck.DefaultProxyHealthAddress))),
	"metricsBindAddress": honour("metrics-bind-address", bindAddress(defaultPort(metrics.DefaultAddress))),
	"hostnameOverride":   honour("hostname-override", parseHostname),
	"clusterCIDR":        honour(FlagClusterCIDR, parseClusterCIDR),
	"nodePortAddresses":  honour("nodeport-addresses", parseNodePortAddresses),
	"masqueradeAll":      {apply: (*kubeProxyReader).readMasqueradeAll},
	// Newer kube-proxy versions hold the sync periods at the top level; ipvs.* wins.
	"syncPeriod":    fallback("sync-period", parsePositiveDuration),
	"minSyncPeriod": fallback("min-sync-period", parseDuration),

	"ipvs": {fields: map[string]kpNode{
		"scheduler":     honour("scheduler", parseScheduler),
		"strictARP":     honour("strict-arp", parseBool),
		"syncPeriod":    honour("sync-period", parsePositiveDuration),
		"minSyncPeriod": honour("min-sync-period", parseDuration),
		"excludeCIDRs":  honour(FlagExcludeCIDRs, parseCIDRList),
		"tcpTimeout":    honour("ipvs-tcp-timeout", parseDuration),
		"tcpFinTimeout": honour("ipvs-tcpfin-timeout", parseDuration),
		"udpTimeout":    honour("ipvs-udp-timeout", parseDuration),
	}},
	"iptables": {fields: ruleModeFields("localhostNodePorts")},
	"nftables": {fields: ruleModeFields("tableName")},

	"featureGates":                {keysAreSettings: true},
	"bindAddress":                 {unset: []string{"0.0.0.0", "::"}},
	"bindAddressHardFail":         notApplied,
	"enableProfiling":             notApplied,
	"showHiddenMetricsForVersion": notApplied,
	"serviceProxyName":            notApplied,
	"detectLocalMode":             notApplied,
	"detectLocal":                 notApplied,
	"conntrack":                   notApplied,
	"configSyncPeriod":            notApplied,
	"oomScoreAdj":                 notApplied,
	"portRange":                   notApplied,
	"logging":                     notApplied,
	"winkernel":                   notApplied,
}

// ruleModeFields describes kube-proxy's iptables or nftables section: the fields both have,
// of which kube-ipvs applies only masqueradeAll (where older versions hold it), plus that
// mode's own fields, none applied.
func ruleModeFields(own ...string) map[string]kpNode {
	fields := map[string]kpNode{
		"masqueradeAll": {apply: (*kubeProxyReader).readMasqueradeAll},
		"masqueradeBit": notApplied,
		"syncPeriod":    notApplied,
		"minSyncPeriod": notApplied,
	}
	for _, name := range own {
		fields[name] = notApplied
	}
	return fields
}

// kubeProxyReader collects what a KubeProxyConfiguration says.
type kubeProxyReader struct {
	values     map[string]string
	fallbacks  map[string]string // used for flags that values leaves unset
	problems   []string
	unknown    []string
	notApplied []string
	mode       *string
	masquerade bool
}

// honour reads a field kube-ipvs applies. As kube-proxy does, it takes a zero value ("",
// 0s, false, an empty list) as "use the default".
func honour(flag string, p parser) kpNode {
	return kpNode{apply: func(k *kubeProxyReader, path string, v any) {
		if val, ok := k.read(path, v, p); ok {
			k.values[flag] = val
		}
	}}
}

// fallback is honour for a field that yields to another one setting the same flag.
func fallback(flag string, p parser) kpNode {
	return kpNode{apply: func(k *kubeProxyReader, path string, v any) {
		if val, ok := k.read(path, v, p); ok {
			k.fallbacks[flag] = val
		}
	}}
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

// walk visits obj's fields in sorted order against schema.
func (k *kubeProxyReader) walk(prefix string, obj map[string]any, schema map[string]kpNode) {
	for _, key := range sortedKeys(obj) {
		path := key
		if prefix != "" {
			path = prefix + "." + key
		}
		node, ok := schema[key]
		v := obj[key]
		switch {
		case !ok:
			k.unknown = append(k.unknown, path)
		case node.apply != nil:
			node.apply(k, path, v)
		case node.fields != nil:
			if v == nil {
				continue
			}
			m, ok := v.(map[string]any)
			if !ok {
				k.problems = append(k.problems, fieldError(path, "%s is not a mapping of fields", show(v)).Error())
				continue
			}
			k.walk(path, m, node.fields)
		default:
			k.notApplied = append(k.notApplied, setLeaves(path, v, node)...)
		}
	}
}

// setLeaves lists the paths under v that hold a value other than a zero one.
func setLeaves(path string, v any, node kpNode) []string {
	switch v := v.(type) {
	case map[string]any:
		var out []string
		for _, key := range sortedKeys(v) {
			if node.keysAreSettings {
				out = append(out, path+"."+key)
				continue
			}
			out = append(out, setLeaves(path+"."+key, v[key], node)...)
		}
		return out
	case string:
		for _, u := range node.unset {
			if v == u {
				return nil
			}
		}
		if node.keysAreSettings && v != "" {
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
// honoured; every other field that is set gets a warning, all in one line.
func parseKubeProxy(doc map[string]any) (*Settings, []string, error) {
	k := &kubeProxyReader{values: map[string]string{}, fallbacks: map[string]string{}}
	k.walk("", doc, kubeProxyFields)
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
	if len(k.notApplied) > 0 {
		warnings = append(warnings, "kube-proxy configuration: fields set but not applied by kube-ipvs: "+strings.Join(k.notApplied, ", "))
	}
	return &Settings{Kind: KubeProxyKind, Values: k.values}, warnings, nil
}
