package manifests

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Source holds the objects of the loaded manifests and serves them to informers as an API
// server would: a List and Watch per resource (ListerWatcher), with resource versions.
// Sync writes a loaded file set into it. A write never waits for a reader and never fails
// for one: each watch queues its events without bound (watcher.go), so a slow or blocked
// informer delays only itself, and every event still reaches it.
type Source struct {
	// mu orders every write, and the start of every List and Watch against them, so that a
	// watch from a listed resource version sees exactly the writes after that list.
	mu sync.Mutex
	rv uint64 // the resource version of the last write (one counter, as etcd's)
	// current is what the last Sync applied, keyed as Objects is: the next Sync compares the
	// loaded files with it to write only what changed.
	current Objects
	stores  map[string]*store
}

// historyLimit bounds the events a resource keeps for watches that start from an older
// resource version than the newest (a reflector watches from its list's version, and
// writes may come in between). A watch from before the oldest kept event gets 410 Gone,
// and the reflector lists again, as with an API server whose watch cache moved on.
var historyLimit = 4096

// kind describes one resource the source serves.
type kind struct {
	name       string // as in Objects' keys: "Service"
	namespaced bool
	// list builds the typed list (ServiceList, ...) of copies of objs.
	list func(objs []runtime.Object) runtime.Object
}

// store is one resource's objects, its recent events and its watches. Objects in it are
// never changed once stored (a write replaces them), so watches copy them outside the lock.
type store struct {
	kind kind
	objs map[string]runtime.Object // by namespace/name (name alone: cluster-scoped)
	// history is the resource's events after resource version oldest, in order.
	history  []event
	oldest   uint64
	watchers map[*watcher]struct{}
}

// event is a write to one object: old is nil for a creation, obj nil for a deletion.
type event struct {
	rv       uint64
	old, obj runtime.Object
}

var kinds = []kind{
	{"Service", true, func(objs []runtime.Object) runtime.Object {
		l := &corev1.ServiceList{Items: make([]corev1.Service, 0, len(objs))}
		for _, o := range objs {
			l.Items = append(l.Items, *o.(*corev1.Service).DeepCopy())
		}
		return l
	}},
	{"EndpointSlice", true, func(objs []runtime.Object) runtime.Object {
		l := &discoveryv1.EndpointSliceList{Items: make([]discoveryv1.EndpointSlice, 0, len(objs))}
		for _, o := range objs {
			l.Items = append(l.Items, *o.(*discoveryv1.EndpointSlice).DeepCopy())
		}
		return l
	}},
	{"Node", false, func(objs []runtime.Object) runtime.Object {
		l := &corev1.NodeList{Items: make([]corev1.Node, 0, len(objs))}
		for _, o := range objs {
			l.Items = append(l.Items, *o.(*corev1.Node).DeepCopy())
		}
		return l
	}},
	{"ServiceCIDR", false, func(objs []runtime.Object) runtime.Object {
		l := &networkingv1.ServiceCIDRList{Items: make([]networkingv1.ServiceCIDR, 0, len(objs))}
		for _, o := range objs {
			l.Items = append(l.Items, *o.(*networkingv1.ServiceCIDR).DeepCopy())
		}
		return l
	}},
}

// NewSource returns an empty source.
func NewSource() *Source {
	s := &Source{current: Objects{}, stores: map[string]*store{}}
	for _, k := range kinds {
		s.stores[k.name] = &store{kind: k, objs: map[string]runtime.Object{}, watchers: map[*watcher]struct{}{}}
	}
	return s
}

// Changes says what a Sync wrote, by the keys of Objects.
type Changes struct {
	Added, Updated, Deleted []string
}

// Sync makes the source hold exactly objs (what Load returned): it adds new objects,
// updates changed ones and deletes those no longer there, and writes nothing for an
// unchanged object, so informers see events only for what changed in the files. objs is
// the source's afterwards and must not be changed by the caller.
func (s *Source) Sync(objs Objects) (Changes, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ch Changes
	var errs []error
	next := make(Objects, len(objs))
	for key, obj := range objs {
		old, had := s.current[key]
		if had && reflect.DeepEqual(old, obj) {
			next[key] = obj
			continue
		}
		st, name, err := s.storeOf(obj)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
			continue
		}
		st.write(s.nextRV(), name, obj)
		next[key] = obj
		if had {
			ch.Updated = append(ch.Updated, key)
		} else {
			ch.Added = append(ch.Added, key)
		}
	}
	for key, obj := range s.current {
		if _, still := next[key]; still {
			continue
		}
		if _, failed := objs[key]; failed {
			// A changed object that could not be written stays as it was.
			next[key] = obj
			continue
		}
		st, name, _ := s.storeOf(obj) // it was stored, so its kind is known
		st.write(s.nextRV(), name, nil)
		ch.Deleted = append(ch.Deleted, key)
	}
	s.current = next
	return ch, errors.Join(errs...)
}

func (s *Source) nextRV() uint64 {
	s.rv++
	return s.rv
}

// storeOf returns the store of obj's resource and obj's key in it.
func (s *Source) storeOf(obj runtime.Object) (*store, string, error) {
	var kindName string
	switch obj.(type) {
	case *corev1.Service:
		kindName = "Service"
	case *discoveryv1.EndpointSlice:
		kindName = "EndpointSlice"
	case *corev1.Node:
		kindName = "Node"
	case *networkingv1.ServiceCIDR:
		kindName = "ServiceCIDR"
	default:
		return nil, "", fmt.Errorf("the source does not hold %T objects", obj)
	}
	st := s.stores[kindName]
	m := obj.(metav1.Object)
	if st.kind.namespaced {
		return st, m.GetNamespace() + "/" + m.GetName(), nil
	}
	return st, m.GetName(), nil
}

// write stores obj (a copy stamped with rv) under name, or deletes name (obj nil), records
// the event and hands it to every watch. The caller holds the source's lock.
func (st *store) write(rv uint64, name string, obj runtime.Object) {
	old := st.objs[name]
	if obj != nil {
		obj = obj.DeepCopyObject()
		obj.(metav1.Object).SetResourceVersion(strconv.FormatUint(rv, 10))
		st.objs[name] = obj
	} else {
		if old == nil {
			return
		}
		delete(st.objs, name)
	}
	e := event{rv: rv, old: old, obj: obj}
	st.history = append(st.history, e)
	if len(st.history) > historyLimit {
		// Drop the older half at once, so that trimming costs O(1) per event.
		drop := len(st.history) - historyLimit/2
		st.oldest = st.history[drop-1].rv
		st.history = append([]event(nil), st.history[drop:]...)
	}
	for w := range st.watchers {
		w.send(e)
	}
}

// list returns the resource's objects that sel matches, as a typed list at the source's
// current resource version.
func (s *Source) list(kindName string, opts metav1.ListOptions) (runtime.Object, error) {
	sel, err := newSelector(kindName, opts)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	st := s.stores[kindName]
	matched := make([]runtime.Object, 0, len(st.objs))
	for _, o := range st.objs {
		if sel.matches(o) {
			matched = append(matched, o)
		}
	}
	rv := s.rv
	s.mu.Unlock()
	// Copies are made outside the lock: stored objects are never changed.
	l := st.kind.list(matched)
	l.(metav1.ListInterface).SetResourceVersion(strconv.FormatUint(rv, 10))
	return l, nil
}

// watch starts a watch of the resource from opts.ResourceVersion: it first delivers the
// events after that version (every object as added when it is "" or "0"), then each write.
func (s *Source) watch(kindName string, opts metav1.ListOptions) (*watcher, error) {
	sel, err := newSelector(kindName, opts)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stores[kindName]
	w := newWatcher(sel, func(w *watcher) {
		s.mu.Lock()
		delete(st.watchers, w)
		s.mu.Unlock()
	})
	switch opts.ResourceVersion {
	case "", "0":
		for _, o := range st.objs {
			w.send(event{obj: o})
		}
	default:
		from, err := strconv.ParseUint(opts.ResourceVersion, 10, 64)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("resourceVersion %q is not a number", opts.ResourceVersion))
		}
		if from < st.oldest {
			return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, st.oldest))
		}
		for _, e := range st.history {
			if e.rv > from {
				w.send(e)
			}
		}
	}
	st.watchers[w] = struct{}{}
	go w.run()
	return w, nil
}

// eventFor is what a watch with sel sees of e: an object that starts or stops matching is
// added or deleted, as an API server's watch with a selector reports it. The object is the
// stored one, to be copied before it leaves; gone says that it was deleted, when the copy
// takes the deletion's resource version so that the reflector's moves on. ok is false when
// the watch sees nothing of e.
func eventFor(sel selector, e event) (t watch.EventType, obj runtime.Object, gone, ok bool) {
	oldIn := e.old != nil && sel.matches(e.old)
	newIn := e.obj != nil && sel.matches(e.obj)
	switch {
	case oldIn && newIn:
		return watch.Modified, e.obj, false, true
	case newIn:
		return watch.Added, e.obj, false, true
	case oldIn && e.obj != nil:
		return watch.Deleted, e.obj, false, true
	case oldIn:
		return watch.Deleted, e.old, true, true
	}
	return "", nil, false, false
}
