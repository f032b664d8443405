package preflight

import (
	"context"
	"testing"
)

func TestKernelRowByRelease(t *testing.T) {
	cases := []struct{ release, detail string }{
		{"5.4.0-150-generic", "conn_reuse_mode is set to 0"},
		{"5.10.0-46-amd64", "schedulers this kernel predates: twos (needs 6.7)"},
		{"6.1.0-57-amd64", "conn_reuse_mode is left as it is"},
		{"6.12.57+deb13-amd64", "every IPVS scheduler kube-ipvs knows exists"},
		{"weird", "not understood"},
	}
	for _, c := range cases {
		f := NewFake()
		f.LoadAll()
		d := f.Deps()
		d.KernelRelease = c.release
		wantRow(t, Run(context.Background(), Options{Deps: d}), "kernel", Info, c.detail, "")
	}
}

// A scheduler newer than the kernel: the fix says which release has it, not which package.
func TestSchedulerNewerThanTheKernel(t *testing.T) {
	scan := &ServiceScan{Source: "test", Services: 1, Schedulers: map[string][]string{"twos": {"a/new"}}}
	for _, release := range []string{"5.10.0-46-amd64", "6.1.0-57-amd64"} {
		f := NewFake()
		f.LoadAll()
		delete(f.Loaded, "ip_vs_twos")
		delete(f.Files, "ip_vs_twos")
		d := f.Deps()
		d.KernelRelease = release
		r := Run(context.Background(), Options{Services: scan, Deps: d})
		wantRow(t, r, "module ip_vs_twos", Failed, "has no module file", "exists from Linux 6.7 (CONFIG_IP_VS_TWOS) on; this kernel is "+release)
		if !r.IPVSUsable {
			t.Errorf("%s: an annotation-only scheduler made IPVS unusable", release)
		}
	}
	// On a kernel that should have it, a missing module is a packaging problem, as before.
	f := NewFake()
	delete(f.Files, "ip_vs_twos")
	d := f.Deps()
	d.KernelRelease = "6.12.57+deb13-amd64"
	r := Run(context.Background(), Options{Services: scan, Deps: d})
	wantRow(t, r, "module ip_vs_twos", Failed, "has no module file", "install linux-image-6.12.57+deb13-amd64")
}
