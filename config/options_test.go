package config

import (
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/kube-ipvs/kube-ipvs/dummyif"
	"github.com/kube-ipvs/kube-ipvs/sysctl"
)

func optionsFlags(t *testing.T, args ...string) (*Options, *pflag.FlagSet) {
	t.Helper()
	o := &Options{}
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return o, fs
}

// Every setting a file can carry lands on a flag AddFlags defines, so none is dropped.
func TestAddFlagsDefinesEveryFileSetting(t *testing.T) {
	_, fs := optionsFlags(t)
	for _, name := range FlagNames() {
		if fs.Lookup(name) == nil {
			t.Errorf("files can set %q but AddFlags defines no such flag", name)
		}
	}
}

// optionTable is the one list of run settings: every field of Options is bound by exactly one
// flag, every row has a file field unless it is one of the few flags no file sets, and a row
// with a field has a parser.
func TestOptionTableCoversOptions(t *testing.T) {
	var o Options
	fields := map[any]string{} // a pointer to each field of o (nested structs opened) -> its name
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		for i := range v.NumField() {
			f, name := v.Field(i), prefix+v.Type().Field(i).Name
			if f.Kind() == reflect.Struct {
				walk(f, name+".")
				continue
			}
			fields[f.Addr().Interface()] = name
		}
	}
	walk(reflect.ValueOf(&o).Elem(), "")

	fileless := []string{"config", "init-only", "iptables-backend", "mode", "once"}
	bound := map[string]string{}
	var noField []string
	for _, opt := range optionTable {
		name, ok := fields[opt.bind.target(&o)]
		switch {
		case !ok:
			t.Errorf("--%s is bound to no field of Options", opt.flag)
		case bound[name] != "":
			t.Errorf("Options.%s is bound by --%s and --%s", name, bound[name], opt.flag)
		default:
			bound[name] = opt.flag
		}
		if opt.field == "" {
			noField = append(noField, opt.flag)
		}
		if (opt.field == "") != (opt.parse == nil) {
			t.Errorf("--%s: field %q; a row has a parser exactly when it has a field", opt.flag, opt.field)
		}
	}
	for _, name := range fields {
		if bound[name] == "" {
			t.Errorf("Options.%s has no row in optionTable", name)
		}
	}
	slices.Sort(noField)
	if !slices.Equal(noField, fileless) {
		t.Errorf("flags no KubeIPVSConfiguration field sets: %v, want %v (give a new row a field, and document it in deploy/configmap.yaml)", noField, fileless)
	}

	// AddFlags defines each row's flag, once (pflag panics on a name defined twice).
	_, fs := optionsFlags(t)
	n := 0
	fs.VisitAll(func(*pflag.Flag) { n++ })
	if n != len(optionTable) {
		t.Errorf("AddFlags defines %d flags; optionTable has %d rows", n, len(optionTable))
	}
}

func TestValidateParsesTheOptions(t *testing.T) {
	o, _ := optionsFlags(t)
	p, err := o.Validate()
	if err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
	defaultConntrack := sysctl.Conntrack{MaxPerCore: 32768, Min: 131072, TCPEstablishedTimeout: 24 * time.Hour, TCPCloseWaitTimeout: time.Hour}
	want := Parsed{LogLevel: slog.LevelInfo, NodePortMin: 30000, NodePortMax: 32767, VIPBinding: dummyif.BindAddress,
		RateEstimation: sysctl.RateEstimationKernel, MasqueradeMark: 0x4000, Conntrack: defaultConntrack}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("defaults parsed to %+v, want %+v", p, want)
	}

	o, _ = optionsFlags(t, "--log-level=debug", "--nodeport-addresses=10.1.2.3/8, fd00::1/64",
		"--exclude-cidrs=192.168.1.7/24", "--cluster-cidr=10.244.0.0/16,fd00:10:244::/56", "--service-node-port-range=20000-20010",
		"--service-cidr=10.96.0.1/12,fd00:96::/108", "--vip-binding=route", "--ipvs-rate-estimation=off")
	if p, err = o.Validate(); err != nil {
		t.Fatal(err)
	}
	want = Parsed{
		LogLevel:          slog.LevelDebug,
		NodePortAddresses: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/64")},
		ExcludeCIDRs:      []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24")},
		ClusterCIDRs:      []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")},
		ServiceCIDRs:      []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:96::/108")},
		NodePortMin:       20000, NodePortMax: 20010,
		VIPBinding: dummyif.BindRoute, RateEstimation: sysctl.RateEstimationOff, MasqueradeMark: 0x4000, Conntrack: defaultConntrack,
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("parsed %+v\nwant   %+v", p, want)
	}

	o, _ = optionsFlags(t, "--nodeport-addresses=primary")
	if p, err = o.Validate(); err != nil || !p.NodePortPrimary || p.NodePortAddresses != nil {
		t.Errorf("primary: %+v, %v", p, err)
	}
	// kube-proxy 1.37's keywords combine with CIDRs; all means every address, whatever else.
	o, _ = optionsFlags(t, "--nodeport-addresses=primary,10.1.0.0/16")
	if p, err = o.Validate(); err != nil || !p.NodePortPrimary || !slices.Equal(p.NodePortAddresses, []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}) {
		t.Errorf("primary and a CIDR: %+v, %v", p, err)
	}
	o, _ = optionsFlags(t, "--nodeport-addresses=10.1.0.0/16,all,primary")
	if p, err = o.Validate(); err != nil || p.NodePortPrimary || p.NodePortAddresses != nil {
		t.Errorf("all: %+v, %v", p, err)
	}

	// Local traffic detection, the masquerade bit and the primary IP.
	for _, tc := range []struct {
		args  []string
		iface string
		node  bool
	}{
		{[]string{"--detect-local-mode=BridgeInterface", "--pod-bridge-interface=cbr0"}, "cbr0", false},
		{[]string{"--detect-local-mode=InterfaceNamePrefix", "--pod-interface-name-prefix=veth"}, "veth+", false},
		{[]string{"--detect-local-mode=NodeCIDR", "--pod-bridge-interface=cbr0"}, "", true},
		{[]string{"--detect-local-mode=ClusterCIDR", "--pod-interface-name-prefix=veth"}, "", false},
		{[]string{"--detect-local-mode="}, "", false},
	} {
		o, _ = optionsFlags(t, tc.args...)
		if p, err = o.Validate(); err != nil || p.LocalInterface != tc.iface || p.LocalFromNode != tc.node {
			t.Errorf("%v: LocalInterface %q LocalFromNode %v, %v", tc.args, p.LocalInterface, p.LocalFromNode, err)
		}
	}
	o, _ = optionsFlags(t, "--iptables-masquerade-bit=15", "--bind-address=::ffff:192.168.1.10")
	if p, err = o.Validate(); err != nil || p.MasqueradeMark != 0x8000 || p.PrimaryNodeIP != netip.MustParseAddr("192.168.1.10") {
		t.Errorf("masquerade bit and bind address: %+v, %v", p, err)
	}
	o, _ = optionsFlags(t, "--bind-address=::")
	if p, err = o.Validate(); err != nil || p.PrimaryNodeIP.IsValid() {
		t.Errorf("--bind-address=:: is no override: %+v, %v", p, err)
	}
}

// A value is judged by the same rule whether a flag or the file gives it; only the place
// named in the error differs.
func TestValidateAndTheFileShareTheirRules(t *testing.T) {
	cases := []struct{ flag, field, rule string }{
		{"--scheduler=fastest", `scheduler: fastest`, "not an IPVS scheduler; use one of rr, wrr"},
		{"--sync-period=0s", `syncPeriod: 0s`, "must be positive"},
		{"--log-level=loud", `logLevel: loud`, "not a log level; use debug, info, warn or error"},
		{"--nodeport-addresses=10.0.0.0/8,bogus", `nodePortAddresses: [10.0.0.0/8, bogus]`, `"bogus" is not a CIDR (e.g. 10.0.0.0/8 or fd00::/64)`},
		{"--nodeport-addresses=primary,localhost", `nodePortAddresses: [primary, localhost]`, `"localhost" is not supported: NodePorts on loopback addresses exist only in kube-proxy's iptables and nftables modes`},
		{"--iptables-masquerade-bit=13", `masqueradeBit: 13`, "kube-ipvs can use bit 14 (the default) or 15 only"},
		{"--bind-address=node-1", `bindAddress: node-1`, "not an IP address"},
		{"--exclude-cidrs=10.1.0.0", `excludeCIDRs: [10.1.0.0]`, `"10.1.0.0" is not a CIDR (e.g. 10.0.0.0/8 or fd00::/64)`},
		{"--cluster-cidr=10.244.0.0/33", `clusterCIDR: 10.244.0.0/33`, `"10.244.0.0/33" is not a CIDR (e.g. 10.0.0.0/8 or fd00::/64)`},
		{"--service-cidr=10.96.0.0/12,10.97.0.0", `serviceCIDRs: [10.96.0.0/12, 10.97.0.0]`, `"10.97.0.0" is not a CIDR (e.g. 10.0.0.0/8 or fd00::/64)`},
		{"--service-cidr=::ffff:10.96.0.0/108", `serviceCIDRs: ["::ffff:10.96.0.0/108"]`, `"::ffff:10.96.0.0/108" is IPv4-mapped; write the IPv4 CIDR`},
		{"--service-cidr=::/0", `serviceCIDRs: ["::/0"]`, `"::/0" is a whole address family; a Service CIDR must be narrower`},
		{"--service-node-port-range=32767-30000", `serviceNodePortRange: 32767-30000`, "the low port 32767 is above the high port 30000"},
		{"--service-node-port-range=0-100", `serviceNodePortRange: 0-100`, "want LOW-HIGH with ports 1 to 65535"},
	}
	for _, tc := range cases {
		o, _ := optionsFlags(t, tc.flag)
		_, flagErr := o.Validate()
		_, _, fileErr := Parse([]byte(ownHeader + tc.field + "\n"))
		if flagErr == nil || !strings.Contains(flagErr.Error(), tc.rule) || !strings.HasPrefix(flagErr.Error(), strings.SplitN(tc.flag, "=", 2)[0]) {
			t.Errorf("%s: Validate: %v; want an error naming the flag and saying %q", tc.flag, flagErr, tc.rule)
		}
		if fileErr == nil || !strings.Contains(fileErr.Error(), tc.rule) {
			t.Errorf("%s: Parse: %v; want an error saying %q", tc.field, fileErr, tc.rule)
		}
	}
	for _, args := range [][]string{{"--min-sync-period=1m"}, {"--mode=ebpf"}, {"--iptables-backend=ebpf"}, {"--vip-binding=routes"},
		{"--service-cidr=10.0.0.0/8", "--cluster-cidr=10.244.0.0/16"}, {"--cleanup-kube-proxy", "--once"},
		{"--detect-local-mode=Bridge"}, {"--detect-local-mode=BridgeInterface"}, {"--detect-local-mode=InterfaceNamePrefix", "--pod-interface-name-prefix=a-very-long-prefix"},
		{"--kube-api-qps=-1"}, {"--config-sync-period=-1s"}} {
		o, _ := optionsFlags(t, args...)
		if _, err := o.Validate(); err == nil || !strings.HasPrefix(err.Error(), strings.SplitN(args[0], "=", 2)[0]) {
			t.Errorf("%v: %v; want an error naming the flag", args, err)
		}
	}
}

func TestReadConfigFileCommandLineWins(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte(ownHeader+"scheduler: wrr\nsyncPeriod: 10s\nexcludeCIDRs: [172.16.0.0/12]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, fs := optionsFlags(t, "--config", file, "--scheduler=lc")
	warnings, err := o.ReadConfigFile(fs)
	if err != nil || len(warnings) != 0 {
		t.Fatalf("ReadConfigFile: %v %q", err, warnings)
	}
	if o.Scheduler != "lc" || o.SyncPeriod != 10*time.Second || !reflect.DeepEqual(o.ExcludeCIDRs, []string{"172.16.0.0/12"}) || o.MinSyncPeriod != time.Second {
		t.Errorf("after file and flags: %+v", o)
	}

	o, fs = optionsFlags(t)
	if warnings, err := o.ReadConfigFile(fs); err != nil || warnings != nil || o.Scheduler != "rr" {
		t.Errorf("without --config: %v %q %+v", err, warnings, o)
	}
	o, fs = optionsFlags(t, "--config", filepath.Join(t.TempDir(), "missing.yaml"))
	if _, err := o.ReadConfigFile(fs); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

// -v 4 and more logs debug lines (kube-proxy's V(4)); bad logging, oom and conntrack values
// are refused naming the flag.
func TestValidateLoggingOOMAndConntrack(t *testing.T) {
	o, _ := optionsFlags(t, "-v", "4")
	if p, err := o.Validate(); err != nil || p.LogLevel != slog.LevelDebug {
		t.Errorf("-v 4: level %v, %v; want debug", p.LogLevel, err)
	}
	for args, want := range map[string]string{
		"--logging-format=logfmt":     `--logging-format="logfmt": use text or json`,
		"--oom-score-adj=-1001":       "--oom-score-adj=-1001: must be between -1000 and 1000",
		"--conntrack-min=-1":          "--conntrack-min=-1: must be between 0",
		"--conntrack-udp-timeout=-1s": "--conntrack-udp-timeout=-1s: must not be negative",
		"-v=-1":                       "-v=-1: must be 0 or more",
	} {
		o, _ := optionsFlags(t, args)
		if _, err := o.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}
