package ipvs

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/kube-ipvs/kube-ipvs/internal/oplog"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// FakeKernel is an in-memory Kernel for tests. It answers as the kernel does (errors for
// duplicates and missing objects, HASHED added to every service's flags, though its reads
// report only FlagsWeManage, as the kernel client's do), logs every call as
// one line (TakeOps returns them), and can be told to fail.
type FakeKernel struct {
	oplog.Log
	mu   sync.Mutex
	vses map[model.VSKey]*model.VirtualServer

	// Fail, when set, is consulted before every call with the op name (the first word of
	// the logged line: list-services, get-spec, get-reals, conns, new-service, update-service, del-service, new-dest,
	// update-dest, del-dest) and the virtual server's key (zero for list-services). A non-nil error
	// is returned instead of doing the call (a queued write's at the flush); the call is
	// still logged. Fail must not call
	// the fake.
	Fail func(op string, key model.VSKey) error
	// MissingSchedulers lists schedulers this fake kernel does not have.
	MissingSchedulers map[string]bool

	conns map[model.VSKey]map[model.RSKey]uint32

	// Between StartBatch and FlushBatch writes are queued and done at the flush, in order,
	// as the netlink kernel sends them: the reconciler's batched path is the one tested.
	batching bool
	queue    []func() error
	flushes  int
	// LoseAnswers, when set, makes FlushBatch report queued write i as of unknown outcome
	// although it was done: what an overrun of the socket's receive buffer looks like.
	LoseAnswers func(i int) bool
}

// ServiceSpec reads one virtual server's spec (one logged call, "get-spec KEY").
func (f *FakeKernel) ServiceSpec(key model.VSKey) (model.VSSpec, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("get-spec", key, key.String()); err != nil {
		return model.VSSpec{}, false, err
	}
	vs, ok := f.vses[key]
	if !ok {
		return model.VSSpec{}, false, nil
	}
	return normalizedSpec(vs.Spec), true, nil
}

// SetConnections sets the connection count Connections reports for a real server.
func (f *FakeKernel) SetConnections(vs model.VSKey, rs model.RSKey, n uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil {
		f.conns = map[model.VSKey]map[model.RSKey]uint32{}
	}
	if f.conns[vs] == nil {
		f.conns[vs] = map[model.RSKey]uint32{}
	}
	f.conns[vs][rs] = n
}

func (f *FakeKernel) Connections(key model.VSKey) (map[model.RSKey]uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("conns", key, key.String()); err != nil {
		return nil, err
	}
	vs, ok := f.vses[key]
	if !ok {
		return map[model.RSKey]uint32{}, nil // as the kernel: a dump of nothing
	}
	out := make(map[model.RSKey]uint32, len(vs.Reals))
	for rs := range vs.Reals {
		out[rs] = f.conns[key][rs]
	}
	return out, nil
}

// NewFakeKernel returns an empty fake kernel.
func NewFakeKernel() *FakeKernel {
	return &FakeKernel{vses: map[model.VSKey]*model.VirtualServer{}}
}

// Put sets a virtual server in the fake kernel directly, without logging a call: to set up
// state that someone else created.
func (f *FakeKernel) Put(vs *model.VirtualServer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := clone(vs)
	c.Spec.Flags |= model.FlagHashed
	f.vses[vs.Key] = c
}

// Drop removes a virtual server from the fake kernel directly, without logging a call.
func (f *FakeKernel) Drop(key model.VSKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.vses, key)
}

// Dump renders the fake kernel's table, sorted, one model.VirtualServer.String block per
// virtual server.
func (f *FakeKernel) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]model.VSKey, 0, len(f.vses))
	for k := range f.vses {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return model.VSKeyLess(keys[i], keys[j]) })
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(f.vses[k].String())
		b.WriteByte('\n')
	}
	return b.String()
}

func (f *FakeKernel) call(op string, key model.VSKey, line string) error {
	f.Record(strings.TrimSpace(op + " " + line))
	if f.Fail != nil {
		return f.Fail(op, key)
	}
	return nil
}

// ListServices lists the virtual servers without their real servers (one logged call,
// "list-services").
func (f *FakeKernel) ListServices() (map[model.VSKey]model.VSSpec, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("list-services", model.VSKey{}, ""); err != nil {
		return nil, err
	}
	out := make(map[model.VSKey]model.VSSpec, len(f.vses))
	for k, vs := range f.vses {
		out[k] = normalizedSpec(vs.Spec)
	}
	return out, nil
}

// RealServers reads one virtual server's real servers into into (cleared first; a new map
// when nil), none if it is absent (one logged call, "get-reals KEY").
func (f *FakeKernel) RealServers(key model.VSKey, into map[model.RSKey]uint32) (map[model.RSKey]uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("get-reals", key, key.String()); err != nil {
		return nil, err
	}
	out := into
	if out == nil {
		out = map[model.RSKey]uint32{}
	}
	clear(out)
	if vs := f.vses[key]; vs != nil {
		for rs, w := range vs.Reals {
			out[rs] = w
		}
	}
	return out, nil
}

func specLine(key model.VSKey, spec model.VSSpec) string {
	return fmt.Sprintf("%s %s flags=%#x timeout=%d", key, spec.Scheduler, spec.Flags, spec.Timeout)
}

func (f *FakeKernel) NewService(key model.VSKey, spec model.VSSpec) error {
	return f.write(func() error {
		if err := f.call("new-service", key, specLine(key, spec)); err != nil {
			return err
		}
		// The kernel looks the virtual server up before it loads the scheduler.
		if _, ok := f.vses[key]; ok {
			return fmt.Errorf("create %s: file exists", key)
		}
		if f.MissingSchedulers[spec.Scheduler] {
			return &SchedulerUnavailableError{Scheduler: spec.Scheduler}
		}
		spec.Flags = spec.Flags&model.FlagsWeManage | model.FlagHashed
		f.vses[key] = &model.VirtualServer{Key: key, Spec: spec, Reals: map[model.RSKey]uint32{}}
		return nil
	})
}

func (f *FakeKernel) UpdateService(key model.VSKey, spec model.VSSpec) error {
	return f.write(func() error {
		if err := f.call("update-service", key, specLine(key, spec)); err != nil {
			return err
		}
		vs, ok := f.vses[key]
		if !ok {
			return fmt.Errorf("update %s: %w", key, ErrNotFound)
		}
		if f.MissingSchedulers[spec.Scheduler] {
			return &SchedulerUnavailableError{Scheduler: spec.Scheduler}
		}
		spec.Flags = spec.Flags&model.FlagsWeManage | model.FlagHashed
		vs.Spec = spec
		return nil
	})
}

func (f *FakeKernel) DelService(key model.VSKey) error {
	return f.write(func() error {
		if err := f.call("del-service", key, key.String()); err != nil {
			return err
		}
		if _, ok := f.vses[key]; !ok {
			return fmt.Errorf("delete %s: %w", key, ErrNotFound)
		}
		delete(f.vses, key)
		return nil
	})
}

func (f *FakeKernel) NewDestination(key model.VSKey, rs model.RSKey, weight uint32) error {
	return f.write(func() error {
		what := fmt.Sprintf("add %s to %s", rs, key)
		vs, has, err := f.destination("new-dest", what, key, rs, fmt.Sprintf("%s %s weight=%d", key, rs, weight))
		switch {
		case err != nil:
			return err
		case has:
			return fmt.Errorf("%s: file exists", what)
		}
		vs.Reals[rs] = weight
		return nil
	})
}

func (f *FakeKernel) UpdateDestination(key model.VSKey, rs model.RSKey, weight uint32) error {
	return f.write(func() error {
		what := fmt.Sprintf("set weight of %s in %s", rs, key)
		vs, has, err := f.destination("update-dest", what, key, rs, fmt.Sprintf("%s %s weight=%d", key, rs, weight))
		switch {
		case err != nil:
			return err
		case !has:
			return fmt.Errorf("%s: %w", what, ErrNotFound)
		}
		vs.Reals[rs] = weight
		return nil
	})
}

func (f *FakeKernel) DelDestination(key model.VSKey, rs model.RSKey) error {
	return f.write(func() error {
		what := fmt.Sprintf("remove %s from %s", rs, key)
		vs, has, err := f.destination("del-dest", what, key, rs, fmt.Sprintf("%s %s", key, rs))
		switch {
		case err != nil:
			return err
		case !has:
			return fmt.Errorf("%s: %w", what, ErrNotFound)
		}
		delete(vs.Reals, rs)
		return nil
	})
}

// StartBatch opens a batch: the writes until FlushBatch are queued.
func (f *FakeKernel) StartBatch() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batching = true
}

// FlushBatch does the queued writes in order (each logged as it is done), reports each
// that failed by its index among them, and returns how many there were.
func (f *FakeKernel) FlushBatch(failed func(i int, err error)) int {
	f.mu.Lock()
	queue := f.queue
	f.queue, f.batching = nil, false
	f.flushes++
	errs := make([]error, len(queue))
	for i, w := range queue {
		errs[i] = w()
		if f.LoseAnswers != nil && f.LoseAnswers(i) {
			errs[i] = fmt.Errorf("%w (%w)", errUnknownOutcome, syscall.ENOBUFS)
		}
	}
	f.mu.Unlock()
	for i, err := range errs {
		if err != nil {
			failed(i, err)
		}
	}
	return len(queue)
}

// Flushes is how many batches were flushed.
func (f *FakeKernel) Flushes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flushes
}

// write does w under the lock now, or queues it in a batch.
func (f *FakeKernel) write(w func() error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.batching {
		f.queue = append(f.queue, w)
		return nil
	}
	return w()
}

// destination logs a real-server call (line), then finds its virtual server and tells
// whether it holds rs; what names the call in errors. f.mu must be held.
func (f *FakeKernel) destination(op, what string, key model.VSKey, rs model.RSKey, line string) (*model.VirtualServer, bool, error) {
	if err := f.call(op, key, line); err != nil {
		return nil, false, err
	}
	vs, ok := f.vses[key]
	if !ok {
		return nil, false, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	_, has := vs.Reals[rs]
	return vs, has, nil
}
