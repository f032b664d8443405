package controller

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kube-ipvs/kube-ipvs/metrics"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// sources are the informers the controller reads: every Service, EndpointSlice and
// ServiceCIDR (when the source has them), and this node's Node object alone.
type sources struct {
	informers    []cache.SharedIndexInformer // all of them, to start
	svcInf       cache.SharedIndexInformer
	sliceInf     cache.SharedIndexInformer
	services     corelisters.ServiceLister
	slices       cache.Indexer
	nodes        corelisters.NodeLister
	serviceCIDRs networkinglisters.ServiceCIDRLister // nil: the source has none
	synced       []cache.InformerSynced
	// cidrsSynced is kept apart from synced: the start never waits for it for long
	// (waitServiceCIDRs).
	cidrsSynced []cache.InformerSynced
}

const sliceByService = "service"

// informerHandler is an informer and the controller's handler of its events.
type informerHandler struct {
	inf cache.SharedIndexInformer
	fn  func(obj any)
	// update, when set, takes updates (old and new) in place of fn.
	update func(old, obj any)
}

// newInformer is an informer over lw, resynced every resync (--config-sync-period; 0:
// never). Cached objects drop what the
// proxy never reads (trimCached): on a real API server it is a large share of every object,
// and tens of thousands of Services and EndpointSlices are held in memory.
func newInformer(lw cache.ListerWatcher, example runtime.Object, resync time.Duration, indexers cache.Indexers) (cache.SharedIndexInformer, error) {
	inf := cache.NewSharedIndexInformer(lw, example, resync, indexers)
	return inf, inf.SetTransform(trimCached)
}

// newSources sets the informers up over lws and sends their events to c's handlers.
// resync is the informers' resync period (--config-sync-period; 0: none).
func newSources(lws ListerWatchers, nodeName string, resync time.Duration, c *Controller) (sources, error) {
	var s sources
	var err error
	if s.svcInf, err = newInformer(lws.Services, &corev1.Service{}, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}); err != nil {
		return s, err
	}
	s.services = corelisters.NewServiceLister(s.svcInf.GetIndexer())
	if s.sliceInf, err = newInformer(lws.EndpointSlices, &discoveryv1.EndpointSlice{}, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, sliceByService: indexSliceByService}); err != nil {
		return s, err
	}
	s.slices = s.sliceInf.GetIndexer()
	// Only this node's object: a node never needs the other thousands.
	nodeInf, err := newInformer(WithFieldSelector(lws.Nodes, "metadata.name="+nodeName), &corev1.Node{}, resync, cache.Indexers{})
	if err != nil {
		return s, err
	}
	s.nodes = corelisters.NewNodeLister(nodeInf.GetIndexer())
	s.informers = []cache.SharedIndexInformer{s.svcInf, s.sliceInf, nodeInf}

	handlers := []informerHandler{
		{inf: s.svcInf, fn: c.onService},
		{inf: s.sliceInf, fn: c.onSlice, update: c.onSliceUpdate},
		{inf: nodeInf, fn: c.onNode},
	}
	for _, h := range handlers {
		synced, err := h.register()
		if err != nil {
			return s, err
		}
		s.synced = append(s.synced, synced...)
	}
	return s, s.watchServiceCIDRs(lws.ServiceCIDRs, resync, c)
}

// register sends the informer's events to the handler. It returns what says that the
// informer synced and the handler's own HasSynced: true once the initial objects were not
// only stored but also delivered to the handler. Waiting for it means every initial dirty
// mark is in before the first full sync, which covers them all; otherwise marks that arrive
// late make a second sync recompute up to every Service for nothing.
func (h informerHandler) register() ([]cache.InformerSynced, error) {
	fn := h.fn
	update := h.update
	if update == nil {
		update = func(_, obj any) { fn(obj) }
	}
	reg, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    fn,
		UpdateFunc: update,
		DeleteFunc: fn,
	})
	if err != nil {
		return nil, err
	}
	return []cache.InformerSynced{h.inf.HasSynced, reg.HasSynced}, nil
}

// start runs the informers and waits for their caches.
func (s *sources) start(ctx context.Context) error {
	for _, inf := range s.informers {
		go inf.RunWithContext(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		return errors.New("informer caches did not sync")
	}
	return nil
}

// serviceAndSlices returns a Service and its EndpointSlices from the caches (nil: gone).
func (s *sources) serviceAndSlices(name model.ServiceName) (*corev1.Service, []*discoveryv1.EndpointSlice) {
	svc, err := s.services.Services(name.Namespace).Get(name.Name)
	if err != nil {
		return nil, nil
	}
	objs, _ := s.slices.ByIndex(sliceByService, name.Namespace+"/"+name.Name)
	slices := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		slices = append(slices, o.(*discoveryv1.EndpointSlice))
	}
	return svc, slices
}

// trimCached is the informers' transform: it removes from cached objects what the
// proxy never reads and what is large across tens of thousands of them: managedFields,
// kubectl's last-applied-configuration annotation (a copy of the whole object), and in
// EndpointSlices the owner references, each endpoint's deprecatedTopology, and of its
// targetRef everything but a Pod's name (which `kube-ipvs list` and `explain` show).
func trimCached(obj any) (any, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		trim(d.Obj)
		return d, nil
	}
	trim(obj)
	return obj, nil
}

// lastApplied is the annotation kubectl apply keeps the whole applied object in.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

func trim(obj any) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	m.SetManagedFields(nil)
	delete(m.GetAnnotations(), lastApplied)
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
		s.OwnerReferences = nil
		for i := range s.Endpoints {
			s.Endpoints[i].TargetRef = podRef(s.Endpoints[i].TargetRef)
			s.Endpoints[i].DeprecatedTopology = nil
		}
	}
}

// podRef keeps of an endpoint's targetRef only what names its Pod: in place, so that
// the rest of the reference (UID, resource version, ...) is freed without a new object.
func podRef(ref *corev1.ObjectReference) *corev1.ObjectReference {
	if ref == nil || ref.Kind != "Pod" {
		return nil
	}
	*ref = corev1.ObjectReference{Kind: "Pod", Name: ref.Name}
	return ref
}

func indexSliceByService(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	svc := s.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + svc}, nil
}

func (c *Controller) onService(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if s, ok := obj.(*corev1.Service); ok {
		name := model.ServiceName{Namespace: s.Namespace, Name: s.Name}
		c.noteServiceChange(name)
		c.markDirty(name, metrics.ChangeService)
	}
}

func (c *Controller) onSlice(obj any) { c.sliceEvent(obj, true) }

// onSliceUpdate is onSlice for an update, whose trigger time counts only if the slice
// changed: the informer's relist after a broken watch, or its periodic resync, hands every
// slice over again, unchanged (the same resourceVersion and trigger time), and that is no
// change to observe, as kube-proxy records a trigger time only for a slice that changed.
func (c *Controller) onSliceUpdate(old, obj any) {
	o, ok1 := old.(*discoveryv1.EndpointSlice)
	n, ok2 := obj.(*discoveryv1.EndpointSlice)
	changed := !ok1 || !ok2 || o.ResourceVersion != n.ResourceVersion ||
		o.Annotations[metrics.AnnotationLastChangeTriggerTime] != n.Annotations[metrics.AnnotationLastChangeTriggerTime]
	c.sliceEvent(obj, changed)
}

// sliceEvent marks a slice's Service dirty; with newTrigger, its trigger time waits to be
// observed once programmed.
func (c *Controller) sliceEvent(obj any, newTrigger bool) {
	deleted := false
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
		if svc := s.Labels[discoveryv1.LabelServiceName]; svc != "" {
			name := model.ServiceName{Namespace: s.Namespace, Name: svc}
			// Handlers run after the informer's store changed: a slice missing there was deleted.
			if !deleted {
				_, exists, err := c.src.slices.Get(s)
				deleted = err == nil && !exists
			}
			c.noteSliceChange(s, name, deleted, newTrigger)
			c.markDirty(name, metrics.ChangeEndpoint)
		}
	}
}

func (c *Controller) onNode(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	n, ok := obj.(*corev1.Node)
	if !ok || n.Name != c.cfg.NodeName {
		return
	}
	// Handlers run after the informer's store changed: a node missing there was deleted.
	if _, err := c.src.nodes.Get(n.Name); err != nil {
		c.noteNode(nil)
	} else {
		c.noteNode(n)
	}
	c.noteQueued(metrics.ChangeOther, time.Now())
	// The zone or addresses may have changed: every Service is recomputed.
	c.mu.Lock()
	c.nodeChanged = true
	c.mu.Unlock()
	c.poke()
}

func (c *Controller) markDirty(name model.ServiceName, kind string) {
	c.noteQueued(kind, time.Now())
	// The gate goes up before the mark, so that whoever sees the mark sees the gate up: a
	// raise after it could come after the loop applied the change and lowered the gate,
	// and hold the background for nothing.
	c.cfg.Gate.Raise() // until the loop has looked at it (see Run)
	c.mu.Lock()
	c.dirty[name] = true
	c.mu.Unlock()
	c.poke()
}

func (c *Controller) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}
