package config

import (
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
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

func TestValidateParsesTheOptions(t *testing.T) {
	o, _ := optionsFlags(t)
	p, err := o.Validate()
	if err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
	want := Parsed{LogLevel: slog.LevelInfo, NodePortMin: 30000, NodePortMax: 32767, VIPBinding: dummyif.BindAddress,
		RateEstimation: sysctl.RateEstimationKernel}
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
		VIPBinding: dummyif.BindRoute, RateEstimation: sysctl.RateEstimationOff,
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("parsed %+v\nwant   %+v", p, want)
	}

	o, _ = optionsFlags(t, "--nodeport-addresses=primary")
	if p, err = o.Validate(); err != nil || !p.NodePortPrimary || p.NodePortAddresses != nil {
		t.Errorf("primary: %+v, %v", p, err)
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
		{"--nodeport-addresses=primary,10.0.0.0/8", `nodePortAddresses: [primary, 10.0.0.0/8]`, `"primary" must be the only entry; it cannot be mixed with CIDRs`},
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
		{"--service-cidr=10.0.0.0/8", "--cluster-cidr=10.244.0.0/16"}, {"--cleanup-kube-proxy", "--once"}} {
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
