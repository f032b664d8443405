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
)

// Setting is one sysctl, by its dotted name.
type Setting struct {
	Name, Value string
	// Why is shown in errors and logs: an operator who sees a failure needs to know what
	// breaks without it.
	Why string
}

// Root is where sysctls live; tests point it elsewhere.
var Root = "/proc/sys"

func path(name string) string {
	return filepath.Join(Root, strings.ReplaceAll(name, ".", "/"))
}

// Get reads a sysctl.
func Get(name string) (string, error) {
	b, err := os.ReadFile(path(name))
	if err != nil {
		return "", fmt.Errorf("sysctl %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Apply sets each setting whose current value differs (so a restart writes nothing) and
// returns one error per setting that failed, naming it and why it matters.
func Apply(settings []Setting) (changed []Setting, err error) {
	var errs []error
	for _, s := range settings {
		cur, gerr := Get(s.Name)
		if gerr == nil && cur == s.Value {
			continue
		}
		if werr := os.WriteFile(path(s.Name), []byte(s.Value), 0o644); werr != nil {
			errs = append(errs, fmt.Errorf("sysctl %s=%s (%s): %w", s.Name, s.Value, s.Why, werr))
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
		{"net.ipv4.ip_forward", "1", "forward traffic to pods on other nodes"},
		{"net.ipv4.vs.conntrack", "1", "keep conntrack entries for IPVS connections, for iptables masquerade and filtering"},
		{"net.ipv4.vs.expire_nodest_conn", "1", "drop connections whose real server was deleted, so clients reconnect to a live one"},
		{"net.ipv4.vs.expire_quiescent_template", "1", "end session affinity to a real server at weight 0"},
	}
	if ConnReuseModeStalls(release) {
		s = append(s, Setting{"net.ipv4.vs.conn_reuse_mode", "0", "avoid one-second stalls on reused source ports (kernels 4.1-5.8)"})
	}
	switch o.RateEstimation {
	case RateEstimationOff:
		s = append(s, Setting{RunEstimation, "0", "--ipvs-rate-estimation=off: stop the kernel's rate estimation, whose walk over every virtual and real server delays endpoint changes at tens of thousands of Services on kernels before 6.2 (the setting needs Linux 5.16 or a backport)"})
	case RateEstimationOn:
		s = append(s, Setting{RunEstimation, "1", "--ipvs-rate-estimation=on: keep the rates ipvsadm --rate shows up to date (the setting needs Linux 5.16 or a backport)"})
	}
	if o.StrictARP {
		s = append(s,
			Setting{"net.ipv4.conf.all.arp_ignore", "1", "--strict-arp: answer ARP only for addresses on the receiving interface"},
			Setting{"net.ipv4.conf.all.arp_announce", "2", "--strict-arp: never announce VIPs from kube-ipvs0"})
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
