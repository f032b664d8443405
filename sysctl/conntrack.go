package sysctl

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Conntrack is kube-proxy's conntrack section (KubeProxyConfiguration.conntrack, or the
// --conntrack-* flags): the connection-tracking table's size and timeouts. A zero field
// leaves the kernel's value as it is, as in kube-proxy.
type Conntrack struct {
	// MaxPerCore and Min size the table: nf_conntrack_max is MaxPerCore x the node's CPUs
	// (capped at ConntrackMaxCap), and at least Min. MaxPerCore 0 leaves the size alone.
	MaxPerCore, Min int
	// TCPEstablishedTimeout, TCPCloseWaitTimeout, UDPTimeout and UDPStreamTimeout set
	// nf_conntrack_tcp_timeout_established, _tcp_timeout_close_wait, _udp_timeout and
	// _udp_timeout_stream, in whole seconds.
	TCPEstablishedTimeout, TCPCloseWaitTimeout, UDPTimeout, UDPStreamTimeout time.Duration
	// TCPBeLiberal sets nf_conntrack_tcp_be_liberal=1: out-of-window TCP packets are not
	// marked invalid (so not dropped), which asymmetric paths through middleboxes need.
	TCPBeLiberal bool
}

// ConntrackMaxCap is kube-proxy's cap (since 1.36) on the size it scales by CPUs: the table
// of a 512-CPU node would otherwise take gigabytes of kernel memory.
const ConntrackMaxCap = 1 << 20

// Names of the conntrack settings, for logs and tests.
const (
	ConntrackMaxName = "net.netfilter.nf_conntrack_max"
	// ConntrackHashsizeFile is the hash table's size, a module parameter under SysRoot, and
	// ConntrackHashsizeName its name in logs.
	ConntrackHashsizeFile = "module/nf_conntrack/parameters/hashsize"
	ConntrackHashsizeName = "/sys/" + ConntrackHashsizeFile
)

// ConntrackMax is the table size c asks for on a node with cpus CPUs: MaxPerCore x cpus,
// capped at ConntrackMaxCap, and never below Min; 0 means leave it alone.
//
// kube-proxy v1.37 returns the cap even when Min is above it; kube-ipvs keeps Min, the floor
// its documentation promises "regardless of conntrack-max-per-core"
// (docs/differences-from-kube-proxy.md, D11).
func ConntrackMax(c Conntrack, cpus int) int {
	if c.MaxPerCore <= 0 {
		return 0
	}
	return max(min(c.MaxPerCore*cpus, ConntrackMaxCap), c.Min)
}

// ForConntrack returns the settings c asks for on a node with cpus CPUs. The table size and
// its hash size (a quarter of it, as kube-proxy sets) are floors: a node whose operator
// raised them further keeps its values. The timeouts and tcpBeLiberal are set exactly.
func ForConntrack(c Conntrack, cpus int) []Setting {
	var s []Setting
	if m := ConntrackMax(c, cpus); m > 0 {
		s = append(s,
			Setting{Name: ConntrackMaxName, Value: strconv.Itoa(m), AtLeast: true,
				Why: "conntrack.maxPerCore/min: room for this many tracked connections; when the table is full the kernel drops new connections (nf_conntrack: table full, dropping packet)"},
			Setting{Name: ConntrackHashsizeName, File: ConntrackHashsizeFile, Value: strconv.Itoa(m / 4), AtLeast: true,
				Why: "the conntrack hash table sized for nf_conntrack_max, so look-ups stay short"})
	}
	timeout := func(d time.Duration, name, field string) {
		if secs := int64(d / time.Second); secs > 0 {
			s = append(s, Setting{Name: "net.netfilter." + name, Value: strconv.FormatInt(secs, 10),
				Why: "conntrack." + field})
		}
	}
	timeout(c.TCPEstablishedTimeout, "nf_conntrack_tcp_timeout_established", "tcpEstablishedTimeout: how long an idle established TCP connection stays tracked")
	timeout(c.TCPCloseWaitTimeout, "nf_conntrack_tcp_timeout_close_wait", "tcpCloseWaitTimeout: how long a TCP connection in CLOSE_WAIT stays tracked")
	if c.TCPBeLiberal {
		s = append(s, Setting{Name: "net.netfilter.nf_conntrack_tcp_be_liberal", Value: "1",
			Why: "conntrack.tcpBeLiberal: out-of-window TCP packets are not marked invalid (asymmetric paths through middleboxes)"})
	}
	timeout(c.UDPTimeout, "nf_conntrack_udp_timeout", "udpTimeout: how long a one-way UDP flow stays tracked")
	timeout(c.UDPStreamTimeout, "nf_conntrack_udp_timeout_stream", "udpStreamTimeout: how long a UDP flow with replies stays tracked")
	return s
}

// CPUs is the number of CPUs the node has online, from /sys/devices/system/cpu/online;
// runtime.NumCPU when that cannot be read. Not runtime.NumCPU first: that counts the CPUs
// this process may run on, and a proxy pinned to a few CPUs would size the whole node's
// table by them (kubernetes #99225).
func CPUs() int {
	b, err := os.ReadFile(SysRoot + "/devices/system/cpu/online")
	if err != nil {
		return runtime.NumCPU()
	}
	if n := countCPUList(strings.TrimSpace(string(b))); n > 0 {
		return n
	}
	return runtime.NumCPU()
}

// countCPUList counts the CPUs of a kernel CPU list, "0-3,8,10-11"; 0 when it is malformed.
func countCPUList(s string) int {
	n := 0
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0
			}
		}
		n += b - a + 1
	}
	return n
}

// TableSizeIsHosts reports whether nf_conntrack_max is read-only for every process here
// because this is not the initial network namespace: the kernel gives the sysctl mode 0444
// in other namespaces (the table and its hash are the host's), where a read-only mount
// leaves the mode alone. A proxy run in such a namespace (a test node, a nested cluster)
// cannot size the table, and should not try.
func TableSizeIsHosts() bool {
	fi, err := os.Stat(path(ConntrackMaxName))
	return err == nil && fi.Mode().Perm()&0o222 == 0
}
