package ipvs

import (
	"errors"
	"fmt"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Kernel is the part of the kernel's IPVS netlink interface the reconciler uses: what it
// reads and what it writes, nothing else. NewKernel returns the real one; FakeKernel is an
// in-memory one for tests; one contract test suite runs against both (contract_test.go).
//
// Every method is one netlink request (or queues one, in a batch), so a test that counts
// calls counts kernel work. The table is read one way (read.go): the listing of the virtual
// servers, then each one by key.
type Kernel interface {
	// ListServices lists every virtual server the model can express (address, protocol,
	// port, or firewall mark and family) with its spec, without real servers: one dump.
	// A spec's flags are those in FlagsWeManage: the kernel's others (HASHED) are not the
	// reconciler's, here or in ServiceSpec.
	// It may run while another handle writes the table: a virtual server the dump meets
	// twice is listed once, and one written meanwhile may be missing or stale (Check
	// reads those again; ReadAll lists twice and compares).
	ListServices() (map[model.VSKey]model.VSSpec, error)
	// ServiceSpec reads one virtual server's spec; ok is false when the kernel has no such
	// virtual server.
	ServiceSpec(key model.VSKey) (spec model.VSSpec, ok bool, err error)
	// RealServers reads the real servers of a virtual server into into, which it clears
	// first, and returns it (a new map when into is nil): none when the virtual server has
	// none or does not exist. A repair reads every virtual server's real servers, and the
	// maps that read would allocate (70,000 at 50,000 Services) were most of what the
	// garbage collector had to catch up with while changes waited: a Check reads into one.
	RealServers(key model.VSKey, into map[model.RSKey]uint32) (map[model.RSKey]uint32, error)

	// NewService creates a virtual server with no real servers. A scheduler the kernel lacks
	// is reported as *SchedulerUnavailableError.
	NewService(key model.VSKey, spec model.VSSpec) error
	// UpdateService changes scheduler, flags and timeout of an existing virtual server in
	// place: its connections and real servers stay. It sets the flags in FlagsWeManage to
	// exactly spec.Flags (setting and clearing). ErrNotFound if absent;
	// *SchedulerUnavailableError for a scheduler the kernel lacks.
	UpdateService(key model.VSKey, spec model.VSSpec) error
	// DelService deletes a virtual server and its real servers; ErrNotFound if absent.
	DelService(key model.VSKey) error

	// NewDestination adds a real server (masquerade forwarding) to a virtual server.
	NewDestination(vs model.VSKey, rs model.RSKey, weight uint32) error
	// UpdateDestination changes the weight of a real server; ErrNotFound if absent.
	UpdateDestination(vs model.VSKey, rs model.RSKey, weight uint32) error
	// DelDestination removes a real server; ErrNotFound if it (or its virtual server) is absent.
	DelDestination(vs model.VSKey, rs model.RSKey) error

	// StartBatch opens a batch: until FlushBatch, a write method either fails at once
	// (nothing queued: a request it cannot even encode) or returns nil and is queued, to be
	// sent with the others many per system call. Outside a batch every write is done before
	// its method returns. The reconciler writes in batches: a cold start at 50,000 Services
	// makes over half a million writes.
	StartBatch()
	// FlushBatch sends the queued writes in order, calls failed for each that failed (by its
	// index among the queued ones; ErrNotFound and *SchedulerUnavailableError wrapped as the
	// methods wrap them) and returns how many were queued.
	FlushBatch(failed func(i int, err error)) int

	// Connections reads, for each real server of a virtual server, its active plus inactive
	// connections (one request; a read, not a write): none when the virtual server does not
	// exist, as RealServers.
	Connections(vs model.VSKey) (map[model.RSKey]uint32, error)
}

// ErrNotFound is wrapped by Kernel errors about a virtual or real server that does not exist.
var ErrNotFound = errors.New("not found")

// ErrDumpInterrupted is wrapped by ReadAll when the table changed while it was being read,
// so the result may miss or duplicate entries.
var ErrDumpInterrupted = errors.New("IPVS table changed during the dump; result not trusted")

// errUnknownOutcome wraps ENOBUFS for writes whose answer the kernel dropped.
var errUnknownOutcome = errors.New("outcome unknown: the kernel dropped its answer (socket receive buffer overrun)")

// SchedulerUnavailableError reports that the kernel has no scheduler of that name (no
// ip_vs_<name> module can be loaded): the kernel answers ENOENT when a service is created or
// updated with it.
type SchedulerUnavailableError struct {
	Scheduler string
}

// UnavailableScheduler names the missing scheduler (dataplane.SchedulerUnavailable): the
// controller then gives the Service the default one.
func (e *SchedulerUnavailableError) UnavailableScheduler() string { return e.Scheduler }

func (e *SchedulerUnavailableError) Error() string {
	return fmt.Sprintf("IPVS scheduler %q is not available in this kernel (no module ip_vs_%s)", e.Scheduler, e.Scheduler)
}
