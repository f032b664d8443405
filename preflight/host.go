package preflight

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"

	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/modules"
	"github.com/kube-ipvs/kube-ipvs/sysctl"
)

// HostDeps returns the Deps of this node: the running kernel's module indexes, modprobe,
// netlink in the calling process's network namespace, the iptables tools and /proc/sys.
func HostDeps() *Deps {
	rel := modules.KernelRelease()
	mods := &modules.Host{Root: "/", Release: rel}
	return &Deps{
		Module:             mods.State,
		Modprobe:           modules.Modprobe,
		IPVSFamily:         ipvsFamily,
		ProbeVirtualServer: probeVirtualServer,
		IpsetProtocol:      ipsetProtocol,
		Iptables:           iptablesBackend,
		DummyLink:          dummyLink,
		Sysctl:             sysctlWritable,
		KernelRelease:      rel,
		OSID:               osID("/etc/os-release"),
	}
}

// osID reads ID= from an os-release file ("" when unknown).
func osID(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "ID="); ok {
			return strings.Trim(v, `"'`)
		}
	}
	return ""
}

// ipvsFamily resolves the IPVS generic netlink family itself (moby/ipvs would run modprobe
// and remember a failure for the life of the process).
func ipvsFamily() (string, error) {
	f, err := netlink.GenlFamilyGet("IPVS")
	if err != nil {
		return "", fmt.Errorf("resolve generic netlink family IPVS: %w", err)
	}
	return fmt.Sprintf("generic netlink family IPVS answers (id %d, version %d)", f.ID, f.Version), nil
}

// probeVirtualServer creates the probe virtual server with the scheduler, reads it back and
// deletes it; a leftover from an interrupted run is deleted first, and the probe deletes
// its virtual server whatever failed in between.
func probeVirtualServer(sched string) (err error) {
	k, err := ipvs.NewKernel()
	if err != nil {
		return err
	}
	if c, ok := k.(io.Closer); ok {
		defer c.Close()
	}
	ap := netip.MustParseAddrPort(ProbeVSAddress)
	key := model.VSKey{Addr: ap.Addr(), Proto: model.TCP, Port: ap.Port()}
	if _, gerr := ipvs.ReadVirtualServer(k, key); gerr == nil {
		if derr := k.DelService(key); derr != nil {
			return fmt.Errorf("remove the leftover probe virtual server: %w", derr)
		}
	}
	created := false
	defer func() {
		if !created {
			return
		}
		if derr := k.DelService(key); derr != nil && !errors.Is(derr, ipvs.ErrNotFound) {
			err = errors.Join(err, fmt.Errorf("clean up: %w", derr))
		}
	}()
	if err := k.NewService(key, model.VSSpec{Scheduler: sched}); err != nil {
		// Nothing should exist, but make sure of it.
		_ = k.DelService(key)
		return err
	}
	created = true
	vs, err := ipvs.ReadVirtualServer(k, key)
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if vs.Spec.Scheduler != sched {
		return fmt.Errorf("read back: the kernel reports scheduler %q", vs.Spec.Scheduler)
	}
	created = false
	if err := k.DelService(key); err != nil {
		return err
	}
	return nil
}

func ipsetProtocol() (string, error) {
	p, minP, err := netlink.IpsetProtocol()
	if err != nil {
		return "", fmt.Errorf("ipset netlink protocol: %w", err)
	}
	return fmt.Sprintf("ipset netlink protocol %d answers (oldest supported %d)", p, minP), nil
}

// iptablesBackend reuses package iptables' backend detection (the backend with more rules
// on the node; nft on a fresh one), which needs the backend's restore and save tools.
func iptablesBackend() (string, error) {
	b, err := iptables.New(iptables.OSExec{}, iptables.Config{}).Backend()
	if err != nil {
		return "", err
	}
	detail := fmt.Sprintf("backend %s (detected from the node's rules); iptables-%s-restore and ip6tables-%s-restore present", b, b, b)
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		detail += "; no plain iptables-restore on PATH (not needed)"
	}
	return detail, nil
}

// dummyLink creates a dummy link and removes it; a leftover dummy link of that name (from
// an interrupted run) is removed first, any other link of that name is left alone.
func dummyLink(name string) error {
	if l, err := netlink.LinkByName(name); err == nil {
		if l.Type() != "dummy" {
			return fmt.Errorf("a %s link named %s exists; it is not ours, so it is left alone", l.Type(), name)
		}
		if err := netlink.LinkDel(l); err != nil {
			return fmt.Errorf("remove the leftover %s: %w", name, err)
		}
	}
	if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find it after creating it: %w", err)
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	return nil
}

// sysctlWritable opens a sysctl for writing and closes it without writing: no value changes
// (writing even the same value back is not harmless: net.ipv4.ip_forward resets every
// interface's forwarding setting).
func sysctlWritable(name string) (string, error) {
	cur, err := sysctl.Get(name)
	if err != nil {
		return "", err
	}
	p := filepath.Join(sysctl.Root, strings.ReplaceAll(name, ".", "/"))
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return cur, err
	}
	return cur, f.Close()
}

// sysctlFailure classifies a sysctl probe error into status, detail and fix.
func sysctlFailure(err error) (Status, string, string) {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Missing, "does not exist", "load the module that provides it (net.ipv4.vs.*: modprobe ip_vs)"
	case errors.Is(err, syscall.EROFS):
		return Failed, "/proc/sys is read-only: " + err.Error(), "run the container privileged, or with /proc/sys mounted read-write"
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return Failed, "not writable: " + err.Error(), "run as root with CAP_NET_ADMIN in the host network namespace"
	}
	return Failed, err.Error(), ""
}
