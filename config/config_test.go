package config

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const ownHeader = "apiVersion: kube-ipvs.io/v1alpha1\nkind: KubeIPVSConfiguration\n"

func parseOK(t *testing.T, doc string) (*Settings, []string) {
	t.Helper()
	s, warnings, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse:\n%s\nerror: %v", doc, err)
	}
	return s, warnings
}

func TestOwnFormatEveryField(t *testing.T) {
	doc := ownHeader + `
kubeconfig: /etc/kubernetes/kube-ipvs.conf
manifests: /srv/manifests
hostnameOverride: " Worker-1 "
scheduler: wlc
syncPeriod: 1m
minSyncPeriod: 500ms
repairStep: 50
nodePortAddresses: [10.0.0.0/8, "fd00::/64"]
serviceNodePortRange: 20000-22767
dummyInterface: ipvs0
vipBinding: route
gracefulTerminationTimeout: 2m30s
ipvsTCPTimeout: 900s
ipvsTCPFinTimeout: 120s
ipvsUDPTimeout: 300s
strictARP: true
ipvsRateEstimation: "off"
healthzBindAddress: "[::]:10256"
metricsBindAddress: 0.0.0.0:10249
stateSocket: /run/kipvs/s.sock
handoverFile: /run/kipvs/handover
logLevel: debug
clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
masqueradeAll: true
excludeCIDRs:
- 192.168.100.0/24
- 192.168.200.0/24
serviceCIDRs: [10.96.0.0/12, "fd00:96::/108"]
cleanupKubeProxy: true
detectLocalMode: InterfaceNamePrefix
podBridgeInterface: cbr0
podInterfaceNamePrefix: veth
masqueradeBit: 15
bindAddress: 192.168.1.10
bindAddressHardFail: true
kubeAPIQPS: 20
kubeAPIBurst: 40
kubeAPIContentType: application/vnd.kubernetes.protobuf
kubeAPIAcceptContentTypes: application/json
configSyncPeriod: 15m
conntrackMaxPerCore: 0
conntrackMin: 262144
conntrackTCPEstablishedTimeout: 2h
conntrackTCPCloseWaitTimeout: 0s
conntrackTCPBeLiberal: true
conntrackUDPTimeout: 30s
conntrackUDPStreamTimeout: 2m
oomScoreAdj: 0
loggingFormat: json
verbosity: 4
`
	s, warnings := parseOK(t, doc)
	if len(warnings) != 0 {
		t.Errorf("warnings: %q", warnings)
	}
	want := map[string]string{
		"kubeconfig":                        "/etc/kubernetes/kube-ipvs.conf",
		"manifests":                         "/srv/manifests",
		"hostname-override":                 "worker-1",
		"scheduler":                         "wlc",
		"sync-period":                       "1m0s",
		"min-sync-period":                   "500ms",
		"repair-step":                       "50",
		"nodeport-addresses":                "10.0.0.0/8,fd00::/64",
		"service-node-port-range":           "20000-22767",
		"dummy-interface":                   "ipvs0",
		"vip-binding":                       "route",
		"graceful-termination-timeout":      "2m30s",
		"ipvs-tcp-timeout":                  "15m0s",
		"ipvs-tcpfin-timeout":               "2m0s",
		"ipvs-udp-timeout":                  "5m0s",
		"strict-arp":                        "true",
		"ipvs-rate-estimation":              "off",
		"healthz-bind-address":              "[::]:10256",
		"metrics-bind-address":              "0.0.0.0:10249",
		"state-socket":                      "/run/kipvs/s.sock",
		"handover-file":                     "/run/kipvs/handover",
		"log-level":                         "debug",
		"cluster-cidr":                      "10.244.0.0/16,fd00:10:244::/56",
		"masquerade-all":                    "true",
		"exclude-cidrs":                     "192.168.100.0/24,192.168.200.0/24",
		"service-cidr":                      "10.96.0.0/12,fd00:96::/108",
		"cleanup-kube-proxy":                "true",
		"detect-local-mode":                 "InterfaceNamePrefix",
		"pod-bridge-interface":              "cbr0",
		"pod-interface-name-prefix":         "veth",
		"iptables-masquerade-bit":           "15",
		"bind-address":                      "192.168.1.10",
		"bind-address-hard-fail":            "true",
		"kube-api-qps":                      "20",
		"kube-api-burst":                    "40",
		"kube-api-content-type":             "application/vnd.kubernetes.protobuf",
		"kube-api-accept-content-types":     "application/json",
		"config-sync-period":                "15m0s",
		"conntrack-max-per-core":            "0",
		"conntrack-min":                     "262144",
		"conntrack-tcp-timeout-established": "2h0m0s",
		"conntrack-tcp-timeout-close-wait":  "0s",
		"conntrack-tcp-be-liberal":          "true",
		"conntrack-udp-timeout":             "30s",
		"conntrack-udp-timeout-stream":      "2m0s",
		"oom-score-adj":                     "0",
		"logging-format":                    "json",
		"v":                                 "4",
	}
	if s.Kind != Kind {
		t.Errorf("Kind = %q", s.Kind)
	}
	if !maps.Equal(s.Values, want) {
		t.Errorf("values:\n got %v\nwant %v", s.Values, want)
	}
	if got := slices.Sorted(maps.Keys(want)); !slices.Equal(got, FlagNames()) {
		t.Errorf("FlagNames() = %v; the test covers %v", FlagNames(), got)
	}
	if len(FieldNames()) != len(want) {
		t.Errorf("FieldNames() = %v", FieldNames())
	}
}

func TestOwnFormatOmittedAndNull(t *testing.T) {
	s, _ := parseOK(t, ownHeader)
	if len(s.Values) != 0 {
		t.Errorf("an empty configuration sets %v", s.Values)
	}
	// null is as if left out; explicit empty values are settings (e.g. no metrics server).
	s, _ = parseOK(t, ownHeader+"scheduler: null\nsyncPeriod:\nmetricsBindAddress: \"\"\nnodePortAddresses: []\nstrictARP: false\n")
	want := map[string]string{"metrics-bind-address": "", "nodeport-addresses": "", "strict-arp": "false"}
	if !maps.Equal(s.Values, want) {
		t.Errorf("values %v, want %v", s.Values, want)
	}
}

// YAML reads an unquoted on or off as a boolean: ipvsRateEstimation takes it as meant.
func TestRateEstimationUnquoted(t *testing.T) {
	for in, want := range map[string]string{"off": "off", "on": "on", "\"kernel\"": "kernel", "false": "off"} {
		s, _ := parseOK(t, ownHeader+"ipvsRateEstimation: "+in+"\n")
		if got := s.Values["ipvs-rate-estimation"]; got != want {
			t.Errorf("ipvsRateEstimation: %s gives %q, want %q", in, got, want)
		}
	}
}

func TestJSONFile(t *testing.T) {
	s, _ := parseOK(t, `{"apiVersion": "kube-ipvs.io/v1alpha1", "kind": "KubeIPVSConfiguration", "syncPeriod": "10s"}`)
	if s.Values["sync-period"] != "10s" {
		t.Errorf("values %v", s.Values)
	}
}

func TestBindAddressNormalised(t *testing.T) {
	cases := map[string]string{
		`0.0.0.0`:          "0.0.0.0:10249",
		`"::"`:             "[::]:10249",
		`"[::1]"`:          "[::1]:10249",
		`10.1.2.3`:         "10.1.2.3:10249",
		`10.1.2.3:9100`:    "10.1.2.3:9100",
		`"[fd00::1]:9100"`: "[fd00::1]:9100",
		`":9100"`:          ":9100",
		`""`:               "",
	}
	for in, want := range cases {
		s, _ := parseOK(t, ownHeader+"metricsBindAddress: "+in+"\nhealthzBindAddress: "+in+"\n")
		if got := s.Values["metrics-bind-address"]; got != want {
			t.Errorf("metricsBindAddress %s: got %q, want %q", in, got, want)
		}
		wantHealthz := strings.Replace(want, "10249", "10256", 1)
		if got := s.Values["healthz-bind-address"]; got != wantHealthz {
			t.Errorf("healthzBindAddress %s: got %q, want %q", in, got, wantHealthz)
		}
	}
}

func TestOwnFormatInvalidValues(t *testing.T) {
	cases := []struct{ field, want string }{
		{"syncPeriod: 3x", `syncPeriod: "3x" is not a duration`},
		{"syncPeriod: 30", `syncPeriod: 30 is not a duration (write a string such as "30s")`},
		{"syncPeriod: 0s", `syncPeriod: "0s" must be positive`},
		{"minSyncPeriod: -1s", `minSyncPeriod: "-1s" must not be negative`},
		{"gracefulTerminationTimeout: -30s", `gracefulTerminationTimeout: "-30s" must not be negative`},
		{"ipvsTCPTimeout: -1s", `ipvsTCPTimeout: "-1s" must not be negative`},
		{"ipvsTCPFinTimeout: -1s", `ipvsTCPFinTimeout: "-1s" must not be negative`},
		{"ipvsUDPTimeout: 5 minutes", `ipvsUDPTimeout: "5 minutes" is not a duration`},
		{"scheduler: fastest", `scheduler: "fastest" is not an IPVS scheduler; use one of rr, wrr, lc, wlc, lblc, lblcr, dh, sh, sed, nq, fo, ovf, mh, twos`},
		{"scheduler: [rr]", `scheduler: ["rr"] is not a string`},
		{"nodePortAddresses: [10.0.0.0/8, bogus]", `nodePortAddresses[1]: "bogus" is not a CIDR`},
		{"nodePortAddresses: 10.0.0.0/8", `nodePortAddresses: "10.0.0.0/8" is not a list`},
		{"nodePortAddresses: [10.0.0.0/8, localhost]", `nodePortAddresses[1]: "localhost" is not supported: NodePorts on loopback addresses exist only in kube-proxy's iptables and nftables modes; IPVS cannot serve them`},
		{"nodePortAddresses: [primary, public]", `nodePortAddresses[1]: "public" is not a CIDR (e.g. 10.0.0.0/8 or fd00::/64) (or one of the keywords primary, all)`},
		{"detectLocalMode: PodCIDR", `detectLocalMode: "PodCIDR": not a local traffic detection mode`},
		{"podInterfaceNamePrefix: veth+", `podInterfaceNamePrefix: "veth+" is not the start of a Linux interface name`},
		{"podBridgeInterface: a-very-long-bridge-name", `podBridgeInterface: "a-very-long-bridge-name" is not a Linux interface name`},
		{"masqueradeBit: 0", `masqueradeBit: 0: kube-ipvs can use bit 14 (the default) or 15 only`},
		{"bindAddress: node-1", `bindAddress: "node-1": not an IP address`},
		{"kubeAPIQPS: -1", `kubeAPIQPS: -1 must be a number, 0 or more`},
		{"kubeAPIBurst: -1", `kubeAPIBurst: -1 must be a whole number, 0 or more`},
		{"configSyncPeriod: -1s", `configSyncPeriod: "-1s" must not be negative`},
		{"serviceNodePortRange: 32767-30000", `serviceNodePortRange: "32767-30000": the low port 32767 is above the high port 30000`},
		{"serviceNodePortRange: \"30000\"", `serviceNodePortRange: "30000": want LOW-HIGH`},
		{"serviceNodePortRange: 0-100", `serviceNodePortRange: "0-100": want LOW-HIGH`},
		{"serviceNodePortRange: 30000-70000", `serviceNodePortRange: "30000-70000": want LOW-HIGH`},
		{"vipBinding: routes", `vipBinding: "routes": use address or route`},
		{"dummyInterface: a-name-far-too-long", `dummyInterface: "a-name-far-too-long" is not a Linux interface name`},
		{"dummyInterface: \"\"", `dummyInterface: "" is not a Linux interface name`},
		{"strictARP: \"true\"", `strictARP: "true" is not a boolean`},
		{"ipvsRateEstimation: sometimes", `ipvsRateEstimation: "sometimes": use kernel`},
		{"masqueradeAll: 1", `masqueradeAll: 1 is not a boolean`},
		{"healthzBindAddress: localhost:10256", `healthzBindAddress: "localhost:10256": want IP:PORT`},
		{"metricsBindAddress: 0.0.0.0:99999", `metricsBindAddress: "0.0.0.0:99999": want IP:PORT`},
		{"metricsBindAddress: 0.0.0.0:0", `metricsBindAddress: "0.0.0.0:0": want IP:PORT`},
		{"logLevel: loud", `logLevel: "loud" is not a log level`},
		{"hostnameOverride: 12", `hostnameOverride: 12 is not a string`},
		{"clusterCIDR: 10.244.0.0/33", `clusterCIDR: "10.244.0.0/33" is not a CIDR`},
		{"clusterCIDR: 10.0.0.0/8,10.1.0.0/16", `clusterCIDR: "10.0.0.0/8,10.1.0.0/16": want one CIDR, or one IPv4 and one IPv6 CIDR`},
		{"clusterCIDR: [10.0.0.0/8]", `clusterCIDR: ["10.0.0.0/8"] is not a string`},
		{"excludeCIDRs: [10.0.0.0/8, 10.1.0.0]", `excludeCIDRs[1]: "10.1.0.0" is not a CIDR`},
		{"excludeCIDRs: [[10.0.0.0/8]]", `excludeCIDRs[0]: ["10.0.0.0/8"] is not a string`},
	}
	for _, tc := range cases {
		_, _, err := Parse([]byte(ownHeader + tc.field + "\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v; want it to contain %q", tc.field, err, tc.want)
		}
	}
}

func TestOwnFormatReportsEveryProblem(t *testing.T) {
	_, _, err := Parse([]byte(ownHeader + "syncPeriod: 3x\nscheduler: fastest\nsyncperiod: 1s\n"))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`scheduler: "fastest"`, `syncPeriod: "3x"`, `unknown field "syncperiod"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestOwnFormatUnknownFieldsAreErrors(t *testing.T) {
	cases := []struct{ field, want string }{
		{"syncperiod: 1s", `unknown field "syncperiod" (did you mean "syncPeriod"?)`},
		{"sync-period: 1s", `unknown field "sync-period" (did you mean "syncPeriod"?)`},
		{"nodeport-addresses: []", `unknown field "nodeport-addresses" (did you mean "nodePortAddresses"?)`},
		{"ipvs: {scheduler: rr}", `unknown field "ipvs" (KubeIPVSConfiguration fields: kubeconfig, manifests,`},
		{"mode: ipvs", `unknown field "mode"`},
	}
	for _, tc := range cases {
		_, _, err := Parse([]byte(ownHeader + tc.field + "\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v; want it to contain %q", tc.field, err, tc.want)
		}
	}
}

func TestHeaderAndDocumentErrors(t *testing.T) {
	cases := []struct{ doc, want string }{
		{"", "the file is empty"},
		{"# only a comment\n", "the file is empty"},
		{"apiVersion: kube-ipvs.io/v1beta1\nkind: KubeIPVSConfiguration\n", `apiVersion "kube-ipvs.io/v1beta1": kind KubeIPVSConfiguration wants apiVersion kube-ipvs.io/v1alpha1`},
		{"apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\n", `apiVersion "kubeproxy.config.k8s.io/v1alpha2": kube-ipvs reads kube-proxy configurations of apiVersion kubeproxy.config.k8s.io/v1alpha1`},
		{"syncPeriod: 30s\n", "no kind: want kind KubeIPVSConfiguration"},
		{"apiVersion: v1\nkind: Pod\n", `kind "Pod": want KubeIPVSConfiguration`},
		{"apiVersion: v1\nkind: ConfigMap\ndata: {}\n", "kind ConfigMap: give the configuration file the ConfigMap holds"},
		{"- a\n- b\n", `the file holds ["a","b"]; want a mapping of fields`},
		{"syncPeriod: [\n", "not valid YAML"},
		{ownHeader + "syncPeriod: 1s\nsyncPeriod: 2s\n", `key "syncPeriod" already set`},
		{ownHeader + "---\n" + ownHeader, "the file holds 2 YAML documents; want exactly one"},
	}
	for _, tc := range cases {
		_, _, err := Parse([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v; want it to contain %q", tc.doc, err, tc.want)
		}
	}
	// Separators around a single document are fine.
	parseOK(t, "---\n# kube-ipvs\n"+ownHeader+"syncPeriod: 1s\n---\n# nothing more\n")
}

const kpHeader = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n"

func TestKubeProxyHonouredFields(t *testing.T) {
	cases := []struct {
		doc  string
		want map[string]string
	}{
		{"ipvs: {scheduler: sh}", map[string]string{"scheduler": "sh"}},
		{"ipvs: {strictARP: true}", map[string]string{"strict-arp": "true"}},
		{"ipvs: {syncPeriod: 15s}", map[string]string{"sync-period": "15s"}},
		{"ipvs: {minSyncPeriod: 2s}", map[string]string{"min-sync-period": "2s"}},
		{"ipvs: {excludeCIDRs: [10.96.100.0/24, \"fd00:1::/64\"]}", map[string]string{"exclude-cidrs": "10.96.100.0/24,fd00:1::/64"}},
		{"ipvs: {tcpTimeout: 900s}", map[string]string{"ipvs-tcp-timeout": "15m0s"}},
		{"ipvs: {tcpFinTimeout: 120s}", map[string]string{"ipvs-tcpfin-timeout": "2m0s"}},
		{"ipvs: {udpTimeout: 300s}", map[string]string{"ipvs-udp-timeout": "5m0s"}},
		{"clusterCIDR: 10.244.0.0/16", map[string]string{"cluster-cidr": "10.244.0.0/16"}},
		{"clusterCIDR: 10.244.0.0/16, fd00:10:244::/56", map[string]string{"cluster-cidr": "10.244.0.0/16,fd00:10:244::/56"}},
		{"nodePortAddresses: [primary]", map[string]string{"nodeport-addresses": "primary"}},
		{"nodePortAddresses: [192.168.0.0/16, \"fd00::/64\"]", map[string]string{"nodeport-addresses": "192.168.0.0/16,fd00::/64"}},
		{"masqueradeAll: true", map[string]string{"masquerade-all": "true"}},
		{"iptables: {masqueradeAll: true}", map[string]string{"masquerade-all": "true"}},
		{"nftables: {masqueradeAll: true}", map[string]string{"masquerade-all": "true"}},
		{"masqueradeAll: false\niptables: {masqueradeAll: true}", map[string]string{"masquerade-all": "true"}},
		{"hostnameOverride: Node-1.Example", map[string]string{"hostname-override": "node-1.example"}},
		{"healthzBindAddress: 0.0.0.0:10256", map[string]string{"healthz-bind-address": "0.0.0.0:10256"}},
		{"healthzBindAddress: \"::\"", map[string]string{"healthz-bind-address": "[::]:10256"}},
		{"metricsBindAddress: 0.0.0.0:10249", map[string]string{"metrics-bind-address": "0.0.0.0:10249"}},
		{"metricsBindAddress: 0.0.0.0", map[string]string{"metrics-bind-address": "0.0.0.0:10249"}},
		{"metricsBindAddress: 127.0.0.1:9999", map[string]string{"metrics-bind-address": "127.0.0.1:9999"}},
		{"clientConnection: {kubeconfig: /var/lib/kube-proxy/kubeconfig.conf}", map[string]string{"kubeconfig": "/var/lib/kube-proxy/kubeconfig.conf"}},
		// Newer files hold the sync periods at the top level; ipvs.* wins over them.
		{"syncPeriod: 20s\nminSyncPeriod: 3s", map[string]string{"sync-period": "20s", "min-sync-period": "3s"}},
		{"syncPeriod: 20s\nipvs: {syncPeriod: 40s}", map[string]string{"sync-period": "40s"}},
		// Zero values are kube-proxy's "use the default".
		{"ipvs: {scheduler: \"\", strictARP: false, syncPeriod: 0s, minSyncPeriod: 0s, excludeCIDRs: null, tcpTimeout: 0s}", map[string]string{}},
		{"healthzBindAddress: \"\"\nmetricsBindAddress: \"\"\nhostnameOverride: \"\"\nclusterCIDR: \"\"\nnodePortAddresses: []", map[string]string{}},
		{"ipvs: null\niptables: null\nclientConnection: null", map[string]string{}},
	}
	for _, tc := range cases {
		s, warnings := parseOK(t, kpHeader+tc.doc+"\n")
		if s.Kind != KubeProxyKind {
			t.Errorf("Kind = %q", s.Kind)
		}
		if !maps.Equal(s.Values, tc.want) {
			t.Errorf("%s:\n got %v\nwant %v", tc.doc, s.Values, tc.want)
		}
		if len(warnings) != 0 {
			t.Errorf("%s: warnings %q", tc.doc, warnings)
		}
	}
}

func TestKubeProxyMode(t *testing.T) {
	const head = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
	cases := []struct{ mode, want string }{
		{"mode: ipvs\n", ""},
		{"mode: iptables\n", `kube-proxy configuration: mode "iptables" ignored: kube-ipvs is an IPVS proxy and programs IPVS virtual servers, not iptables rules,`},
		{"mode: nftables\n", `kube-proxy configuration: mode "nftables" ignored: kube-ipvs is an IPVS proxy and programs IPVS virtual servers, not nftables rules,`},
		{"mode: kernelspace\n", `kube-proxy configuration: mode "kernelspace" ignored: kube-ipvs is an IPVS proxy`},
		{"mode: \"\"\n", `kube-proxy configuration: mode "" means kube-proxy's default iptables mode; kube-ipvs is an IPVS proxy`},
		{"mode: null\n", `kube-proxy configuration: mode "" means kube-proxy's default iptables mode; kube-ipvs is an IPVS proxy`},
		{"", "kube-proxy configuration: no mode, so kube-proxy ran in its default iptables mode; kube-ipvs is an IPVS proxy"},
	}
	for _, tc := range cases {
		s, warnings := parseOK(t, head+tc.mode+"ipvs: {scheduler: lc}\n")
		if s.Values["scheduler"] != "lc" {
			t.Errorf("%q: the ipvs settings must apply whatever the mode: %v", tc.mode, s.Values)
		}
		if tc.want == "" {
			if len(warnings) != 0 {
				t.Errorf("%q: warnings %q", tc.mode, warnings)
			}
			continue
		}
		if len(warnings) != 1 || !strings.Contains(warnings[0], tc.want) || !strings.Contains(warnings[0], "set mode: ipvs to silence this warning") {
			t.Errorf("%q: warnings %q; want one containing %q", tc.mode, warnings, tc.want)
		}
	}
	if _, _, err := Parse([]byte(head + "mode: [ipvs]\n")); err == nil || !strings.Contains(err.Error(), `mode: ["ipvs"] is not a string`) {
		t.Errorf("mode as a list: %v", err)
	}
}

func TestKubeProxyIgnoredFieldsInOneWarningLine(t *testing.T) {
	doc := kpHeader + `
bindAddress: 0.0.0.0
detectLocalMode: InterfaceNamePrefix
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: veth
featureGates:
  SomeAlphaFeature: true
  SomeBetaFeature: false
conntrack:
  maxPerCore: 32768
  min: 131072
  tcpEstablishedTimeout: 24h0m0s
  tcpCloseWaitTimeout: 0s
iptables:
  masqueradeBit: 14
  syncPeriod: 30s
  minSyncPeriod: 1s
nftables:
  tableName: ""
logging:
  format: json
  verbosity: 4
  options:
    json:
      infoBufferSize: "0"
oomScoreAdj: -999
serviceProxyName: other-proxy
enableProfiling: true
clientConnection:
  qps: 50
  burst: 100
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
ipvs:
  strictARP: true
`
	s, warnings := parseOK(t, doc)
	want := []string{
		"kube-proxy configuration: fields kube-ipvs deliberately ignores (see docs/kubeproxyconfiguration.md for why): " +
			"enableProfiling, featureGates.SomeAlphaFeature, featureGates.SomeBetaFeature, iptables.minSyncPeriod, " +
			"iptables.syncPeriod, serviceProxyName",
	}
	if !slices.Equal(warnings, want) {
		t.Errorf("warnings:\n%s\nwant exactly:\n%s", strings.Join(warnings, "\n"), strings.Join(want, "\n"))
	}
	wantValues := map[string]string{"strict-arp": "true", "kubeconfig": "/var/lib/kube-proxy/kubeconfig.conf",
		"detect-local-mode": "InterfaceNamePrefix", "pod-interface-name-prefix": "veth", "iptables-masquerade-bit": "14",
		"kube-api-qps": "50", "kube-api-burst": "100",
		// conntrack, logging and oomScoreAdj are applied; a zero timeout is passed on, as it
		// means "leave the kernel's" in kube-proxy, not the 1h default.
		"conntrack-max-per-core": "32768", "conntrack-min": "131072", "conntrack-tcp-timeout-established": "24h0m0s",
		"conntrack-tcp-timeout-close-wait": "0s", "logging-format": "json", "v": "4", "oom-score-adj": "-999"}
	if !maps.Equal(s.Values, wantValues) {
		t.Errorf("values %v, want %v", s.Values, wantValues)
	}

	// Old files have featureGates as one string.
	_, warnings = parseOK(t, kpHeader+"featureGates: SupportIPVSProxyMode=true\n")
	if len(warnings) != 1 || !strings.HasSuffix(warnings[0], "for why): featureGates") {
		t.Errorf("featureGates string: %q", warnings)
	}
}

// TestKubeProxyFieldTableIsCommitted fails when docs/kubeproxyconfiguration.md is not what
// the field table generates: run go generate ./config.
func TestKubeProxyFieldTableIsCommitted(t *testing.T) {
	got, err := os.ReadFile("../docs/kubeproxyconfiguration.md")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != KubeProxyFieldTable() {
		t.Error("docs/kubeproxyconfiguration.md differs from the field table in config/kubeproxy.go: run go generate ./config and commit the result")
	}
}

func TestKubeProxyFieldsSortedAndDocumented(t *testing.T) {
	var o Options
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	o.AddFlags(fs)
	for i, f := range kubeProxyFields {
		if i > 0 && kubeProxyFields[i-1].path >= f.path {
			t.Errorf("kubeProxyFields: %q after %q: keep the entries sorted by path, one per field", f.path, kubeProxyFields[i-1].path)
		}
		if f.doc == "" {
			t.Errorf("%s: no doc", f.path)
		}
		if (f.status == kpHonoured) != (f.read != nil) {
			t.Errorf("%s: an honoured field, and only one, has a reader", f.path)
		}
		if kpMappings[f.path] {
			t.Errorf("%s is both a field and a mapping of fields", f.path)
		}
		if f.flag != "" && fs.Lookup(f.flag) == nil {
			t.Errorf("%s sets --%s, which AddFlags does not define", f.path, f.flag)
		}
	}
}

func TestKubeProxyRefusedFields(t *testing.T) {
	_, _, err := Parse([]byte(kpHeader + "iptables: {snatNodeInternalIP: true}\n"))
	if err == nil || !strings.Contains(err.Error(), "iptables.snatNodeInternalIP: true is not supported: kube-ipvs masquerades to the address of the interface") {
		t.Errorf("snatNodeInternalIP: %v", err)
	}
	parseOK(t, kpHeader+"iptables: {snatNodeInternalIP: false}\n")
}

func TestKubeProxyNewlyHonouredFields(t *testing.T) {
	cases := []struct {
		doc  string
		want map[string]string
	}{
		{"detectLocalMode: NodeCIDR", map[string]string{"detect-local-mode": "NodeCIDR"}},
		{"detectLocalMode: BridgeInterface\ndetectLocal: {bridgeInterface: cbr0}", map[string]string{"detect-local-mode": "BridgeInterface", "pod-bridge-interface": "cbr0"}},
		{"detectLocal: {clusterCIDRs: [10.244.0.0/16, \"fd00:10:244::/56\"]}", map[string]string{"cluster-cidr": "10.244.0.0/16,fd00:10:244::/56"}},
		{"clusterCIDR: 10.1.0.0/16\ndetectLocal: {clusterCIDRs: [10.244.0.0/16]}", map[string]string{"cluster-cidr": "10.1.0.0/16"}},
		{"nodePortAddresses: [primary, 10.0.0.0/8]", map[string]string{"nodeport-addresses": "primary,10.0.0.0/8"}},
		{"nodePortAddresses: [all]", map[string]string{"nodeport-addresses": "all"}},
		{"iptables: {masqueradeBit: 15}", map[string]string{"iptables-masquerade-bit": "15"}},
		{"bindAddress: 192.168.1.10", map[string]string{"bind-address": "192.168.1.10"}},
		{"bindAddress: \"::\"", map[string]string{}},
		{"bindAddressHardFail: true", map[string]string{"bind-address-hard-fail": "true"}},
		{"clientConnection: {qps: 7.5, burst: 20, contentType: application/vnd.kubernetes.protobuf, acceptContentTypes: application/json}",
			map[string]string{"kube-api-qps": "7.5", "kube-api-burst": "20", "kube-api-content-type": "application/vnd.kubernetes.protobuf", "kube-api-accept-content-types": "application/json"}},
		{"configSyncPeriod: 15m", map[string]string{"config-sync-period": "15m0s"}},
	}
	for _, tc := range cases {
		s, warnings := parseOK(t, kpHeader+tc.doc+"\n")
		if !maps.Equal(s.Values, tc.want) || len(warnings) != 0 {
			t.Errorf("%s:\n got %v %q\nwant %v", tc.doc, s.Values, warnings, tc.want)
		}
	}
}

func TestKubeProxyUnknownFieldsAreWarnings(t *testing.T) {
	doc := kpHeader + `
udpIdleTimeout: 250ms
resourceContainer: /kube-proxy
ipvs:
  schedular: wrr
  scheduler: lc
clientConnection:
  kubeconfigg: /x
`
	s, warnings := parseOK(t, doc)
	want := "kube-proxy configuration: unknown fields ignored (they may come from another kube-proxy version, or be typos): " +
		"clientConnection.kubeconfigg, ipvs.schedular, resourceContainer, udpIdleTimeout"
	if len(warnings) != 1 || warnings[0] != want {
		t.Errorf("warnings:\n%s\nwant exactly:\n%s", strings.Join(warnings, "\n"), want)
	}
	if !maps.Equal(s.Values, map[string]string{"scheduler": "lc"}) {
		t.Errorf("values %v", s.Values)
	}
}

func TestKubeProxyDuplicateKeysAreWarnings(t *testing.T) {
	s, warnings := parseOK(t, kpHeader+"ipvs:\n  scheduler: wrr\n  scheduler: lc\n")
	if len(warnings) != 1 || !strings.Contains(warnings[0], `key "scheduler" already set`) || strings.Contains(warnings[0], "\n") {
		t.Errorf("warnings %q", warnings)
	}
	if s.Values["scheduler"] == "" {
		t.Errorf("values %v", s.Values)
	}
}

func TestKubeProxyInvalidValues(t *testing.T) {
	cases := []struct{ field, want string }{
		{"ipvs: {syncPeriod: 3x}", `ipvs.syncPeriod: "3x" is not a duration`},
		{"ipvs: {syncPeriod: -30s}", `ipvs.syncPeriod: "-30s" must not be negative`},
		{"ipvs: {minSyncPeriod: 1 second}", `ipvs.minSyncPeriod: "1 second" is not a duration`},
		{"ipvs: {tcpTimeout: -1s}", `ipvs.tcpTimeout: "-1s" must not be negative`},
		{"ipvs: {tcpFinTimeout: -1s}", `ipvs.tcpFinTimeout: "-1s" must not be negative`},
		{"ipvs: {udpTimeout: 10}", `ipvs.udpTimeout: 10 is not a duration`},
		{"ipvs: {scheduler: fastest}", `ipvs.scheduler: "fastest" is not an IPVS scheduler`},
		{"ipvs: {strictARP: \"yes\"}", `ipvs.strictARP: "yes" is not a boolean`},
		{"ipvs: {excludeCIDRs: [10.0.0.0/8, nope]}", `ipvs.excludeCIDRs[1]: "nope" is not a CIDR`},
		{"ipvs: rr", `ipvs: "rr" is not a mapping of fields`},
		{"syncPeriod: 3x", `syncPeriod: "3x" is not a duration`},
		{"clusterCIDR: 10.244.0.0", `clusterCIDR: "10.244.0.0" is not a CIDR`},
		{"nodePortAddresses: [10.0.0.0/8, localhost]", `nodePortAddresses[1]: "localhost" is not supported: NodePorts on loopback addresses exist only in kube-proxy's iptables and nftables modes; IPVS cannot serve them`},
		{"nodePortAddresses: [primary, public]", `nodePortAddresses[1]: "public" is not a CIDR (e.g. 10.0.0.0/8 or fd00::/64) (or one of the keywords primary, all)`},
		{"detectLocalMode: PodCIDR", `detectLocalMode: "PodCIDR": not a local traffic detection mode; use ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix`},
		{"detectLocal: {interfaceNamePrefix: veth+}", `detectLocal.interfaceNamePrefix: "veth+" is not the start of a Linux interface name`},
		{"detectLocal: {bridgeInterface: a-very-long-bridge-name}", `detectLocal.bridgeInterface: "a-very-long-bridge-name" is not a Linux interface name`},
		{"iptables: {masqueradeBit: 12}", `iptables.masqueradeBit: 12: kube-ipvs can use bit 14 (the default) or 15 only`},
		{"iptables: {masqueradeBit: 32}", `iptables.masqueradeBit: 32: must be a bit number from 0 to 31`},
		{"bindAddress: node-1", `bindAddress: "node-1": not an IP address`},
		{"clientConnection: {qps: -1}", `clientConnection.qps: -1 must be a number, 0 or more`},
		{"nodePortAddresses: [10.0.0.0/33]", `nodePortAddresses[0]: "10.0.0.0/33" is not a CIDR`},
		{"metricsBindAddress: my-host:10249", `metricsBindAddress: "my-host:10249": want IP:PORT`},
		{"healthzBindAddress: 0.0.0.0:http", `healthzBindAddress: "0.0.0.0:http": want IP:PORT`},
		{"iptables: {masqueradeAll: \"true\"}", `iptables.masqueradeAll: "true" is not a boolean`},
		{"clientConnection: {kubeconfig: 5}", `clientConnection.kubeconfig: 5 is not a string`},
	}
	for _, tc := range cases {
		_, _, err := Parse([]byte(kpHeader + tc.field + "\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v; want it to contain %q", tc.field, err, tc.want)
		}
	}
}

// kubeadmConfig returns config.conf from the kube-proxy ConfigMap kubeadm creates.
func kubeadmConfig(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("testdata/kubeadm-kube-proxy-configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(data, &cm); err != nil {
		t.Fatal(err)
	}
	conf := cm.Data["config.conf"]
	if conf == "" {
		t.Fatal("the ConfigMap has no config.conf")
	}
	return conf
}

func TestKubeadmKubeProxyConfiguration(t *testing.T) {
	conf := kubeadmConfig(t)
	s, warnings := parseOK(t, conf)
	want := map[string]string{"kubeconfig": "/var/lib/kube-proxy/kubeconfig.conf", "cluster-cidr": "10.244.0.0/16"}
	if !maps.Equal(s.Values, want) {
		t.Errorf("values %v, want %v", s.Values, want)
	}
	// kubeadm writes every field with its zero value: nothing is unknown or "set but not
	// applied"; only the empty mode (iptables) is worth a warning.
	if len(warnings) != 1 || !strings.Contains(warnings[0], `mode "" means kube-proxy's default iptables mode`) {
		t.Errorf("warnings %q", warnings)
	}

	// The usual IPVS-mode edit of that ConfigMap (MetalLB's instructions): no warnings.
	edited := strings.Replace(conf, `mode: ""`, `mode: ipvs`, 1)
	edited = strings.Replace(edited, "  strictARP: false", "  strictARP: true", 1)
	edited = strings.Replace(edited, `  scheduler: ""`, `  scheduler: "lc"`, 1)
	s, warnings = parseOK(t, edited)
	want["strict-arp"], want["scheduler"] = "true", "lc"
	if !maps.Equal(s.Values, want) || len(warnings) != 0 {
		t.Errorf("edited: values %v warnings %q", s.Values, warnings)
	}

	// Given the ConfigMap itself instead of the file in it, the error says what to do.
	_, _, err := Load("testdata/kubeadm-kube-proxy-configmap.yaml")
	if err == nil || !strings.Contains(err.Error(), "testdata/kubeadm-kube-proxy-configmap.yaml: kind ConfigMap: give the configuration file") {
		t.Errorf("Load(ConfigMap): %v", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte(ownHeader+"scheduler: mh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(ownHeader+"scheduler: mhh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, _, err := Load(good)
	if err != nil || s.Values["scheduler"] != "mh" {
		t.Errorf("Load(good): %v %v", s, err)
	}
	if _, _, err := Load(bad); err == nil || !strings.HasPrefix(err.Error(), "config "+bad+`: scheduler: "mhh" is not an IPVS scheduler`) {
		t.Errorf("Load(bad): %v", err)
	}
	if _, _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("Load(missing): %v", err)
	}
}

// runLikeFlags defines the flags as `kube-ipvs run` does (names, types and defaults), plus
// --once, which no file sets.
func runLikeFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.String("kubeconfig", "", "")
	fs.String("manifests", "", "")
	fs.String("hostname-override", "", "")
	fs.String("scheduler", "rr", "")
	fs.Duration("sync-period", 30*time.Second, "")
	fs.Duration("min-sync-period", time.Second, "")
	fs.StringSlice("nodeport-addresses", nil, "")
	fs.String("service-node-port-range", "30000-32767", "")
	fs.String("dummy-interface", "kube-ipvs0", "")
	fs.Duration("graceful-termination-timeout", 30*time.Second, "")
	fs.Duration("ipvs-tcp-timeout", 0, "")
	fs.Duration("ipvs-tcpfin-timeout", 0, "")
	fs.Duration("ipvs-udp-timeout", 0, "")
	fs.Bool("strict-arp", false, "")
	fs.String("healthz-bind-address", "0.0.0.0:10256", "")
	fs.String("metrics-bind-address", "127.0.0.1:10249", "")
	fs.String("log-level", "info", "")
	fs.Int("conntrack-max-per-core", 32768, "")
	fs.Int("conntrack-min", 131072, "")
	fs.Duration("conntrack-tcp-timeout-established", 24*time.Hour, "")
	fs.Duration("conntrack-tcp-timeout-close-wait", time.Hour, "")
	fs.Bool("conntrack-tcp-be-liberal", false, "")
	fs.Duration("conntrack-udp-timeout", 0, "")
	fs.Duration("conntrack-udp-timeout-stream", 0, "")
	fs.Int("oom-score-adj", -999, "")
	fs.String("logging-format", "text", "")
	fs.Int("v", 0, "")
	fs.String("cluster-cidr", "", "")
	fs.Bool("masquerade-all", false, "")
	fs.StringSlice("exclude-cidrs", nil, "")
	fs.Bool("once", false, "")
	return fs
}

func TestApplyToFlagsCommandLineWins(t *testing.T) {
	s, _ := parseOK(t, ownHeader+`
scheduler: wrr
syncPeriod: 10s
nodePortAddresses: [10.0.0.0/8, 192.168.0.0/16]
excludeCIDRs: [172.16.0.0/12]
strictARP: true
logLevel: debug
`)
	fs := runLikeFlags()
	if err := fs.Parse([]string{"--scheduler=lc", "--nodeport-addresses=10.1.0.0/16", "--strict-arp=false"}); err != nil {
		t.Fatal(err)
	}
	if err := ApplyToFlags(s, fs); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"scheduler":            "lc",              // command line
		"nodeport-addresses":   "[10.1.0.0/16]",   // command line
		"strict-arp":           "false",           // command line, even though false is the default
		"sync-period":          "10s",             // file
		"log-level":            "debug",           // file
		"exclude-cidrs":        "[172.16.0.0/12]", // file
		"min-sync-period":      "1s",              // neither: default
		"dummy-interface":      "kube-ipvs0",      // neither: default
		"metrics-bind-address": "127.0.0.1:10249", // neither: default
	}
	for name, v := range want {
		if got := fs.Lookup(name).Value.String(); got != v {
			t.Errorf("--%s = %q, want %q", name, got, v)
		}
	}
	// A list from the file replaces the default rather than appending to it.
	s2, _ := parseOK(t, ownHeader+"nodePortAddresses: [10.0.0.0/8, 192.168.0.0/16]\n")
	fs = runLikeFlags()
	_ = fs.Parse(nil)
	if err := ApplyToFlags(s2, fs); err != nil {
		t.Fatal(err)
	}
	if got, _ := fs.GetStringSlice("nodeport-addresses"); !slices.Equal(got, []string{"10.0.0.0/8", "192.168.0.0/16"}) {
		t.Errorf("nodeport-addresses = %v", got)
	}
}

func TestApplyToFlagsEveryFieldFitsRunFlags(t *testing.T) {
	for _, doc := range []string{
		ownHeader + `
kubeconfig: /k
manifests: /m
hostnameOverride: n1
scheduler: twos
syncPeriod: 1m
minSyncPeriod: 0s
nodePortAddresses: [primary]
serviceNodePortRange: 1-65535
dummyInterface: kipvs
gracefulTerminationTimeout: 0s
ipvsTCPTimeout: 1h
ipvsTCPFinTimeout: 1m
ipvsUDPTimeout: 1m
strictARP: true
healthzBindAddress: ""
metricsBindAddress: "::1"
logLevel: warn
clusterCIDR: fd00::/48
masqueradeAll: true
excludeCIDRs: []
`, kubeadmConfig(t),
	} {
		s, _ := parseOK(t, doc)
		fs := runLikeFlags()
		_ = fs.Parse(nil)
		if err := ApplyToFlags(s, fs); err != nil {
			t.Errorf("%s: %v", s.Kind, err)
		}
		for name, v := range s.Values {
			if !fs.Changed(name) {
				t.Errorf("--%s=%q was not applied", name, v)
			}
		}
	}
}

func TestApplyToFlagsErrors(t *testing.T) {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.Duration("sync-period", time.Second, "")
	err := ApplyToFlags(&Settings{Values: map[string]string{"cluster-cidr": "10.0.0.0/8"}}, fs)
	if err == nil || err.Error() != "config: the file sets cluster-cidr, but this command has no --cluster-cidr flag" {
		t.Errorf("missing flag: %v", err)
	}
	err = ApplyToFlags(&Settings{Values: map[string]string{"sync-period": "soon"}}, fs)
	if err == nil || !strings.Contains(err.Error(), `config: --sync-period="soon"`) {
		t.Errorf("bad value: %v", err)
	}
	if err := ApplyToFlags(nil, fs); err != nil {
		t.Errorf("nil settings: %v", err)
	}
}

// The kube-proxy logging and conntrack fields kube-ipvs cannot honour are refused, each
// naming the field and why; the zero values kubeadm writes pass.
func TestKubeProxyLoggingAndConntrackRefusals(t *testing.T) {
	for doc, want := range map[string]string{
		"logging:\n  vmodule:\n  - filePattern: proxier.go\n    verbosity: 5\n": "logging.vmodule: [{\"filePattern\":\"proxier.go\",\"verbosity\":5}] is not supported: kube-ipvs has no per-file verbosity",
		"logging:\n  options:\n    json:\n      splitStream: true\n":            "logging.options.json.splitStream: true is not supported: kube-ipvs writes every log line to stderr",
		"logging:\n  format: logfmt\n":                                          `logging.format: "logfmt": kube-ipvs writes text or json`,
		"conntrack:\n  max: 100000\n":                                           "conntrack.max: 100000 is not supported: removed from kube-proxy",
		"oomScoreAdj: -1001\n":                                                  "oomScoreAdj: -1001 must be between -1000 and 1000",
	} {
		_, _, err := Parse([]byte(kpHeader + doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want it to contain %q", doc, err, want)
		}
	}
	s, warnings := parseOK(t, kpHeader+`
logging:
  flushFrequency: 5s
  vmodule: []
  options:
    json: {infoBufferSize: "0", splitStream: false}
    text: {infoBufferSize: "0"}
conntrack:
  max: null
  maxPerCore: 0
  udpTimeout: 0s
oomScoreAdj: 0
`)
	want := map[string]string{"conntrack-max-per-core": "0", "oom-score-adj": "0"}
	if len(warnings) != 0 || !maps.Equal(s.Values, want) {
		t.Errorf("values %v warnings %q, want %v and none", s.Values, warnings, want)
	}
}
