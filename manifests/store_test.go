package manifests

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case e, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch closed")
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	return watch.Event{}
}

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// A watch from the version a List returned sees exactly the writes after it; one from a
// version older than the kept events gets 410 Gone (the reflector then lists again).
func TestWatchResumesFromAListOrIsGone(t *testing.T) {
	defer func(n int) { historyLimit = n }(historyLimit)
	historyLimit = 10
	src := NewSource()
	lw := src.ListerWatcher("Node")
	if _, err := src.Sync(Objects{"Node a": node("a", nil)}); err != nil {
		t.Fatal(err)
	}
	l, err := lw.List(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	listed := l.(*corev1.NodeList)
	if len(listed.Items) != 1 || listed.Items[0].ResourceVersion != listed.ResourceVersion {
		t.Fatalf("list %+v: want node a at the list's version", listed)
	}
	if _, err := src.Sync(Objects{"Node a": node("a", nil), "Node b": node("b", nil)}); err != nil {
		t.Fatal(err)
	}
	w, err := lw.Watch(metav1.ListOptions{ResourceVersion: listed.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, w); e.Type != watch.Added || e.Object.(*corev1.Node).Name != "b" {
		t.Errorf("first event %s %v, want b added (written after the list)", e.Type, e.Object)
	}
	w.Stop()
	if _, ok := <-w.ResultChan(); ok {
		t.Error("the result channel is open after Stop")
	}
	for i := range 30 { // more writes than the history keeps
		if _, err := src.Sync(Objects{"Node a": node("a", map[string]string{"n": strings.Repeat("x", i+1)})}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lw.Watch(metav1.ListOptions{ResourceVersion: listed.ResourceVersion}); !apierrors.IsResourceExpired(err) {
		t.Errorf("watch from a version the history no longer has: %v, want 410 Gone (expired)", err)
	}
	if _, err := lw.Watch(metav1.ListOptions{ResourceVersion: "x"}); !apierrors.IsBadRequest(err) {
		t.Errorf("watch from a malformed version: %v, want a bad request", err)
	}
}

// The proxy selects its own Node by name; label selectors work as an API server's, and an
// object that stops matching is reported deleted.
func TestSelectors(t *testing.T) {
	src := NewSource()
	lw := src.ListerWatcher("Node")
	mine, err := lw.Watch(metav1.ListOptions{FieldSelector: "metadata.name=me"})
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Stop()
	zoned, err := lw.Watch(metav1.ListOptions{LabelSelector: "zone=a"})
	if err != nil {
		t.Fatal(err)
	}
	defer zoned.Stop()
	for _, objs := range []Objects{
		{"Node other": node("other", map[string]string{"zone": "a"}), "Node me": node("me", nil)},
		{"Node other": node("other", map[string]string{"zone": "b"}), "Node me": node("me", nil)},
	} {
		if _, err := src.Sync(objs); err != nil {
			t.Fatal(err)
		}
	}
	if e := nextEvent(t, mine); e.Type != watch.Added || e.Object.(*corev1.Node).Name != "me" {
		t.Errorf("name-selected watch: %s %v, want me added", e.Type, e.Object)
	}
	if e := nextEvent(t, zoned); e.Type != watch.Added || e.Object.(*corev1.Node).Name != "other" {
		t.Errorf("label-selected watch: %s %v, want other added", e.Type, e.Object)
	}
	if e := nextEvent(t, zoned); e.Type != watch.Deleted || e.Object.(*corev1.Node).Name != "other" {
		t.Errorf("label-selected watch: %s %v, want other deleted when its zone changed", e.Type, e.Object)
	}
	l, err := lw.List(metav1.ListOptions{FieldSelector: "metadata.name=me"})
	if err != nil || len(l.(*corev1.NodeList).Items) != 1 {
		t.Errorf("list by name: %v, %v; want node me alone", l, err)
	}
	if _, err := lw.List(metav1.ListOptions{FieldSelector: "spec.unschedulable=true"}); !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "spec.unschedulable") {
		t.Errorf("unsupported field: %v, want a bad request naming it", err)
	}
}

// Sync writes only what changed, reports it, and leaves an unchanged reload without writes.
func TestSourceSyncWritesOnlyChanges(t *testing.T) {
	src := NewSource()
	first := synthObjects(3)
	ch, err := src.Sync(first)
	if err != nil || len(ch.Added) != 6 || len(ch.Updated)+len(ch.Deleted) != 0 {
		t.Fatalf("first sync: %+v, %v; want 6 added", ch, err)
	}
	second := synthObjects(2)
	changed := second["Service default/svc-1"].(*corev1.Service).DeepCopy()
	changed.Spec.Ports[0].Port = 8080
	second["Service default/svc-1"] = changed
	ch, err = src.Sync(second)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ch.Deleted)
	if len(ch.Added) != 0 || !slices.Equal(ch.Updated, []string{"Service default/svc-1"}) ||
		!slices.Equal(ch.Deleted, []string{"EndpointSlice default/svc-2", "Service default/svc-2"}) {
		t.Errorf("second sync: %+v; want svc-1 updated, svc-2 and its slice deleted", ch)
	}
	rv := src.rv
	if ch, err := src.Sync(second); err != nil || len(ch.Added)+len(ch.Updated)+len(ch.Deleted) != 0 || src.rv != rv {
		t.Errorf("a sync of the same objects wrote %+v (%v)", ch, err)
	}
}
