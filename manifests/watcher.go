package manifests

import (
	"context"
	"strconv"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// watcher is one watch of a resource. Writers append to its queue, which has no bound: a
// write never waits for the reader, never drops an event and never fails. Its goroutine
// (run) hands the events to the reader in order, each as a copy of the stored object, so
// that the reader may change what it gets (the informers' transform trims objects in place).
//
// The queue holds events, not copies: the stored objects are shared and never changed, so
// a reader that is far behind costs a pointer pair per event, not an object.
type watcher struct {
	sel    selector
	result chan watch.Event
	remove func(*watcher) // takes it off its store's watchers

	mu    sync.Mutex
	queue []event
	wake  chan struct{} // a queue that was empty has an event
	done  chan struct{} // closed by Stop
	once  sync.Once
}

func newWatcher(sel selector, remove func(*watcher)) *watcher {
	return &watcher{sel: sel, result: make(chan watch.Event), remove: remove,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// send queues e. It never blocks (the caller holds the source's lock).
func (w *watcher) send(e event) {
	w.mu.Lock()
	w.queue = append(w.queue, e)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run delivers the queued events until Stop, then closes the result channel.
func (w *watcher) run() {
	defer close(w.result)
	for {
		w.mu.Lock()
		batch := w.queue
		w.queue = nil
		w.mu.Unlock()
		if len(batch) == 0 {
			select {
			case <-w.wake:
				continue
			case <-w.done:
				return
			}
		}
		for i, e := range batch {
			t, obj, gone, ok := eventFor(w.sel, e)
			batch[i] = event{} // what was delivered can be freed while the rest waits
			if !ok {
				continue
			}
			obj = obj.DeepCopyObject()
			if gone {
				obj.(metav1.Object).SetResourceVersion(strconv.FormatUint(e.rv, 10))
			}
			select {
			case w.result <- watch.Event{Type: t, Object: obj}:
			case <-w.done:
				return
			}
		}
	}
}

// Stop ends the watch: no more events are queued or delivered, and ResultChan closes.
func (w *watcher) Stop() {
	w.once.Do(func() {
		w.remove(w)
		close(w.done)
	})
}

// ResultChan is where the events arrive.
func (w *watcher) ResultChan() <-chan watch.Event { return w.result }

// ListerWatcher serves one resource of a Source to a reflector (an informer), as a typed
// client-go List and Watch would from an API server.
type ListerWatcher struct {
	src  *Source
	kind string
}

// ListerWatcher returns the ListerWatcher of kind: "Service", "EndpointSlice", "Node" or
// "ServiceCIDR".
func (s *Source) ListerWatcher(kind string) *ListerWatcher {
	if s.stores[kind] == nil {
		panic("manifests: no resource " + kind) // a programming error: the kinds are fixed
	}
	return &ListerWatcher{src: s, kind: kind}
}

// List lists the resource's objects that opts' selectors match.
func (l *ListerWatcher) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.src.list(l.kind, opts)
}

// Watch watches the resource from opts.ResourceVersion; a version older than the source
// still has events for is refused as expired (410 Gone), and the reflector lists again.
func (l *ListerWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.src.watch(l.kind, opts)
}

// ListWithContext is List (it never waits, so there is nothing to cancel).
func (l *ListerWatcher) ListWithContext(_ context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	return l.List(opts)
}

// WatchWithContext is Watch, stopped when ctx ends.
func (l *ListerWatcher) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := l.src.watch(l.kind, opts)
	if err != nil {
		return nil, err
	}
	go func() {
		select {
		case <-ctx.Done():
			w.Stop()
		case <-w.done:
		}
	}()
	return w, nil
}

// IsWatchListSemanticsUnSupported tells client-go's reflector to list and then watch: the
// source does not stream its initial objects in a watch (the WatchList protocol).
func (l *ListerWatcher) IsWatchListSemanticsUnSupported() bool { return true }
