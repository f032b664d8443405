package modules

import (
	"os"
	"path/filepath"
	"testing"
)

// TestHostModules runs the real module lookup on a fake root: no kernel involved.
func TestHostModules(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rel := "6.1.0-57-amd64"
	write("proc/modules", "ip_set 57344 0 - Live 0x0000000000000000\nnf_conntrack 176128 0 - Live 0x0000000000000000\n")
	write("sys/module/ip_vs/parameters/conn_tab_bits", "12\n") // built in: no initstate
	write("sys/module/dummy/initstate", "live\n")              // loaded, though /proc/modules lags
	write("sys/module/xt_set/initstate", "going\n")            // being removed
	write("usr/lib/modules/"+rel+"/modules.builtin", "kernel/net/netfilter/ipvs/ip_vs.ko\nkernel/net/netfilter/ipvs/ip_vs_rr.ko\n")
	write("usr/lib/modules/"+rel+"/modules.dep",
		"kernel/net/netfilter/ipvs/ip_vs_sh.ko.xz: kernel/net/netfilter/ipvs/ip_vs.ko.xz\n"+
			"kernel/net/netfilter/ipset/ip_set_hash_ipport.ko.zst: kernel/net/netfilter/ipset/ip_set.ko.zst\n"+
			"kernel/drivers/net/some-thing.ko:\n")
	m := &Host{Root: root, Release: rel}
	cases := map[string]State{
		"ip_vs":              {Builtin: true},
		"ip_vs_rr":           {Builtin: true},
		"ip_set":             {Loaded: true},
		"nf_conntrack":       {Loaded: true},
		"dummy":              {Loaded: true},
		"xt_set":             {},
		"ip_vs_sh":           {File: "kernel/net/netfilter/ipvs/ip_vs_sh.ko.xz"},
		"ip_set_hash_ipport": {File: "kernel/net/netfilter/ipset/ip_set_hash_ipport.ko.zst"},
		"some_thing":         {File: "kernel/drivers/net/some-thing.ko"},
		"some-thing":         {File: "kernel/drivers/net/some-thing.ko"},
		"ip_vs_mh":           {},
	}
	for name, want := range cases {
		if got := m.State(name); got != want {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
	none := (&Host{Root: root, Release: "9.9.9"}).State("ip_set")
	if !none.Loaded || none.Err == nil {
		t.Errorf("without /lib/modules: %+v, want loaded (from /proc/modules) and an index error", none)
	}
}
