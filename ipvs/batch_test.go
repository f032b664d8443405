package ipvs

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// batchingFake is a FakeKernel that batches as the netlink kernel does: between startBatch
// and flushBatch writes are queued (nil returned) and done at the flush, in order. lose, if
// set, makes flushBatch report a write as of unknown outcome although it was done (what a
// receive buffer overrun looks like).
type batchingFake struct {
	*FakeKernel
	open    bool
	queue   []func() error
	flushes int
	lose    func(i int) bool
}

func (b *batchingFake) startBatch() { b.open = true }

func (b *batchingFake) flushBatch(failed func(int, error)) int {
	b.open = false
	b.flushes++
	for i, w := range b.queue {
		err := w()
		if b.lose != nil && b.lose(i) {
			err = fmt.Errorf("%w (%w)", errUnknownOutcome, unix.ENOBUFS)
		}
		if err != nil {
			failed(i, err)
		}
	}
	n := len(b.queue)
	b.queue = nil
	return n
}

func (b *batchingFake) do(w func() error) error {
	if !b.open {
		return w()
	}
	b.queue = append(b.queue, w)
	return nil
}

func (b *batchingFake) NewService(k model.VSKey, s model.VSSpec) error {
	return b.do(func() error { return b.FakeKernel.NewService(k, s) })
}
func (b *batchingFake) UpdateService(k model.VSKey, s model.VSSpec) error {
	return b.do(func() error { return b.FakeKernel.UpdateService(k, s) })
}
func (b *batchingFake) DelService(k model.VSKey) error {
	return b.do(func() error { return b.FakeKernel.DelService(k) })
}
func (b *batchingFake) NewDestination(k model.VSKey, r model.RSKey, w uint32) error {
	return b.do(func() error { return b.FakeKernel.NewDestination(k, r, w) })
}
func (b *batchingFake) UpdateDestination(k model.VSKey, r model.RSKey, w uint32) error {
	return b.do(func() error { return b.FakeKernel.UpdateDestination(k, r, w) })
}
func (b *batchingFake) DelDestination(k model.VSKey, r model.RSKey) error {
	return b.do(func() error { return b.FakeKernel.DelDestination(k, r) })
}

// Batched, the reconciler makes the same calls in the same order as one by one, in one flush
// per Apply, and its cache ends the same.
func TestBatchedApplyMatchesUnbatched(t *testing.T) {
	plain, batched := NewFakeKernel(), &batchingFake{FakeKernel: NewFakeKernel()}
	rp, rb := NewReconciler(plain), NewReconciler(batched)
	steps := []map[model.VSKey]*model.VirtualServer{
		changes(vs(kA, "rr", "10.244.0.1:8080", 1, "10.244.0.2:8080", 1), vs(kB, "rr", "10.244.0.1:53", 1)),
		changes(vs(kA, "wrr", "10.244.0.1:8080", 3, "10.244.0.3:8080", 1), vs(kC, "sh", "10.244.0.9:443", 1)),
		{kB: nil, kC: vs(kC, "sh")},
	}
	for i, ch := range steps {
		wp, wb := rp.Apply(ch), rb.Apply(ch)
		expectClean(t, wb, wp.Writes)
		if got, want := batched.TakeOps(), plain.TakeOps(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("step %d: batched calls\n  %v\nunbatched\n  %v", i, got, want)
		}
		if batched.Dump() != plain.Dump() {
			t.Errorf("step %d: batched kernel\n%s\nunbatched\n%s", i, batched.Dump(), plain.Dump())
		}
	}
	if batched.flushes != len(steps) {
		t.Errorf("%d flushes for %d applies", batched.flushes, len(steps))
	}
	if w := rb.Apply(steps[len(steps)-1]); w.Writes != 0 {
		t.Errorf("applying the same again wrote %d times", w.Writes)
	}
}

// A write that fails inside a batch is reported with its virtual server (a missing
// scheduler still as SchedulerUnavailableError), the others are applied, and the failed
// virtual server is re-read so the cache tells the truth.
func TestBatchedFailuresAreFiledAndReRead(t *testing.T) {
	t.Run("copying", func(t *testing.T) { testBatchedFailuresAreFiledAndReRead(t, false) })
	t.Run("sharing", func(t *testing.T) { testBatchedFailuresAreFiledAndReRead(t, true) })
}

func testBatchedFailuresAreFiledAndReRead(t *testing.T, share bool) {
	f := &batchingFake{FakeKernel: NewFakeKernel()}
	f.MissingSchedulers = map[string]bool{"twos": true}
	r := NewReconciler(f)
	if share {
		r.ShareDesired()
	}
	bad := vs(kB, "twos", "10.244.0.1:53", 1)
	good := vs(kA, "rr", "10.244.0.1:8080", 1)
	res := r.Apply(changes(good, bad))
	var su *SchedulerUnavailableError
	if err := res.Errors[kB]; !errors.As(err, &su) || su.Scheduler != "twos" {
		t.Fatalf("error for %v: %v, want SchedulerUnavailableError", kB, err)
	}
	if res.Errors[kA] != nil {
		t.Fatalf("the good virtual server failed too: %v", res.Errors[kA])
	}
	if _, ok := r.Applied(kB); ok {
		t.Error("the cache holds a virtual server the kernel refused")
	}
	if got, ok := r.Applied(kA); !ok || !got.Equal(good) {
		t.Errorf("cache of %v: %v", kA, got)
	}
	// With the scheduler available the retry creates it.
	f.MissingSchedulers = nil
	expectClean(t, r.Apply(changes(bad)), 2)
	expectDump(t, f.FakeKernel, good, bad)
}

// When the kernel's answers are lost (ENOBUFS), the writes of unknown outcome are reported
// and their virtual servers re-read: the cache matches the kernel, and applying the same
// state again writes nothing.
func TestBatchedUnknownOutcomesAreReRead(t *testing.T) {
	t.Run("copying", func(t *testing.T) { testBatchedUnknownOutcomesAreReRead(t, false) })
	t.Run("sharing", func(t *testing.T) { testBatchedUnknownOutcomesAreReRead(t, true) })
}

func testBatchedUnknownOutcomesAreReRead(t *testing.T, share bool) {
	f := &batchingFake{FakeKernel: NewFakeKernel()}
	f.lose = func(i int) bool { return i%2 == 1 }
	r := NewReconciler(f)
	if share {
		r.ShareDesired()
	}
	want := changes(
		vs(kA, "rr", "10.244.0.1:8080", 1, "10.244.0.2:8080", 1),
		vs(kC, "rr", "10.244.0.3:443", 1),
		vs(kD, "rr", "10.244.0.4:80", 1, "10.244.0.5:80", 1, "10.244.0.6:80", 1),
	)
	res := r.Apply(want)
	if len(res.Errors) == 0 {
		t.Fatal("lost answers were not reported")
	}
	for k, err := range res.Errors {
		if !errors.Is(err, unix.ENOBUFS) {
			t.Errorf("%v: %v, want ENOBUFS", k, err)
		}
	}
	f.lose = nil
	for k := range want {
		got, ok := r.Applied(k)
		inKernel, err := f.FakeKernel.GetVirtualServer(k)
		if !ok || err != nil || !got.Equal(normalize(inKernel)) {
			t.Errorf("%v: cache %v, kernel %v (%v)", k, got, inKernel, err)
		}
	}
	if res := r.Apply(want); len(res.Errors) != 0 || res.Writes != 0 {
		t.Errorf("after the re-read, applying again: %d writes, errors %v", res.Writes, res.Errors)
	}
}
