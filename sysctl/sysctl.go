// Package sysctl sets the kernel parameters the IPVS proxy needs, with errors that name the
// parameter, and decides the version-dependent ones.
package sysctl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Setting is one sysctl, by its dotted name.
type Setting struct {
	Name, Value string
	// Why is shown in errors and logs: an operator who sees a failure needs to know what
	// breaks without it.
	Why string
	// AtLeast makes Value a floor (a whole number): a larger current value is left alone.
	// Table sizes are raised, never lowered, since the operator or another component may
	// have raised them further for a reason.
	AtLeast bool
	// File is the setting's path under SysRoot when it is a kernel module parameter rather
	// than a sysctl (module/nf_conntrack/parameters/hashsize); Name then names it in logs.
	File string
}

// Root is where sysctls live, and SysRoot where module parameters do; tests point them
// elsewhere.
var (
	Root    = "/proc/sys"
	SysRoot = "/sys"
)

func path(name string) string {
	return filepath.Join(Root, strings.ReplaceAll(name, ".", "/"))
}

func (s Setting) path() string {
	if s.File != "" {
		return filepath.Join(SysRoot, s.File)
	}
	return path(s.Name)
}

// satisfied reports whether the current value cur already meets s.
func (s Setting) satisfied(cur string) bool {
	if !s.AtLeast {
		return cur == s.Value
	}
	have, err1 := strconv.ParseInt(cur, 10, 64)
	want, err2 := strconv.ParseInt(s.Value, 10, 64)
	return err1 == nil && err2 == nil && have >= want
}

// Error is a setting Apply could not make: the setting, the value it holds now ("" when it
// could not be read) and why the write failed.
type Error struct {
	Setting Setting
	Current string
	Err     error
}

func (e *Error) Error() string {
	have := ""
	if e.Current != "" {
		have = ", now " + e.Current
	}
	kind := "sysctl "
	if e.Setting.File != "" {
		kind = ""
	}
	return fmt.Sprintf("%s%s=%s (%s%s): %v", kind, e.Setting.Name, e.Setting.Value, e.Setting.Why, have, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Unwritable reports whether the setting exists but this process may not change it: /proc/sys
// (or /sys) mounted read-only, as container runtimes do in every container that is not
// privileged, or a missing capability.
func (e *Error) Unwritable() bool {
	return errors.Is(e.Err, syscall.EROFS) || errors.Is(e.Err, syscall.EACCES) || errors.Is(e.Err, syscall.EPERM)
}

// Errors lists the *Error values in an error Apply returned.
func Errors(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		if e, ok := err.(*Error); ok {
			out = append(out, e)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return out
}

// Get reads a sysctl.
func Get(name string) (string, error) {
	b, err := os.ReadFile(path(name))
	if err != nil {
		return "", fmt.Errorf("sysctl %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// read returns a setting's current value.
func (s Setting) read() (string, error) {
	b, err := os.ReadFile(s.path())
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// Apply sets each setting whose current value does not meet it (so a restart writes
// nothing) and returns one *Error per setting that failed, joined, naming it and why it
// matters.
func Apply(settings []Setting) (changed []Setting, err error) {
	var errs []error
	for _, s := range settings {
		cur, gerr := s.read()
		if gerr == nil && s.satisfied(cur) {
			continue
		}
		// No O_CREATE: a setting the kernel lacks is an error, not a new file.
		f, werr := os.OpenFile(s.path(), os.O_WRONLY|os.O_TRUNC, 0)
		if werr == nil {
			_, werr = f.WriteString(s.Value)
			if cerr := f.Close(); werr == nil {
				werr = cerr
			}
		}
		if werr != nil {
			errs = append(errs, &Error{Setting: s, Current: cur, Err: werr})
			continue
		}
		changed = append(changed, s)
	}
	return changed, errors.Join(errs...)
}

// Options are the proxy settings that decide sysctls.
type Options struct {
	// StrictARP sets arp_ignore=1 and arp_announce=2 on all interfaces, so the node does not
	// answer ARP for VIPs on kube-ipvs0 (needed by MetalLB's layer-2 mode).
	StrictARP bool
	// RateEstimation is --ipvs-rate-estimation: net.ipv4.vs.run_estimation left as the
	// kernel has it (RateEstimationKernel, ""), or set.
	RateEstimation RateEstimation
}

// RateEstimation is whether the kernel estimates the rates (connections, packets and bytes
// a second, ipvsadm --rate) of every virtual and real server: net.ipv4.vs.run_estimation.
//
// Why a proxy would turn it off: before Linux 6.2 one timer walks every estimator (one per
// virtual server and one per real server: 770,000 at 50,000 Services) every two seconds,
// under the lock that adding or deleting a real server takes. Measured in the guest (6.1,
// 50,000 Services): a change that adds or removes an endpoint waited for that walk for up
// to 300 ms, and churn p99 was 275 ms with it on and 142 ms with it off; the kernel patch
// that added the switch reports the walk running over 200 ms on a 104-CPU machine at 50,000
// Services. Linux 6.2 moved the estimators to kernel threads. The cumulative counters
// (ipvsadm --stats) count either way.
type RateEstimation string

const (
	// RateEstimationKernel leaves net.ipv4.vs.run_estimation as it is (kube-proxy's
	// behaviour).
	RateEstimationKernel RateEstimation = "kernel"
	RateEstimationOn     RateEstimation = "on"
	RateEstimationOff    RateEstimation = "off"
)

// ParseRateEstimation reads --ipvs-rate-estimation ("" is kernel).
func ParseRateEstimation(s string) (RateEstimation, error) {
	switch r := RateEstimation(s); r {
	case "", RateEstimationKernel:
		return RateEstimationKernel, nil
	case RateEstimationOn, RateEstimationOff:
		return r, nil
	}
	return "", errors.New("use kernel (leave net.ipv4.vs.run_estimation as it is), on or off")
}

// RunEstimation is the sysctl RateEstimation sets. It came with Linux 5.16 (and RHEL 9's
// backport); on older kernels it is absent.
const RunEstimation = "net.ipv4.vs.run_estimation"

// ForProxy returns the sysctls the IPVS proxy needs on a kernel of the given release
// ("6.1.0-57-amd64").
func ForProxy(release string, o Options) []Setting {
	s := []Setting{
		{Name: "net.ipv4.ip_forward", Value: "1", Why: "forward traffic to pods on other nodes"},
		{Name: "net.ipv4.vs.conntrack", Value: "1", Why: "keep conntrack entries for IPVS connections, for iptables masquerade and filtering"},
		{Name: "net.ipv4.vs.expire_nodest_conn", Value: "1", Why: "drop connections whose real server was deleted, so clients reconnect to a live one"},
		{Name: "net.ipv4.vs.expire_quiescent_template", Value: "1", Why: "end session affinity to a real server at weight 0"},
	}
	if ConnReuseModeStalls(release) {
		s = append(s, Setting{Name: "net.ipv4.vs.conn_reuse_mode", Value: "0", Why: "avoid one-second stalls on reused source ports (kernels 4.1-5.8)"})
	}
	switch o.RateEstimation {
	case RateEstimationOff:
		s = append(s, Setting{Name: RunEstimation, Value: "0", Why: "--ipvs-rate-estimation=off: stop the kernel's rate estimation, whose walk over every virtual and real server delays endpoint changes at tens of thousands of Services on kernels before 6.2 (the setting needs Linux 5.16 or a backport)"})
	case RateEstimationOn:
		s = append(s, Setting{Name: RunEstimation, Value: "1", Why: "--ipvs-rate-estimation=on: keep the rates ipvsadm --rate shows up to date (the setting needs Linux 5.16 or a backport)"})
	}
	if o.StrictARP {
		s = append(s,
			Setting{Name: "net.ipv4.conf.all.arp_ignore", Value: "1", Why: "--strict-arp: answer ARP only for addresses on the receiving interface"},
			Setting{Name: "net.ipv4.conf.all.arp_announce", Value: "2", Why: "--strict-arp: never announce VIPs from kube-ipvs0"})
	}
	return s
}

// ConnReuseModeStalls reports whether the kernel of that release stalls reused source ports
// under the default net.ipv4.vs.conn_reuse_mode=1, so the proxy sets it to 0: the mode
// reschedules reused source ports, but on kernels 4.1 to 5.8 it also drops the first packet
// of each reused connection for a second (kubernetes #70747); 5.9 fixed that (#93297).
func ConnReuseModeStalls(release string) bool {
	maj, min, ok := Version(release)
	return ok && (maj == 4 && min >= 1 || maj == 5 && min <= 8)
}

// Version parses "major.minor" from a kernel release string.
func Version(release string) (major, minor int, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	maj, err1 := strconv.Atoi(parts[0])
	min, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return maj, min, true
}
