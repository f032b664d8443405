package ipvs

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// Each Apply's writes go to the kernel in one batch, queued until its flush: none reaches
// the table before the reconciler is done queueing, and after the flush the table is as
// desired, and applying the same again writes nothing.
func TestApplyWritesInOneBatch(t *testing.T) {
	f := NewFakeKernel()
	steps := []map[model.VSKey]*model.VirtualServer{
		changes(vs(kA, "rr", "10.244.0.1:8080", 1, "10.244.0.2:8080", 1), vs(kB, "rr", "10.244.0.1:53", 1)),
		changes(vs(kA, "wrr", "10.244.0.1:8080", 3, "10.244.0.3:8080", 1), vs(kC, "sh", "10.244.0.9:443", 1)),
		{kB: nil, kC: vs(kC, "sh")},
	}
	seen, early := 0, 0
	r := NewReconciler(&hookedKernel{FakeKernel: f, onWrite: func() {
		seen++
		if f.Dump() != "" {
			early++
		}
	}})
	expectClean(t, r.Apply(steps[0]), 5)
	if seen != 5 || early != 0 {
		t.Fatalf("%d of %d writes found the table changed before the flush", early, seen)
	}
	expectDump(t, f, steps[0][kA], steps[0][kB])
	for _, ch := range steps[1:] {
		if res := r.Apply(ch); res.Err != nil || len(res.Errors) != 0 || res.Writes == 0 {
			t.Fatalf("apply: %d writes, %v %v", res.Writes, res.Err, res.Errors)
		}
	}
	expectDump(t, f, vs(kA, "wrr", "10.244.0.1:8080", 3, "10.244.0.3:8080", 1), vs(kC, "sh"))
	if f.Flushes() != len(steps) {
		t.Errorf("%d flushes for %d applies", f.Flushes(), len(steps))
	}
	if w := r.Apply(steps[len(steps)-1]); w.Writes != 0 {
		t.Errorf("applying the same again wrote %d times", w.Writes)
	}
}

// hookedKernel runs onWrite before each write method's call.
type hookedKernel struct {
	*FakeKernel
	onWrite func()
}

func (h *hookedKernel) NewService(k model.VSKey, s model.VSSpec) error {
	h.onWrite()
	return h.FakeKernel.NewService(k, s)
}

func (h *hookedKernel) NewDestination(k model.VSKey, rs model.RSKey, w uint32) error {
	h.onWrite()
	return h.FakeKernel.NewDestination(k, rs, w)
}

// A write that fails inside a batch is reported with its virtual server (a missing
// scheduler still as SchedulerUnavailableError), the others are applied, and the failed
// virtual server is re-read so the cache tells the truth.
func TestBatchedFailuresAreFiledAndReRead(t *testing.T) {
	t.Run("copying", func(t *testing.T) { testBatchedFailuresAreFiledAndReRead(t, false) })
	t.Run("sharing", func(t *testing.T) { testBatchedFailuresAreFiledAndReRead(t, true) })
}

func testBatchedFailuresAreFiledAndReRead(t *testing.T, share bool) {
	f := NewFakeKernel()
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
	expectDump(t, f, good, bad)
}

// When the kernel's answers are lost (ENOBUFS), the writes of unknown outcome are reported
// and their virtual servers re-read: the cache matches the kernel, and applying the same
// state again writes nothing.
func TestBatchedUnknownOutcomesAreReRead(t *testing.T) {
	t.Run("copying", func(t *testing.T) { testBatchedUnknownOutcomesAreReRead(t, false) })
	t.Run("sharing", func(t *testing.T) { testBatchedUnknownOutcomesAreReRead(t, true) })
}

func testBatchedUnknownOutcomesAreReRead(t *testing.T, share bool) {
	f := NewFakeKernel()
	f.LoseAnswers = func(i int) bool { return i%2 == 1 }
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
	f.LoseAnswers = nil
	for k := range want {
		got, ok := r.Applied(k)
		inKernel, err := ReadVirtualServer(f, k)
		if !ok || err != nil || !got.Equal(normalize(inKernel)) {
			t.Errorf("%v: cache %v, kernel %v (%v)", k, got, inKernel, err)
		}
	}
	if res := r.Apply(want); len(res.Errors) != 0 || res.Writes != 0 {
		t.Errorf("after the re-read, applying again: %d writes, errors %v", res.Writes, res.Errors)
	}
}
