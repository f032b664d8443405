package bench

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"

	mobyipvs "github.com/moby/ipvs"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// probe reads IPVS through its own netlink handles, one request per look: the bench's eyes
// on the kernel, apart from the proxy's reconciler and its write counters. Real servers,
// polled every 2 ms while changes are measured, are read through a destReader; the rest
// through moby/ipvs.
type probe struct {
	h     *mobyipvs.Handle
	dests *destReader
}

func newProbe() (*probe, error) {
	h, err := mobyipvs.New("")
	if err != nil {
		return nil, err
	}
	d, err := newDestReader()
	if err != nil {
		h.Close()
		return nil, err
	}
	return &probe{h, d}, nil
}

func service(key model.VSKey) *mobyipvs.Service {
	svc := &mobyipvs.Service{
		Address: net.IP(key.Addr.AsSlice()), Protocol: uint16(key.Proto), Port: key.Port,
		AddressFamily: unix.AF_INET, Netmask: 0xffffffff,
	}
	if key.Addr.Is6() {
		svc.AddressFamily, svc.Netmask = unix.AF_INET6, 128
	}
	return svc
}

// exists reports whether the kernel has the virtual server.
func (p *probe) exists(key model.VSKey) (bool, error) {
	_, err := p.h.GetService(service(key))
	if errors.Is(err, unix.ESRCH) {
		return false, nil
	}
	return err == nil, err
}

// reals returns the real servers and weights of a virtual server. The kernel answers a
// missing virtual server's dump with nothing, as one without real servers.
func (p *probe) reals(key model.VSKey) (map[model.RSKey]uint32, error) {
	out := map[model.RSKey]uint32{}
	if err := p.dests.reals(key, func(rs model.RSKey, w uint32) { out[rs] = w }); err != nil {
		return nil, err
	}
	return out, nil
}

// cpuTimes are the guest's CPU times from /proc/stat, in seconds summed over CPUs.
type cpuTimes map[string]float64

var cpuFields = []string{"user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"}

func readCPU() cpuTimes {
	out := cpuTimes{}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return out
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 1 || f[0] != "cpu" {
		return out
	}
	for i, name := range cpuFields {
		if i+1 < len(f) {
			v, _ := strconv.ParseFloat(f[i+1], 64)
			out[name] = v / 100 // USER_HZ
		}
	}
	return out
}

func (c cpuTimes) since(before cpuTimes) map[string]float64 {
	out := map[string]float64{}
	for k, v := range c {
		out[k] = v - before[k]
	}
	return out
}
