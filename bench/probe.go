package bench

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	mobyipvs "github.com/moby/ipvs"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// probe reads IPVS through its own netlink handle, one request per look: the bench's eyes
// on the kernel, apart from the proxy's reconciler and its write counters.
type probe struct{ h *mobyipvs.Handle }

func newProbe() (*probe, error) {
	h, err := mobyipvs.New("")
	if err != nil {
		return nil, err
	}
	return &probe{h}, nil
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
	dests, err := p.h.GetDestinations(service(key))
	if err != nil {
		return nil, err
	}
	out := make(map[model.RSKey]uint32, len(dests))
	for _, d := range dests {
		if a, ok := netipAddr(d.Address); ok {
			out[model.RSKey{Addr: a, Port: d.Port}] = uint32(d.Weight)
		}
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

func netipAddr(ip net.IP) (a netip.Addr, ok bool) {
	a, ok = netip.AddrFromSlice(ip)
	return a.Unmap(), ok
}
