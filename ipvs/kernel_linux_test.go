package ipvs

import (
	"net"
	"testing"

	mobyipvs "github.com/moby/ipvs"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// The conversions to and from moby/ipvs, without a kernel.
func TestConversions(t *testing.T) {
	spec := model.VSSpec{Scheduler: "sh", Flags: model.FlagSchedFallbk | model.FlagHashed, Timeout: 30}
	s := service(kA, spec)
	if s.AddressFamily != unix.AF_INET || s.Netmask != 0xffffffff || len(s.Address.To4()) != 4 ||
		s.Protocol != unix.IPPROTO_TCP || s.Port != 80 || s.Flags != model.FlagSchedFallbk || s.Timeout != 30 {
		t.Errorf("IPv4 service %+v", s)
	}
	s6 := service(k6, model.VSSpec{Scheduler: "rr"})
	if s6.AddressFamily != unix.AF_INET6 || s6.Netmask != 128 || len(s6.Address) != 16 {
		t.Errorf("IPv6 service %+v", s6)
	}
	d := destination(rs("10.244.0.1:8080"), 7)
	if d.AddressFamily != unix.AF_INET || d.Weight != 7 || d.ConnectionFlags != mobyipvs.ConnectionFlagMasq || d.Port != 8080 {
		t.Errorf("destination %+v", d)
	}

	// What the kernel lists: HASHED set, IPv4 as 4 bytes.
	listedSvc := &mobyipvs.Service{AddressFamily: unix.AF_INET, Address: net.IPv4(10, 96, 0, 2).To4(), Protocol: unix.IPPROTO_UDP,
		Port: 53, SchedName: "sh", Flags: model.FlagHashed | model.FlagSchedPort, Timeout: 0}
	if k, ok := keyOf(listedSvc); !ok || k != kB {
		t.Errorf("keyOf = %v, %v; want %v", k, ok, kB)
	}
	if got := specOf(listedSvc); got != (model.VSSpec{Scheduler: "sh", Flags: model.FlagSchedPort}) {
		t.Errorf("specOf = %+v", got)
	}
	if k, ok := keyOf(&mobyipvs.Service{AddressFamily: unix.AF_INET6, FWMark: 7, Protocol: unix.IPPROTO_TCP}); !ok || k != model.FWMarkKey(7, true) {
		t.Errorf("firewall-mark service: keyOf = %v, %v; want %v (mark and family only)", k, ok, model.FWMarkKey(7, true))
	}
}

// service builds moby/ipvs's form of a key and spec: the reference encoding the guest
// tests cross-check the project's own (genl) against. moby/ipvs sends the flags with a
// mask of all ones, so the kernel sets its flags to exactly these (and adds HASHED itself).
// The netmask only matters for persistence: a single address, as kube-proxy does.
func service(key model.VSKey, spec model.VSSpec) *mobyipvs.Service {
	s := &mobyipvs.Service{
		Address:       net.IP(key.Addr.AsSlice()),
		Protocol:      uint16(key.Proto),
		Port:          key.Port,
		FWMark:        key.FWMark,
		SchedName:     spec.Scheduler,
		Flags:         spec.Flags & model.FlagsWeManage,
		Timeout:       spec.Timeout,
		AddressFamily: unix.AF_INET,
		Netmask:       0xffffffff,
	}
	if key.Addr.Is6() {
		s.AddressFamily, s.Netmask = unix.AF_INET6, 128
	}
	return s
}

// destination is moby/ipvs's form of a real server (masquerading), for the same checks.
func destination(rs model.RSKey, weight uint32) *mobyipvs.Destination {
	d := &mobyipvs.Destination{
		Address:         net.IP(rs.Addr.AsSlice()),
		Port:            rs.Port,
		Weight:          int(weight),
		ConnectionFlags: mobyipvs.ConnectionFlagMasq,
		AddressFamily:   unix.AF_INET,
	}
	if rs.Addr.Is6() {
		d.AddressFamily = unix.AF_INET6
	}
	return d
}
