package manifests

import (
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// syncWithin runs src.Sync(objs) and fails the test if it does not return within limit: a
// write that waits for a reader is the failure these tests look for.
func syncWithin(t *testing.T, src *Source, objs Objects, limit time.Duration) Changes {
	t.Helper()
	type result struct {
		ch  Changes
		err error
	}
	done := make(chan result, 1)
	go func() {
		ch, err := src.Sync(objs)
		done <- result{ch, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.ch
	case <-time.After(limit):
		t.Fatalf("Sync of %d objects did not return within %s: it waits for a reader", len(objs), limit)
	}
	return Changes{}
}

// A watch nobody reads while thousands of objects are written: the writer neither blocks
// nor panics (client-go's fake clientset panicked with "channel full" after 100 events),
// and the reader, once it reads, gets every object, in order of writing per object.
func TestBlockedWatchReaderGetsEveryEventAndNeverBlocksTheWriter(t *testing.T) {
	src := NewSource()
	lw := src.ListerWatcher("Service")
	w, err := lw.Watch(metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	const n = 5000
	objs := synthObjects(n)
	syncWithin(t, src, objs, 30*time.Second)
	// Delete them all too: the queue holds both.
	syncWithin(t, src, Objects{}, 30*time.Second)

	added, deleted := map[string]bool{}, map[string]bool{}
	for len(deleted) < n {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch closed after %d adds and %d deletes", len(added), len(deleted))
			}
			name := e.Object.(*corev1.Service).Name
			switch e.Type {
			case watch.Added:
				if deleted[name] {
					t.Fatalf("%s added after its deletion", name)
				}
				added[name] = true
			case watch.Deleted:
				if !added[name] {
					t.Fatalf("%s deleted before it was added", name)
				}
				deleted[name] = true
			default:
				t.Fatalf("unexpected %s event for %s", e.Type, name)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("events stopped after %d adds and %d deletes of %d Services", len(added), len(deleted), n)
		}
	}
	if len(added) != n {
		t.Errorf("%d Services added, want %d", len(added), n)
	}
}

// An informer whose handler is blocked while a reload writes thousands of Services and
// EndpointSlices: the reload completes, and once the handler runs it sees every object.
func TestInformerWithBlockedHandlerGetsEveryObject(t *testing.T) {
	src := NewSource()
	inf := cache.NewSharedIndexInformer(src.ListerWatcher("EndpointSlice"), &discoveryv1.EndpointSlice{}, 0, cache.Indexers{})
	release := make(chan struct{})
	var mu sync.Mutex
	seen := map[string]bool{}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		<-release
		mu.Lock()
		seen[obj.(*discoveryv1.EndpointSlice).Name] = true
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go inf.Run(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	const n = 3000
	ch := syncWithin(t, src, synthObjects(n), 30*time.Second)
	if len(ch.Added) != 2*n {
		t.Fatalf("Sync added %d objects, want %d", len(ch.Added), 2*n)
	}
	close(release)
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		got := len(seen)
		mu.Unlock()
		if got == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the handler saw %d of %d EndpointSlices", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range n {
		if name := fmt.Sprintf("svc-%d", i); !seen[name] {
			t.Fatalf("EndpointSlice %s never reached the handler", name)
		}
	}
}
