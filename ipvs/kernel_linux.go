package ipvs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	mobyipvs "github.com/moby/ipvs"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/foreground"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/modules"
)

// maxWeight is the largest real-server weight this package writes. The kernel would take up
// to 2^31-1 (a 32-bit attribute it keeps as a signed int, refusing negative ones), and this
// package's own decoding (genl) reads all 32 bits back; but moby/ipvs, the reference decoder
// the guest tests cross-check against and what other tools built on it show, reads only 16
// bits, and Kubernetes asks for no weight above 1 anyway.
const maxWeight = 0xffff

// netlinkKernel is the Kernel over generic netlink in one network namespace, through our own
// socket and encoding (genl), which can batch writes.
type netlinkKernel struct {
	mu sync.Mutex // one read at a time (writes are serialized by genl)
	g  *genl
	// listed is how many virtual servers the last listing of the table found: the next
	// one's map is sized for as many (under mu). Grown from empty, a map of 70,000 virtual
	// servers allocates about twice its size on the way.
	listed int
}

// NewKernel opens the IPVS netlink socket in the calling thread's network namespace. The
// returned Kernel also implements io.Closer.
func NewKernel() (Kernel, error) { return NewKernelAt(netns.None()) }

// NewKernelAt opens the IPVS netlink socket in network namespace ns (netns.None(): the
// calling thread's), loading ip_vs first if the kernel lacks it. The socket stays in ns
// whatever thread uses it later.
func NewKernelAt(ns netns.NsHandle) (Kernel, error) {
	k, err := newKernelAt(ns)
	if err != nil {
		return nil, err // not a nil *netlinkKernel in a Kernel
	}
	return k, nil
}

// newKernelAt opens the socket in ns.
func newKernelAt(ns netns.NsHandle) (*netlinkKernel, error) {
	// Modules are not per namespace. A failed load is reported only if IPVS then does not
	// answer: the kernel may have it all the same (loaded by the host, say).
	loadErr := modules.Ensure(context.Background(), modules.IPVS)
	g, err := newGenl(ns)
	if err != nil {
		return nil, fmt.Errorf("open the IPVS netlink handle: %w", errors.Join(err, loadErr))
	}
	return &netlinkKernel{g: g}, nil
}

// NewBackgroundKernel opens a Kernel for listings that run beside the sync loop (the
// Reconciler's Lister): its dumps give way to a change being applied, parking at gate
// (package foreground).
func NewBackgroundKernel(gate *foreground.Gate) (Kernel, error) {
	k, err := newKernelAt(netns.None())
	if err != nil {
		return nil, err
	}
	k.g.in.Background = true
	k.g.gate = gate
	return k, nil
}

// Close releases the netlink socket.
func (k *netlinkKernel) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.g.close()
}

// StartBatch and FlushBatch: writes in between are queued and sent many per system call
// (see genl).
func (k *netlinkKernel) StartBatch()                                  { k.g.startBatch() }
func (k *netlinkKernel) FlushBatch(failed func(i int, err error)) int { return k.g.flush(failed) }

// ServiceSpec reads one virtual server's spec, one request: the kernel looks it up in its
// hash table, nothing like a listing's walk.
func (k *netlinkKernel) ServiceSpec(key model.VSKey) (spec model.VSSpec, ok bool, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ls, err := k.g.service(key)
	if err != nil {
		if err = notFound(err, unix.ESRCH); errors.Is(err, ErrNotFound) {
			return model.VSSpec{}, false, nil
		}
		return model.VSSpec{}, false, fmt.Errorf("get virtual server %s: %w", key, err)
	}
	return ls.spec, true, nil
}

// ListServices dumps the service table, keeping what a VSKey can express. (The text table
// /proc/net/ip_vs holds it all, but seq_file hands it out at most a page per read and walks
// the table from its start on every read: quadratic, and in a network namespace other than
// the first it skips and repeats entries past a page.)
func (k *netlinkKernel) ListServices() (map[model.VSKey]model.VSSpec, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[model.VSKey]model.VSSpec, k.listed)
	err := k.g.services(func(ls listedService) {
		if ls.ok { // else a family we do not handle: not ours
			out[ls.key] = ls.spec
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list virtual servers: %w", err)
	}
	k.listed = len(out)
	return out, nil
}

// RealServers reads one virtual server's real servers, one dump.
func (k *netlinkKernel) RealServers(key model.VSKey, into map[model.RSKey]uint32) (map[model.RSKey]uint32, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	reals := into
	if reals == nil {
		reals = map[model.RSKey]uint32{}
	}
	clear(reals)
	if err := k.g.dests(key, func(d listedDest) { reals[d.rs] = d.weight }); err != nil {
		return nil, fmt.Errorf("list real servers of %s: %w", key, err)
	}
	return reals, nil
}

func (k *netlinkKernel) NewService(key model.VSKey, spec model.VSSpec) error {
	return k.g.write(cmdNewService,
		func(err error) error { return serviceError("create", key, spec, err) },
		func(b []byte) []byte { return appendService(b, key, &spec) })
}

func (k *netlinkKernel) UpdateService(key model.VSKey, spec model.VSSpec) error {
	return k.g.write(cmdSetService,
		func(err error) error { return serviceError("update", key, spec, err) },
		func(b []byte) []byte { return appendService(b, key, &spec) })
}

func (k *netlinkKernel) DelService(key model.VSKey) error {
	return k.g.write(cmdDelService,
		func(err error) error {
			return fmt.Errorf("delete virtual server %s: %w", key, notFound(err, unix.ESRCH))
		},
		func(b []byte) []byte { return appendService(b, key, nil) })
}

func (k *netlinkKernel) NewDestination(vs model.VSKey, rs model.RSKey, weight uint32) error {
	return k.writeDest(cmdNewDest, "add real server %s to %s", vs, rs, weight, unix.ESRCH)
}

func (k *netlinkKernel) UpdateDestination(vs model.VSKey, rs model.RSKey, weight uint32) error {
	return k.writeDest(cmdSetDest, "set weight of real server %s of %s", vs, rs, weight, unix.ESRCH, unix.ENOENT)
}

// writeDest adds a real server or sets its weight. what names the write in errors: a format
// taking the real and then the virtual server. gone are the errnos that mean what the write
// needs is missing (the virtual server; for a weight change also the real server).
func (k *netlinkKernel) writeDest(cmd uint8, what string, vs model.VSKey, rs model.RSKey, weight uint32, gone ...unix.Errno) error {
	if weight > maxWeight {
		return fmt.Errorf(what+": weight %d is above %d", rs, vs, weight, maxWeight)
	}
	if err := checkFamily(vs, rs); err != nil {
		return fmt.Errorf(what+": %w", rs, vs, err)
	}
	return k.g.write(cmd,
		func(err error) error { return fmt.Errorf(what+": %w", rs, vs, notFound(err, gone...)) },
		func(b []byte) []byte { return appendDest(appendService(b, vs, nil), rs, weight, true) })
}

func (k *netlinkKernel) DelDestination(vs model.VSKey, rs model.RSKey) error {
	return k.g.write(cmdDelDest,
		func(err error) error {
			return fmt.Errorf("remove real server %s from %s: %w", rs, vs, notFound(err, unix.ESRCH, unix.ENOENT))
		},
		func(b []byte) []byte { return appendDest(appendService(b, vs, nil), rs, 0, false) })
}

// checkFamily refuses a real server of another family than its virtual server: the kernel
// would take the address bytes as the virtual server's family.
func checkFamily(vs model.VSKey, rs model.RSKey) error {
	if vs.Addr.Is4() != rs.Addr.Is4() {
		return errors.New("address families differ")
	}
	return nil
}

func (k *netlinkKernel) Connections(vs model.VSKey) (map[model.RSKey]uint32, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[model.RSKey]uint32{}
	if err := k.g.dests(vs, func(d listedDest) { out[d.rs] = d.conns }); err != nil {
		return nil, fmt.Errorf("read connections of %s: %w", vs, notFound(err, unix.ESRCH))
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

// keyOf converts a listed service to its key; false for services a VSKey cannot express.
func keyOf(s *mobyipvs.Service) (model.VSKey, bool) {
	if s.AddressFamily != unix.AF_INET && s.AddressFamily != unix.AF_INET6 {
		return model.VSKey{}, false
	}
	if s.FWMark != 0 {
		return model.FWMarkKey(s.FWMark, s.AddressFamily == unix.AF_INET6), true
	}
	if s.Protocol > 0xff {
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
	changed := false
	err := withMoby(func(h *mobyipvs.Handle) error {
		cur, err := h.GetConfig()
		if err != nil {
			return fmt.Errorf("read IPVS timeouts: %w", err)
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
			return nil
		}
		if err := h.SetConfig(&want); err != nil {
			return fmt.Errorf("set IPVS timeouts (tcp %s, tcpfin %s, udp %s): %w", want.TimeoutTCP, want.TimeoutTCPFin, want.TimeoutUDP, err)
		}
		changed = true
		return nil
	})
	return changed, err
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
	var svcs []*mobyipvs.Service
	if err := withMoby(func(h *mobyipvs.Handle) (err error) {
		svcs, err = h.GetServices()
		return err
	}); err != nil {
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

// withMoby runs fn on a moby/ipvs handle of its own in the current network namespace, for
// the calls that are not on the reconciler's socket (timeouts, statistics).
func withMoby(fn func(*mobyipvs.Handle) error) error {
	h, err := mobyipvs.New("")
	if err != nil {
		return fmt.Errorf("open the IPVS netlink handle: %w", err)
	}
	defer h.Close()
	return fn(h)
}
