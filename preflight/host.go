package preflight

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/ipvs"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/sysctl"
)

// HostDeps returns the Deps of this node: the running kernel's module indexes, modprobe,
// netlink in the calling process's network namespace, the iptables tools and /proc/sys.
func HostDeps() *Deps {
	rel := kernelRelease()
	mods := &Modules{Root: "/", Release: rel}
	return &Deps{
		Module:             mods.State,
		Modprobe:           modprobe,
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

func kernelRelease() string {
	var uts unix.Utsname
	if unix.Uname(&uts) != nil {
		return ""
	}
	return unix.ByteSliceToString(uts.Release[:])
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

// Modules looks kernel modules up the way the kernel and kmod see them:
//   - /proc/modules lists loaded loadable modules;
//   - /sys/module/<name> exists for loaded modules (with an initstate file) and for
//     built-in modules that have parameters or a version (without one);
//   - /lib/modules/<release>/modules.builtin lists every built-in module. kube-proxy's old
//     check looked only at /proc/modules and so called built-in modules missing;
//   - /lib/modules/<release>/modules.dep lists the module files modprobe can load.
//
// The two index files are read once; /proc/modules and /sys/module at every lookup.
type Modules struct {
	// Root is prepended to every path ("/" on a node; a test folder in tests).
	Root string
	// Release is the running kernel's release (uname -r).
	Release string

	once    sync.Once
	builtin map[string]bool
	files   map[string]string
	idxErr  error
}

// NormalizeModule spells a module name as the kernel does: dashes become underscores.
func NormalizeModule(name string) string { return strings.ReplaceAll(name, "-", "_") }

// moduleOfPath turns "kernel/net/netfilter/ipvs/ip_vs_rr.ko.xz" into "ip_vs_rr".
func moduleOfPath(p string) string {
	base := filepath.Base(strings.TrimSpace(p))
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return NormalizeModule(base)
}

func (m *Modules) path(p ...string) string {
	return filepath.Join(append([]string{m.Root}, p...)...)
}

func (m *Modules) loadIndexes() {
	m.builtin, m.files = map[string]bool{}, map[string]string{}
	dir := ""
	for _, d := range []string{m.path("lib/modules", m.Release), m.path("usr/lib/modules", m.Release)} {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			dir = d
			break
		}
	}
	if m.Release == "" || dir == "" {
		m.idxErr = fmt.Errorf("no /lib/modules/%s (the running kernel's modules are not visible here)", m.Release)
		return
	}
	var errs []error
	if err := eachLine(filepath.Join(dir, "modules.builtin"), func(l string) {
		if l != "" {
			m.builtin[moduleOfPath(l)] = true
		}
	}); err != nil {
		errs = append(errs, err)
	}
	if err := eachLine(filepath.Join(dir, "modules.dep"), func(l string) {
		if file, _, ok := strings.Cut(l, ":"); ok {
			m.files[moduleOfPath(file)] = file
		}
	}); err != nil {
		errs = append(errs, err)
	}
	m.idxErr = errors.Join(errs...)
}

func eachLine(path string, f func(string)) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		f(sc.Text())
	}
	return sc.Err()
}

// State looks one module up.
func (m *Modules) State(name string) ModuleState {
	name = NormalizeModule(name)
	m.once.Do(m.loadIndexes)
	st := ModuleState{Builtin: m.builtin[name], File: m.files[name], Err: m.idxErr}
	if b, err := os.ReadFile(m.path("proc/modules")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == name {
				st.Loaded = true
			}
		}
	}
	if fi, err := os.Stat(m.path("sys/module", name)); err == nil && fi.IsDir() {
		b, err := os.ReadFile(m.path("sys/module", name, "initstate"))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			st.Builtin = true // built-in modules have no initstate
		case err == nil && strings.TrimSpace(string(b)) != "going":
			st.Loaded = true
		}
	}
	return st
}

// modprobe runs modprobe NAME, bounded by a timeout.
func modprobe(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "modprobe", name).CombinedOutput()
	if err != nil {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			return fmt.Errorf("modprobe %s: %w: %s", name, err, msg)
		}
		return fmt.Errorf("modprobe %s: %w", name, err)
	}
	return nil
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
	if _, gerr := k.GetVirtualServer(key); gerr == nil {
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
	vs, err := k.GetVirtualServer(key)
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
