package preflight

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/firewall"
	"github.com/kube-ipvs/kube-ipvs/modules"
)

func run(t *testing.T, f *Fake, o Options) Report {
	t.Helper()
	o.Deps = f.Deps()
	return Run(context.Background(), o)
}

func row(t *testing.T, r Report, name string) Row {
	t.Helper()
	c, ok := r.Find(name)
	if !ok {
		var names []string
		for _, c := range r.Checks {
			names = append(names, c.Name)
		}
		t.Fatalf("no row %q; rows: %s", name, strings.Join(names, ", "))
	}
	return c
}

func wantRow(t *testing.T, r Report, name string, st Status, detail, fix string) Row {
	t.Helper()
	c := row(t, r, name)
	if c.Status != st {
		t.Errorf("row %q: status %s, want %s (detail %q)", name, c.Status, st, c.Detail)
	}
	if !strings.Contains(c.Detail, detail) {
		t.Errorf("row %q: detail %q does not contain %q", name, c.Detail, detail)
	}
	if !strings.Contains(c.Fix, fix) {
		t.Errorf("row %q: fix %q does not contain %q", name, c.Fix, fix)
	}
	return c
}

// requiredModules are the module rows that decide IPVSUsable with the default scheduler rr.
var requiredModules = []string{"ip_vs", "ip_vs_rr", "nf_conntrack", "ip_set"}

func TestAllLoadedIsUsableAndLoadsNothing(t *testing.T) {
	f := NewFake()
	f.LoadAll()
	r := run(t, f, Options{})
	if !r.IPVSUsable || r.ExitCode() != 0 {
		t.Fatalf("usable %v exit %d, want true 0; blocking: %+v", r.IPVSUsable, r.ExitCode(), r.Blocking())
	}
	for _, c := range r.Checks {
		want := OK
		if c.Name == "services" || c.Name == "kernel" {
			want = Info
		}
		if c.Status != want {
			t.Errorf("row %q: %s (%s), want %s", c.Name, c.Status, c.Detail, want)
		}
	}
	wantRow(t, r, "module ip_vs", OK, "loaded", "")
	for _, op := range f.TakeOps() {
		if strings.HasPrefix(op, "modprobe") {
			t.Errorf("modprobe ran although everything was loaded: %s", op)
		}
	}
	// Every module IPVS mode needs (with the default scheduler, rr) has a row, in this order.
	var mods []string
	for _, c := range r.Checks {
		if m, ok := strings.CutPrefix(c.Name, "module "); ok {
			mods = append(mods, m)
		}
	}
	want := []string{"ip_vs", "ip_vs_rr", "nf_conntrack", "dummy", "ip_set", "ip_set_hash_ipport",
		"ip_set_hash_ipportip", "ip_set_hash_ipportnet", "ip_set_hash_ip", "ip_set_hash_net", "ip_set_bitmap_port", "xt_set", "xt_ipvs"}
	if !slices.Equal(mods, want) {
		t.Errorf("module rows %v, want %v", mods, want)
	}
	for _, name := range []string{"ipvs netlink", "ipvs probe rr", "ipset netlink", "iptables", "dummy link",
		"sysctl net.ipv4.ip_forward", "sysctl net.ipv4.vs.conntrack"} {
		row(t, r, name)
	}
}

func TestBuiltinModulesArePresent(t *testing.T) {
	f := NewFake()
	f.LoadAll()
	for _, m := range []string{"ip_vs", "ip_vs_rr", "nf_conntrack", "ip_set"} {
		delete(f.Loaded, m)
		delete(f.Files, m) // built-in modules have no module file
		f.Builtin[m] = true
	}
	r := run(t, f, Options{NoModprobe: true})
	if !r.IPVSUsable {
		t.Fatalf("built-in modules were not counted: %+v", r.Blocking())
	}
	for _, m := range []string{"ip_vs", "ip_vs_rr", "nf_conntrack", "ip_set"} {
		wantRow(t, r, "module "+m, OK, "built into the kernel", "")
	}
}

func TestMissingModulesAreLoadedByModprobe(t *testing.T) {
	f := NewFake()
	r := run(t, f, Options{})
	if !r.IPVSUsable || r.ExitCode() != 0 {
		t.Fatalf("not usable after modprobe: %+v", r.Blocking())
	}
	wantRow(t, r, "module ip_vs", OK, "loaded now by modprobe ip_vs", "")
	wantRow(t, r, "module ip_set_hash_ipportnet", OK, "loaded now by modprobe", "")
	// nf_conntrack came in as ip_vs's dependency: no modprobe of its own.
	wantRow(t, r, "module nf_conntrack", OK, "loaded", "")
	ops := f.TakeOps()
	if slices.Contains(ops, "modprobe nf_conntrack") {
		t.Errorf("nf_conntrack was loaded by ip_vs already; ops %v", ops)
	}
	first := slices.Index(ops, "modprobe ip_vs")
	probe := slices.Index(ops, "probe vs rr")
	if first < 0 || probe < first {
		t.Errorf("modules must be loaded before the probes run; ops %v", ops)
	}
}

func TestNoModprobeReportsMissingWithFixes(t *testing.T) {
	f := NewFake()
	r := run(t, f, Options{NoModprobe: true})
	if r.IPVSUsable || r.ExitCode() != 1 {
		t.Fatalf("usable %v exit %d, want false 1", r.IPVSUsable, r.ExitCode())
	}
	for _, m := range append(requiredModules, "dummy", "xt_set", "xt_ipvs", "ip_set_bitmap_port") {
		wantRow(t, r, "module "+m, Missing, "not loaded (--no-modprobe)", "modprobe "+m)
	}
	wantRow(t, r, "ipvs netlink", Skipped, "ip_vs is not loaded", "modprobe ip_vs")
	wantRow(t, r, "ipvs probe rr", Skipped, "ip_vs, ip_vs_rr", "modprobe ip_vs && modprobe ip_vs_rr")
	wantRow(t, r, "dummy link", Skipped, "dummy", "modprobe dummy")
	wantRow(t, r, "sysctl net.ipv4.vs.conntrack", Skipped, "ip_vs", "modprobe ip_vs")
	wantRow(t, r, "sysctl net.ipv4.ip_forward", OK, "writable; now 0, the proxy sets 1", "")
	for _, op := range f.TakeOps() {
		if strings.HasPrefix(op, "modprobe") || op == "probe ipvs" || strings.HasPrefix(op, "probe vs") ||
			op == "probe dummy" || op == "probe ipset" {
			t.Errorf("--no-modprobe, yet %q ran (it would load a module)", op)
		}
	}
	blocking := r.Blocking()
	if len(blocking) != 6 { // four modules, the family, the probe virtual server
		t.Errorf("blocking rows %+v, want the 4 required modules, ipvs netlink and ipvs probe rr", blocking)
	}
}

func TestModprobeFailure(t *testing.T) {
	f := NewFake()
	f.ModprobeErr["ip_vs"] = errors.New("modprobe ip_vs: exit status 1: install command /bin/false failed")
	r := run(t, f, Options{})
	if r.IPVSUsable || r.ExitCode() != 1 {
		t.Fatalf("usable %v exit %d, want false 1", r.IPVSUsable, r.ExitCode())
	}
	wantRow(t, r, "module ip_vs", Failed, "modprobe failed: modprobe ip_vs: exit status 1", "modprobe ip_vs")
	wantRow(t, r, "module ip_vs", Failed, "needed for IPVS itself", "/etc/modprobe.d")
	// The scheduler depends on ip_vs, so it fails too; nf_conntrack does not.
	wantRow(t, r, "module ip_vs_rr", Failed, "modprobe failed", "")
	wantRow(t, r, "module nf_conntrack", OK, "", "")
	wantRow(t, r, "ipvs netlink", Failed, "does not answer", "load module ip_vs first")
	wantRow(t, r, "ipvs probe rr", Skipped, "netlink family does not answer", "")
	wantRow(t, r, "sysctl net.ipv4.vs.conntrack", Missing, "does not exist", "load module ip_vs first")
	if ops := f.TakeOps(); slices.Contains(ops, "probe vs rr") {
		t.Errorf("the probe virtual server ran although the family does not answer: %v", ops)
	}
}

func TestModprobeSucceedsButLoadsNothing(t *testing.T) {
	f := NewFake()
	f.NoOpLoad["ip_vs"] = true
	r := run(t, f, Options{})
	wantRow(t, r, "module ip_vs", Failed, "succeeded but the module is not loaded", "/etc/modprobe.d")
	if r.IPVSUsable {
		t.Error("usable without ip_vs")
	}
}

func TestModuleNotShippedNamesThePackage(t *testing.T) {
	cases := map[string]string{
		"ubuntu": "linux-modules-extra-6.1.0-57-amd64",
		"debian": "linux-image-6.1.0-57-amd64",
		"fedora": "kernel-modules-extra",
		"":       "Ubuntu: linux-modules-extra-6.1.0-57-amd64",
	}
	for osID, pkg := range cases {
		t.Run(osID, func(t *testing.T) {
			f := NewFake()
			delete(f.Files, "ip_vs_sh")
			d := f.Deps()
			d.OSID = osID
			r := Run(context.Background(), Options{DefaultScheduler: "sh", Deps: d})
			c := wantRow(t, r, "module ip_vs_sh", Failed, "has no module file", pkg)
			if !strings.Contains(c.Fix, "CONFIG_IP_VS_SH") {
				t.Errorf("fix %q does not name the kernel option", c.Fix)
			}
			if r.IPVSUsable {
				t.Error("usable without the default scheduler")
			}
			f2 := NewFake()
			delete(f2.Files, "ip_vs_sh")
			d2 := f2.Deps()
			d2.OSID = osID
			r = Run(context.Background(), Options{DefaultScheduler: "sh", NoModprobe: true, Deps: d2})
			wantRow(t, r, "module ip_vs_sh", Missing, "has no module file", pkg)
		})
	}
}

func TestAnnotationSchedulers(t *testing.T) {
	// What proxy.ScanServices reads from six Services of ours (plus a headless one and
	// another proxy's) naming schedulers; proxy's tests check that reading.
	scan := &ServiceScan{Source: "--manifests m/", Services: 6,
		Schedulers: map[string][]string{"sh": {"a/web", "b/api"}, "mh": {"a/db"}, "rr": {"a/rr"}},
		Invalid:    []string{`a/typo: "roundrobin"`}}

	f := NewFake()
	f.LoadAll()
	delete(f.Loaded, "ip_vs_mh")
	delete(f.Files, "ip_vs_mh")
	r := run(t, f, Options{Services: scan})
	// mh is named only by an annotation: its rows fail, IPVS stays usable.
	if !r.IPVSUsable || r.ExitCode() != 0 {
		t.Fatalf("a missing annotation-only scheduler made IPVS unusable: %+v", r.Blocking())
	}
	wantRow(t, r, "services", OK, "6 Services from --manifests m/; schedulers named: mh (1), rr (1), sh (2)", "")
	wantRow(t, r, "scheduler annotations", Failed, `a/typo: "roundrobin"`, "one of rr, wrr")
	wantRow(t, r, "module ip_vs_mh", Failed, "scheduler mh, named by a/db", "CONFIG_IP_VS_MH")
	wantRow(t, r, "module ip_vs_sh", OK, "loaded", "")
	wantRow(t, r, "ipvs probe sh", OK, "scheduler sh", "")
	wantRow(t, r, "ipvs probe mh", Failed, "fall back to the default scheduler", "load module ip_vs_mh first")
	if c := row(t, r, "module ip_vs_mh"); c.Required {
		t.Error("an annotation-only scheduler is marked required")
	}
	// rr is the default: one row, required.
	n := 0
	for _, c := range r.Checks {
		if c.Name == "module ip_vs_rr" {
			n++
			if !c.Required {
				t.Error("the default scheduler's module is not required")
			}
		}
	}
	if n != 1 {
		t.Errorf("%d rows for ip_vs_rr, want 1", n)
	}

	// The default scheduler missing makes IPVS unusable.
	f = NewFake()
	f.LoadAll()
	f.ProbeErr["vs wrr"] = errors.New("file not found")
	r = run(t, f, Options{DefaultScheduler: "wrr"})
	wantRow(t, r, "ipvs probe wrr", Failed, "198.51.100.254:1 with scheduler wrr: file not found", "modprobe ip_vs_wrr")
	if r.IPVSUsable {
		t.Error("usable although the probe virtual server with the default scheduler failed")
	}
}

func TestServicesRow(t *testing.T) {
	f := NewFake()
	f.LoadAll()
	r := run(t, f, Options{})
	wantRow(t, r, "services", Info, "only the default scheduler", "--kubeconfig or --manifests")
	r = run(t, f, Options{Services: &ServiceScan{Source: "--kubeconfig k", Err: errors.New("connection refused")}})
	wantRow(t, r, "services", Failed, "listing Services (--kubeconfig k) failed: connection refused", "reachable")
	if !r.IPVSUsable {
		t.Error("an unreachable API server made IPVS unusable")
	}
}

func TestKernelAutoloadAfterModprobeFailure(t *testing.T) {
	// No modprobe in this container, but the host's kernel loads modules on demand.
	f := NewFake()
	f.LoadAll()
	delete(f.Loaded, "ip_vs")
	f.ModprobeErr["ip_vs"] = errors.New(`exec: "modprobe": executable file not found in $PATH`)
	f.Autoload["ipvs"] = []string{"ip_vs"}
	r := run(t, f, Options{})
	wantRow(t, r, "module ip_vs", OK, "loaded by the kernel on demand during the probes", "")
	if !r.IPVSUsable {
		t.Errorf("not usable: %+v", r.Blocking())
	}
}

func TestSysctlRows(t *testing.T) {
	f := NewFake()
	f.LoadAll()
	f.Sysctls["net.ipv4.ip_forward"] = "1"
	f.ProbeErr["sysctl net.ipv4.vs.conntrack"] = &os.PathError{Op: "open", Path: "/proc/sys/net/ipv4/vs/conntrack", Err: syscall.EROFS}
	f.ProbeErr["sysctl net.ipv4.vs.expire_nodest_conn"] = &os.PathError{Op: "open", Path: "x", Err: syscall.EACCES}
	f.Sysctls["net.ipv4.vs.conntrack"], f.Sysctls["net.ipv4.vs.expire_nodest_conn"] = "0", "0"
	// Read-only but already as the proxy needs it (set by run --init-only): fine.
	f.Sysctls["net.ipv4.vs.expire_quiescent_template"] = "1"
	f.ProbeErr["sysctl net.ipv4.vs.expire_quiescent_template"] = &os.PathError{Op: "open", Path: "/proc/sys/net/ipv4/vs/expire_quiescent_template", Err: syscall.EROFS}
	r := run(t, f, Options{StrictARP: true})
	wantRow(t, r, "sysctl net.ipv4.vs.expire_quiescent_template", OK, "read-only here", "")
	wantRow(t, r, "sysctl net.ipv4.ip_forward", OK, "writable; already 1", "")
	wantRow(t, r, "sysctl net.ipv4.vs.conntrack", Failed, "read-only", "privileged")
	wantRow(t, r, "sysctl net.ipv4.vs.expire_nodest_conn", Failed, "not writable", "root")
	wantRow(t, r, "sysctl net.ipv4.conf.all.arp_ignore", OK, "the proxy sets 1", "")
	if _, ok := r.Find("sysctl net.ipv4.vs.conn_reuse_mode"); ok {
		t.Error("conn_reuse_mode is checked on a 6.1 kernel; the proxy sets it only on 4.1-5.8")
	}
	if !r.IPVSUsable {
		t.Error("a sysctl made IPVS unusable")
	}
}

func TestOptionalProbesDoNotBlock(t *testing.T) {
	f := NewFake()
	f.LoadAll()
	for _, k := range []string{"ipset", "iptables", "dummy"} {
		f.ProbeErr[k] = errors.New(k + " broke")
	}
	r := run(t, f, Options{})
	wantRow(t, r, "ipset netlink", Failed, "ipset broke", "load ip_set")
	wantRow(t, r, "iptables", Failed, "iptables broke", "install iptables")
	wantRow(t, r, "dummy link", Failed, "create and remove dummy link kipvs-probe0: dummy broke", "CAP_NET_ADMIN")
	if !r.IPVSUsable {
		t.Errorf("optional probes blocked IPVS: %+v", r.Blocking())
	}
	f.ProbeErr = map[string]error{"ipvs": errors.New("no such file")}
	r = run(t, f, Options{})
	if r.IPVSUsable || r.ExitCode() != 1 {
		t.Error("usable although the IPVS netlink family does not answer")
	}
	wantRow(t, r, "ipvs netlink", Failed, "no such file", "CAP_NET_ADMIN")
}

func TestJSONSchema(t *testing.T) {
	f := NewFake()
	r := run(t, f, Options{NoModprobe: true})
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b.String())
	}
	if len(doc) != 2 || doc["ipvsUsable"] == nil || doc["checks"] == nil {
		t.Fatalf("top-level keys of %s, want exactly ipvsUsable and checks", b.String())
	}
	if string(doc["ipvsUsable"]) != "false" {
		t.Errorf("ipvsUsable = %s, want false", doc["ipvsUsable"])
	}
	var checks []map[string]any
	if err := json.Unmarshal(doc["checks"], &checks); err != nil {
		t.Fatal(err)
	}
	if len(checks) != len(r.Checks) {
		t.Fatalf("%d checks in JSON, %d in the report", len(checks), len(r.Checks))
	}
	statuses := []string{"ok", "missing", "failed", "skipped", "info"}
	for _, c := range checks {
		if len(c) != 4 {
			t.Errorf("check %v: want exactly name, status, detail, fix", c)
		}
		for _, k := range []string{"name", "status", "detail", "fix"} {
			if _, ok := c[k].(string); !ok {
				t.Errorf("check %v: %s is not a string", c, k)
			}
		}
		if !slices.Contains(statuses, c["status"].(string)) {
			t.Errorf("check %v: unknown status", c)
		}
	}
	if checks[1]["name"] != "module ip_vs" || checks[1]["status"] != "missing" || checks[1]["fix"] != "modprobe ip_vs" {
		t.Errorf("second check %v, want module ip_vs missing with fix modprobe ip_vs", checks[1])
	}
	// An empty report still has a checks array, never null.
	b.Reset()
	if err := (Report{}).WriteJSON(&b); err != nil || !strings.Contains(b.String(), `"checks": []`) {
		t.Errorf("empty report: %s %v", b.String(), err)
	}
}

func TestTableAlignment(t *testing.T) {
	f := NewFake()
	f.ModprobeErr["ip_vs"] = errors.New("blocked")
	r := run(t, f, Options{})
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	header := lines[0]
	cols := []int{strings.Index(header, "STATUS"), strings.Index(header, "DETAIL"), strings.Index(header, "FIX")}
	if !strings.HasPrefix(header, "CHECK ") || cols[0] < 0 || cols[1] < cols[0] || cols[2] < cols[1] {
		t.Fatalf("header %q", header)
	}
	body := lines[1 : 1+len(r.Checks)]
	for i, l := range body {
		c := r.Checks[i]
		if !strings.HasPrefix(l, c.Name) {
			t.Errorf("line %q does not start with %q", l, c.Name)
		}
		if l[cols[0]-1] != ' ' || !strings.HasPrefix(l[cols[0]:], string(c.Status)) {
			t.Errorf("status of %q not at column %d: %q", c.Name, cols[0], l)
		}
		if !strings.HasPrefix(l[cols[1]:], c.Detail) {
			t.Errorf("detail of %q not at column %d: %q", c.Name, cols[1], l)
		}
		fix := c.Fix
		if fix == "" {
			fix = "-"
		}
		if l[cols[2]:] != fix {
			t.Errorf("fix of %q not at column %d: %q", c.Name, cols[2], l)
		}
	}
	if !strings.HasPrefix(body[1], "module ip_vs *") {
		t.Errorf("required rows are not marked: %q", body[1])
	}
	last := lines[len(lines)-1]
	if !strings.Contains(last, "NOT usable") || !strings.Contains(last, "module ip_vs") {
		t.Errorf("verdict %q does not say why", last)
	}
	f = NewFake()
	b.Reset()
	_ = run(t, f, Options{}).WriteTable(&b)
	if !strings.HasSuffix(b.String(), "IPVS mode: usable\n") {
		t.Errorf("verdict of a usable node: %q", b.String())
	}
}

func TestSetTypeModules(t *testing.T) {
	want := map[firewall.SetType]string{
		firewall.HashIPPort: "ip_set_hash_ipport", firewall.HashIPPortIP: "ip_set_hash_ipportip",
		firewall.HashIPPortNet: "ip_set_hash_ipportnet", firewall.HashIP: "ip_set_hash_ip",
		firewall.HashNet: "ip_set_hash_net", firewall.BitmapPort: "ip_set_bitmap_port",
	}
	types := modules.SetTypes()
	if len(types) != len(want) {
		t.Errorf("set types %v, want %d", types, len(want))
	}
	for _, typ := range types {
		if got := modules.ForSetType(typ); got != want[typ] {
			t.Errorf("%s: module %s, want %s", typ, got, want[typ])
		}
	}
	if got := modules.KernelOption("ip_set_hash_ipportnet"); got != "CONFIG_IP_SET_HASH_IPPORTNET" {
		t.Errorf("kernel option %s", got)
	}
}

func TestOSID(t *testing.T) {
	p := filepath.Join(t.TempDir(), "os-release")
	if err := os.WriteFile(p, []byte("NAME=\"Ubuntu\"\nID=ubuntu\nID_LIKE=debian\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := osID(p); got != "ubuntu" {
		t.Errorf("osID = %q", got)
	}
	if got := osID(filepath.Join(t.TempDir(), "none")); got != "" {
		t.Errorf("osID of a missing file = %q", got)
	}
}

func TestCheckIsQuietAndAgrees(t *testing.T) {
	f := NewFake()
	usable, r := Check(context.Background(), Options{Deps: f.Deps()})
	if !usable || usable != r.IPVSUsable {
		t.Errorf("Check = %v, report %v", usable, r.IPVSUsable)
	}
}
