package ipvs

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	mobyipvs "github.com/moby/ipvs"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// maxWeight is the largest weight that survives a round trip: the kernel takes a 32-bit
// weight, but moby/ipvs reads it back as 16 bits, so a larger one would never compare equal.
const maxWeight = 0xffff

// dumpAttempts bounds how often ListVirtualServers dumps again after seeing the table change.
const dumpAttempts = 3

// netlinkKernel is the Kernel over moby/ipvs's generic netlink handle, in the calling
// process's network namespace.
type netlinkKernel struct {
	mu sync.Mutex // one request at a time on the handle's socket
	h  *mobyipvs.Handle
}

// NewKernel opens an IPVS netlink handle in the current network namespace. The returned
// Kernel also implements io.Closer.
func NewKernel() (Kernel, error) {
	h, err := mobyipvs.New("")
	if err != nil {
		return nil, fmt.Errorf("open the IPVS netlink handle: %w", err)
	}
	return &netlinkKernel{h: h}, nil
}

// Close releases the netlink socket.
func (k *netlinkKernel) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.h.Close()
	return nil
}

// ListVirtualServers lists the services, then each one's destinations, then the services
// again. The kernel's IPVS dumps carry no consistency marker (it never sets
// NLM_F_DUMP_INTR), so a service listing that differs before and after, or one that repeats a
// key, means someone else changed the table meanwhile: dump again, and give up with
// ErrDumpInterrupted after a few tries.
func (k *netlinkKernel) ListVirtualServers() ([]*model.VirtualServer, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var lastErr error
	for range dumpAttempts {
		vses, err := k.dumpOnce()
		if err == nil {
			return vses, nil
		}
		if !errors.Is(err, ErrDumpInterrupted) {
			return nil, err
		}
		lastErr = err
	}
	return nil, lastErr
}

func (k *netlinkKernel) dumpOnce() ([]*model.VirtualServer, error) {
	before, err := k.listServices()
	if err != nil {
		return nil, err
	}
	vses := make([]*model.VirtualServer, 0, len(before))
	for key, s := range before {
		vs, err := k.withDestinations(key, s)
		if err != nil {
			return nil, err
		}
		vses = append(vses, vs)
	}
	after, err := k.listServices()
	if err != nil {
		return nil, err
	}
	if len(after) != len(before) {
		return nil, fmt.Errorf("list virtual servers: %d before, %d after reading real servers: %w", len(before), len(after), ErrDumpInterrupted)
	}
	for key, s := range before {
		a, ok := after[key]
		if !ok || specOf(a) != specOf(s) {
			return nil, fmt.Errorf("list virtual servers: %s changed while reading real servers: %w", key, ErrDumpInterrupted)
		}
	}
	return vses, nil
}

// listServices dumps the service table, keeping what a VSKey can express.
func (k *netlinkKernel) listServices() (map[model.VSKey]*mobyipvs.Service, error) {
	svcs, err := k.h.GetServices()
	if err != nil {
		return nil, fmt.Errorf("list virtual servers: %w", err)
	}
	out := make(map[model.VSKey]*mobyipvs.Service, len(svcs))
	for _, s := range svcs {
		key, ok := keyOf(s)
		if !ok {
			continue // a firewall-mark service, or a family we do not handle: not ours
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("list virtual servers: %s listed twice: %w", key, ErrDumpInterrupted)
		}
		out[key] = s
	}
	return out, nil
}

func (k *netlinkKernel) withDestinations(key model.VSKey, s *mobyipvs.Service) (*model.VirtualServer, error) {
	dests, err := k.h.GetDestinations(s)
	if err != nil {
		return nil, fmt.Errorf("list real servers of %s: %w", key, err)
	}
	vs := &model.VirtualServer{Key: key, Spec: specOf(s), Reals: make(map[model.RSKey]uint32, len(dests))}
	for _, d := range dests {
		addr, ok := netip.AddrFromSlice(d.Address)
		if !ok {
			return nil, fmt.Errorf("real server of %s has a malformed address %v", key, d.Address)
		}
		vs.Reals[model.RSKey{Addr: addr.Unmap(), Port: d.Port}] = uint32(d.Weight)
	}
	return vs, nil
}

func (k *netlinkKernel) GetVirtualServer(key model.VSKey) (*model.VirtualServer, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, err := k.h.GetService(service(key, model.VSSpec{}))
	if err != nil {
		return nil, fmt.Errorf("get virtual server %s: %w", key, notFound(err, unix.ESRCH))
	}
	return k.withDestinations(key, s)
}

func (k *netlinkKernel) NewService(key model.VSKey, spec model.VSSpec) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.h.NewService(service(key, spec)); err != nil {
		return serviceError("create", key, spec, err)
	}
	return nil
}

func (k *netlinkKernel) UpdateService(key model.VSKey, spec model.VSSpec) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.h.UpdateService(service(key, spec)); err != nil {
		return serviceError("update", key, spec, err)
	}
	return nil
}

func (k *netlinkKernel) DelService(key model.VSKey) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.h.DelService(service(key, model.VSSpec{})); err != nil {
		return fmt.Errorf("delete virtual server %s: %w", key, notFound(err, unix.ESRCH))
	}
	return nil
}

func (k *netlinkKernel) NewDestination(vs model.VSKey, rs model.RSKey, weight uint32) error {
	if weight > maxWeight {
		return fmt.Errorf("add real server %s to %s: weight %d is above %d", rs, vs, weight, maxWeight)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.h.NewDestination(service(vs, model.VSSpec{}), destination(rs, weight)); err != nil {
		return fmt.Errorf("add real server %s to %s: %w", rs, vs, notFound(err, unix.ESRCH))
	}
	return nil
}

func (k *netlinkKernel) UpdateDestination(vs model.VSKey, rs model.RSKey, weight uint32) error {
	if weight > maxWeight {
		return fmt.Errorf("set weight of real server %s of %s: weight %d is above %d", rs, vs, weight, maxWeight)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.h.UpdateDestination(service(vs, model.VSSpec{}), destination(rs, weight)); err != nil {
		return fmt.Errorf("set weight of real server %s of %s: %w", rs, vs, notFound(err, unix.ESRCH, unix.ENOENT))
	}
	return nil
}

func (k *netlinkKernel) DelDestination(vs model.VSKey, rs model.RSKey) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.h.DelDestination(service(vs, model.VSSpec{}), destination(rs, 0)); err != nil {
		return fmt.Errorf("remove real server %s from %s: %w", rs, vs, notFound(err, unix.ESRCH, unix.ENOENT))
	}
	return nil
}

func (k *netlinkKernel) Connections(vs model.VSKey) (map[model.RSKey]uint32, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	dests, err := k.h.GetDestinations(service(vs, model.VSSpec{}))
	if err != nil {
		return nil, fmt.Errorf("read connections of %s: %w", vs, notFound(err, unix.ESRCH))
	}
	out := make(map[model.RSKey]uint32, len(dests))
	for _, d := range dests {
		if addr, ok := netip.AddrFromSlice(d.Address); ok {
			out[model.RSKey{Addr: addr.Unmap(), Port: d.Port}] = uint32(d.ActiveConnections + d.InactiveConnections)
		}
	}
	return out, nil
}

// serviceError maps the kernel's answer to creating or updating a service. ENOENT there
// means the scheduler module could not be found (the service itself missing is ESRCH).
func serviceError(op string, key model.VSKey, spec model.VSSpec, err error) error {
	if errors.Is(err, unix.ENOENT) {
		return &SchedulerUnavailableError{Scheduler: spec.Scheduler}
	}
	return fmt.Errorf("%s virtual server %s (scheduler %s, flags %#x, timeout %d): %w",
		op, key, spec.Scheduler, spec.Flags, spec.Timeout, notFound(err, unix.ESRCH))
}

// notFound wraps err with ErrNotFound when it is one of the errnos that mean "no such object"
// for the request at hand.
func notFound(err error, errnos ...unix.Errno) error {
	for _, e := range errnos {
		if errors.Is(err, e) {
			return fmt.Errorf("%w (%w)", ErrNotFound, err)
		}
	}
	return err
}

// service builds the netlink service for a key and spec. moby/ipvs sends the flags with a
// mask of all ones, so the kernel sets its flags to exactly these (and adds HASHED itself).
// The netmask only matters for persistence: a single address, as kube-proxy does.
func service(key model.VSKey, spec model.VSSpec) *mobyipvs.Service {
	s := &mobyipvs.Service{
		Address:       net.IP(key.Addr.AsSlice()),
		Protocol:      uint16(key.Proto),
		Port:          key.Port,
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

// keyOf converts a listed service to its key; false for services a VSKey cannot express.
func keyOf(s *mobyipvs.Service) (model.VSKey, bool) {
	if s.FWMark != 0 || (s.AddressFamily != unix.AF_INET && s.AddressFamily != unix.AF_INET6) || s.Protocol > 0xff {
		return model.VSKey{}, false
	}
	addr, ok := netip.AddrFromSlice(s.Address)
	if !ok {
		return model.VSKey{}, false
	}
	return model.VSKey{Addr: addr.Unmap(), Proto: model.Protocol(s.Protocol), Port: s.Port}, true
}

// specOf keeps the flags we manage: the kernel adds HASHED to every service.
func specOf(s *mobyipvs.Service) model.VSSpec {
	return model.VSSpec{Scheduler: s.SchedName, Flags: s.Flags & model.FlagsWeManage, Timeout: s.Timeout}
}

// Timeouts are IPVS's connection timeouts, as `ipvsadm --set tcp tcpfin udp` sets them. A
// zero field leaves that timeout as it is.
type Timeouts struct {
	TCP, TCPFin, UDP time.Duration
}

// SetTimeouts sets the IPVS connection timeouts that are non-zero and reports whether it
// wrote anything (nothing when they already match).
func SetTimeouts(t Timeouts) (bool, error) {
	if t == (Timeouts{}) {
		return false, nil
	}
	h, err := mobyipvs.New("")
	if err != nil {
		return false, fmt.Errorf("open the IPVS netlink handle: %w", err)
	}
	defer h.Close()
	cur, err := h.GetConfig()
	if err != nil {
		return false, fmt.Errorf("read IPVS timeouts: %w", err)
	}
	want := *cur
	if t.TCP > 0 {
		want.TimeoutTCP = t.TCP
	}
	if t.TCPFin > 0 {
		want.TimeoutTCPFin = t.TCPFin
	}
	if t.UDP > 0 {
		want.TimeoutUDP = t.UDP
	}
	if want == *cur {
		return false, nil
	}
	if err := h.SetConfig(&want); err != nil {
		return false, fmt.Errorf("set IPVS timeouts (tcp %s, tcpfin %s, udp %s): %w", want.TimeoutTCP, want.TimeoutTCPFin, want.TimeoutUDP, err)
	}
	return true, nil
}

// Stats are the kernel's cumulative counters of one virtual server.
type Stats struct {
	Key                   model.VSKey
	Connections           uint64
	PacketsIn, PacketsOut uint64
	BytesIn, BytesOut     uint64
}

// ListStats reads every virtual server's counters with one dump of the service table (no
// per-service requests), for metrics scrapes. It opens its own handle so a scrape never
// waits for a sync.
func ListStats() ([]Stats, error) {
	h, err := mobyipvs.New("")
	if err != nil {
		return nil, fmt.Errorf("open the IPVS netlink handle: %w", err)
	}
	defer h.Close()
	svcs, err := h.GetServices()
	if err != nil {
		return nil, fmt.Errorf("list virtual servers: %w", err)
	}
	out := make([]Stats, 0, len(svcs))
	seen := make(map[model.VSKey]bool, len(svcs))
	for _, s := range svcs {
		key, ok := keyOf(s)
		if !ok || seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, Stats{Key: key, Connections: uint64(s.Stats.Connections),
			PacketsIn: uint64(s.Stats.PacketsIn), PacketsOut: uint64(s.Stats.PacketsOut),
			BytesIn: s.Stats.BytesIn, BytesOut: s.Stats.BytesOut})
	}
	return out, nil
}
