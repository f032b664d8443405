// Package modules is the project's knowledge of kernel modules: how to tell whether one is
// in the running kernel (loaded, built in, or loadable from a file), how to load one, and
// how an operator gets one that is missing (its package, its kernel option). preflight uses
// it to check and load the modules each feature needs; `kube-ipvs run` loads them through
// preflight before it starts.
package modules

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// State is how a kernel module is present on the running kernel.
type State struct {
	// Loaded: listed in /proc/modules, or /sys/module/<name> is a live loadable module.
	Loaded bool
	// Builtin: compiled into the kernel (modules.builtin, or /sys/module/<name> without
	// initstate). A built-in module is present; it never appears in /proc/modules.
	Builtin bool
	// File is the module's file under /lib/modules/<release> per modules.dep; empty when
	// the running kernel has no such module file.
	File string
	// Err reports that the module indexes could not be read (the lookup is incomplete).
	Err error
}

// Present reports whether the module's code is in the running kernel.
func (m State) Present() bool { return m.Loaded || m.Builtin }

// KernelRelease is the running kernel's release (uname -r); "" when unknown.
func KernelRelease() string {
	var uts unix.Utsname
	if unix.Uname(&uts) != nil {
		return ""
	}
	return unix.ByteSliceToString(uts.Release[:])
}

// Host looks kernel modules up the way the kernel and kmod see them:
//   - /proc/modules lists loaded loadable modules;
//   - /sys/module/<name> exists for loaded modules (with an initstate file) and for
//     built-in modules that have parameters or a version (without one);
//   - /lib/modules/<release>/modules.builtin lists every built-in module. kube-proxy's old
//     check looked only at /proc/modules and so called built-in modules missing;
//   - /lib/modules/<release>/modules.dep lists the module files modprobe can load.
//
// The two index files are read once; /proc/modules and /sys/module at every lookup.
type Host struct {
	// Root is prepended to every path ("/" on a node; a test folder in tests).
	Root string
	// Release is the running kernel's release (uname -r).
	Release string
	// Load loads a module for Ensure; nil means Modprobe.
	Load func(ctx context.Context, name string) error

	once    sync.Once
	builtin map[string]bool
	files   map[string]string
	idxErr  error
}

// Normalize spells a module name as the kernel does: dashes become underscores.
func Normalize(name string) string { return strings.ReplaceAll(name, "-", "_") }

// NameOfPath turns "kernel/net/netfilter/ipvs/ip_vs_rr.ko.xz" into "ip_vs_rr".
func NameOfPath(p string) string {
	base := filepath.Base(strings.TrimSpace(p))
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return Normalize(base)
}

func (m *Host) path(p ...string) string {
	return filepath.Join(append([]string{m.Root}, p...)...)
}

func (m *Host) loadIndexes() {
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
			m.builtin[NameOfPath(l)] = true
		}
	}); err != nil {
		errs = append(errs, err)
	}
	if err := eachLine(filepath.Join(dir, "modules.dep"), func(l string) {
		if file, _, ok := strings.Cut(l, ":"); ok {
			m.files[NameOfPath(file)] = file
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
func (m *Host) State(name string) State {
	name = Normalize(name)
	m.once.Do(m.loadIndexes)
	st := State{Builtin: m.builtin[name], File: m.files[name], Err: m.idxErr}
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

// Modprobe runs modprobe NAME, bounded by a timeout.
func Modprobe(ctx context.Context, name string) error {
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

// Ensure loads a module unless the running kernel has it already, loaded or built in (a
// built-in module cannot be loaded: modprobe of one that modules.builtin does not list,
// as in a container without the host's /lib/modules, fails).
func (m *Host) Ensure(ctx context.Context, name string) error {
	if m.State(name).Present() {
		return nil
	}
	load := m.Load
	if load == nil {
		load = Modprobe
	}
	return load(ctx, name)
}

// running is the running kernel's modules, its index files read at the first use.
var running = sync.OnceValue(func() *Host { return &Host{Root: "/", Release: KernelRelease()} })

// Ensure loads a module into the running kernel unless it has it already.
func Ensure(ctx context.Context, name string) error { return running().Ensure(ctx, name) }
