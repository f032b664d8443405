package modules

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// fakeRoot is a node's filesystem as far as module lookups read it.
type fakeRoot struct {
	t    *testing.T
	root string
}

func newFakeRoot(t *testing.T) *fakeRoot { return &fakeRoot{t, t.TempDir()} }

func (f *fakeRoot) write(p, s string) {
	f.t.Helper()
	p = filepath.Join(f.root, p)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

const testRelease = "6.1.0-57-amd64"

// Each source on its own, one case per way a module shows up (or seems to).
func TestLookupSources(t *testing.T) {
	cases := []struct {
		name  string
		setup func(f *fakeRoot)
		want  State
	}{{
		// kube-proxy's old check read only /proc/modules (lsmod) and so called ip_vs missing
		// on kernels that build it in: a built-in module is never listed there.
		name: "built in, listed only in modules.builtin",
		setup: func(f *fakeRoot) {
			f.write("lib/modules/"+testRelease+"/modules.builtin", "kernel/net/netfilter/ipvs/ip_vs.ko\n")
			f.write("proc/modules", "nf_conntrack 176128 1 ip_vs, Live 0x0\n")
		},
		want: State{Builtin: true},
	}, {
		name:  "built in with parameters: /sys/module without initstate",
		setup: func(f *fakeRoot) { f.write("sys/module/ip_vs/parameters/conn_tab_bits", "12\n") },
		want:  State{Builtin: true},
	}, {
		name:  "loaded, in /proc/modules",
		setup: func(f *fakeRoot) { f.write("proc/modules", "ip_vs 204800 0 - Live 0x0\n") },
		want:  State{Loaded: true},
	}, {
		name:  "loaded, /proc/modules not yet listing it",
		setup: func(f *fakeRoot) { f.write("sys/module/ip_vs/initstate", "live\n") },
		want:  State{Loaded: true},
	}, {
		name:  "being removed",
		setup: func(f *fakeRoot) { f.write("sys/module/ip_vs/initstate", "going\n") },
		want:  State{},
	}, {
		// A longer name that starts with the one looked up is another module.
		name: "only modules with longer names loaded",
		setup: func(f *fakeRoot) {
			f.write("proc/modules", "ip_vs_rr 16384 1 - Live 0x0\nip_vs_sh 16384 0 - Live 0x0\n")
			f.write("lib/modules/"+testRelease+"/modules.builtin", "kernel/net/netfilter/ipvs/ip_vs_rr.ko\n")
		},
		want: State{},
	}, {
		name: "loadable, from modules.dep",
		setup: func(f *fakeRoot) {
			f.write("lib/modules/"+testRelease+"/modules.dep", "kernel/net/netfilter/ipvs/ip_vs.ko.xz: kernel/lib/libcrc32c.ko.xz\n")
		},
		want: State{File: "kernel/net/netfilter/ipvs/ip_vs.ko.xz"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeRoot(t)
			// Every case has a module folder, so that the index is readable (Err nil).
			f.write("lib/modules/"+testRelease+"/modules.builtin", "")
			f.write("lib/modules/"+testRelease+"/modules.dep", "")
			c.setup(f)
			if got := (&Host{Root: f.root, Release: testRelease}).State(IPVS); got != c.want {
				t.Errorf("%+v, want %+v", got, c.want)
			}
		})
	}
}

// Without /lib/modules (a container without the host's mounted) the lookup still sees
// what /proc and /sys show, and says that its answer is incomplete.
func TestLookupWithoutModuleIndexes(t *testing.T) {
	f := newFakeRoot(t)
	f.write("proc/modules", "ip_set 57344 0 - Live 0x0\n")
	h := &Host{Root: f.root, Release: testRelease}
	if st := h.State(IPSet); !st.Loaded || st.Err == nil || !st.Present() {
		t.Errorf("ip_set: %+v, want loaded and an index error", st)
	}
	if st := h.State(IPVS); st.Present() || st.Err == nil {
		t.Errorf("ip_vs: %+v, want absent and an index error", st)
	}
}

// The lookup reads /proc/modules at every call (a module loaded since shows), the index
// files once.
func TestLookupSeesLoadsSinceTheLastCall(t *testing.T) {
	f := newFakeRoot(t)
	f.write("lib/modules/"+testRelease+"/modules.dep", "kernel/drivers/net/dummy.ko:\n")
	f.write("proc/modules", "")
	h := &Host{Root: f.root, Release: testRelease}
	if st := h.State(Dummy); st.Present() || st.File == "" {
		t.Fatalf("before: %+v", st)
	}
	f.write("proc/modules", "dummy 16384 0 - Live 0x0\n")
	if st := h.State(Dummy); !st.Loaded {
		t.Errorf("after the load: %+v, want loaded", st)
	}
}

// Ensure loads only what is absent: never a built-in module (which modprobe cannot load
// when the index is not visible), never a loaded one; and it returns the load's error.
func TestEnsure(t *testing.T) {
	f := newFakeRoot(t)
	f.write("lib/modules/"+testRelease+"/modules.builtin", "kernel/net/netfilter/ipvs/ip_vs.ko\n")
	f.write("lib/modules/"+testRelease+"/modules.dep", "kernel/drivers/net/dummy.ko:\n")
	f.write("proc/modules", "ip_set 57344 0 - Live 0x0\n")
	var loads []string
	failure := errors.New("modprobe: FATAL: Module xt_ipvs not found")
	h := &Host{Root: f.root, Release: testRelease, Load: func(_ context.Context, name string) error {
		loads = append(loads, name)
		if name == XTIPVS {
			return failure
		}
		return nil
	}}
	for _, name := range []string{IPVS, IPSet, Dummy} {
		if err := h.Ensure(context.Background(), name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := h.Ensure(context.Background(), XTIPVS); !errors.Is(err, failure) {
		t.Errorf("xt_ipvs: %v, want the load's error", err)
	}
	if len(loads) != 2 || loads[0] != Dummy || loads[1] != XTIPVS {
		t.Errorf("loaded %v, want dummy and xt_ipvs only", loads)
	}
}
