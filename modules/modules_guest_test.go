//go:build guest

package modules

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// TestGuestModulesOnTheRealKernel: the lookup agrees with the kernel on loaded and built-in
// modules.
func TestGuestModulesOnTheRealKernel(t *testing.T) {
	guestutil.RequireGuest(t)
	if out, err := exec.Command("modprobe", "ip_vs").CombinedOutput(); err != nil {
		t.Fatalf("modprobe ip_vs: %v\n%s", err, out)
	}
	m := &Host{Root: "/", Release: KernelRelease()}
	if st := m.State("ip_vs"); !st.Loaded || st.Builtin || st.File == "" || st.Err != nil {
		t.Errorf("ip_vs: %+v, want loaded with a module file", st)
	}
	f, err := os.Open(filepath.Join("/lib/modules", KernelRelease(), "modules.builtin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		t.Fatal("modules.builtin is empty")
	}
	name := NameOfPath(sc.Text())
	if st := m.State(name); !st.Builtin || st.Loaded {
		t.Errorf("built-in %s: %+v, want built in and not loaded", name, st)
	}
	procModules, err := os.ReadFile("/proc/modules")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(procModules), name+" ") {
		t.Errorf("built-in %s is in /proc/modules", name)
	}
}
