// Package controller watches Services, EndpointSlices and this proxy's Node, tracks which
// Services changed, computes their desired state with package proxy, and drives the kernel
// reconcilers: incrementally for changes, and with a full repair every sync period.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kube-ipvs/kube-ipvs/metrics"
	"github.com/kube-ipvs/kube-ipvs/model"
	"github.com/kube-ipvs/kube-ipvs/proxy"
)

// Controller is the proxy's control loop. Create it with New, then call Run or SyncOnce.
type Controller struct {
	cfg       Config
	fw        Firewall // nil: no firewall (tests, or a mode without it)
	ipvs      IPVS
	conntrack Conntrack
	addrs     Addresses
	hostAddrs func() ([]netip.Addr, error)
	recorder  record.EventRecorder
	log       *slog.Logger

	factory     informers.SharedInformerFactory
	nodeFactory informers.SharedInformerFactory
	services    corelisters.ServiceLister
	slices      cache.Indexer
	nodes       corelisters.NodeLister
	synced      []cache.InformerSynced

	mu        sync.Mutex
	dirty     map[model.ServiceName]bool
	fullDue   bool
	wake      chan struct{}
	retryVS   map[model.VSKey]bool
	retryIP   map[netip.Addr]bool
	backoff   time.Duration
	retryAt   time.Time
	lastSync  time.Time
	lastFull  time.Time
	lastDrain time.Time
	// fullTook is how long the last successful full sync took: it spaces the periodic
	// repair (see repairInterval).
	fullTook time.Duration

	obs Observers
	// triggers are EndpointSlice change times per Service not yet programmed (guarded by mu).
	triggers map[model.ServiceName][]string

	// Owned by the sync goroutine; stateMu guards state against readers on other goroutines
	// (metrics scrapes), and is written only by the sync goroutine.
	stateMu     sync.RWMutex
	fwEntries   int
	healthErr   map[model.ServiceName]string
	state       *desiredState
	unavailable map[string]bool
	problems    map[model.ServiceName]string
	nodeIPs     []netip.Addr
	hostAddrSet map[netip.Addr]bool // every address of the node's interfaces but kube-ipvs0's
	nodeZone    string
	stats       Stats
}

// Stats describes the last sync, for logs and tests.
type Stats struct {
	Full         bool
	Services     int // Services recomputed
	IPVSWrites   int
	AddrWrites   int
	SetWrites    int
	Restores     int
	Errors       int
	Duration     time.Duration
	TotalSyncs   int
	VirtualSrvrs int
	// Phases is where a full sync's time went (zero for an incremental one): the log shows
	// it, so that an operator can see what a slow repair is made of.
	Phases FullSyncPhases
}

// FullSyncPhases are the durations of a full sync's steps. Addresses and IPVS run at the
// same time, so the sync took about Build + Firewall + the longer of the two.
type FullSyncPhases struct {
	Build, Firewall, Addresses, IPVS time.Duration
}

const sliceByService = "service"

// New wires a controller to a clientset (a real one, or the fake one the manifest source
// fills) and to the kernel reconcilers.
func New(cfg Config, client kubernetes.Interface, fw Firewall, ipvs IPVS, addrs Addresses, ct Conntrack,
	hostAddrs func() ([]netip.Addr, error), recorder record.EventRecorder, obs Observers, log *slog.Logger) (*Controller, error) {
	if cfg.MaxRetryBackoff == 0 {
		cfg.MaxRetryBackoff = time.Minute
	}
	c := &Controller{
		cfg: cfg, fw: fw, ipvs: ipvs, conntrack: ct, addrs: addrs, hostAddrs: hostAddrs, recorder: recorder, log: log,
		dirty: map[model.ServiceName]bool{}, wake: make(chan struct{}, 1), fullDue: true,
		retryVS: map[model.VSKey]bool{}, retryIP: map[netip.Addr]bool{},
		state: newDesiredState(), unavailable: map[string]bool{}, problems: map[model.ServiceName]string{},
		obs: obs, triggers: map[model.ServiceName][]string{}, healthErr: map[model.ServiceName]string{},
	}
	// Cached objects drop what the proxy never reads (trimCached): on a real API server it is
	// a large share of every object, and tens of thousands of Services and EndpointSlices
	// are held in memory.
	c.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trimCached))
	svcInf := c.factory.Core().V1().Services()
	sliceInf := c.factory.Discovery().V1().EndpointSlices()
	c.services = svcInf.Lister()
	if err := sliceInf.Informer().AddIndexers(cache.Indexers{sliceByService: indexSliceByService}); err != nil {
		return nil, err
	}
	c.slices = sliceInf.Informer().GetIndexer()
	// Only this node's object: a node never needs the other thousands.
	c.nodeFactory = informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + cfg.NodeName }),
		informers.WithTransform(trimCached))
	nodeInf := c.nodeFactory.Core().V1().Nodes()
	c.nodes = nodeInf.Lister()

	handlers := []struct {
		inf cache.SharedIndexInformer
		fn  func(obj any)
	}{
		{svcInf.Informer(), c.onService},
		{sliceInf.Informer(), c.onSlice},
		{nodeInf.Informer(), c.onNode},
	}
	for _, h := range handlers {
		fn := h.fn
		reg, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    fn,
			UpdateFunc: func(_, obj any) { fn(obj) },
			DeleteFunc: fn,
		})
		if err != nil {
			return nil, err
		}
		// The handler's own HasSynced: true once the initial objects were not only stored
		// but also delivered to the handler. Waiting for it means every initial dirty mark
		// is in before the first full sync, which covers them all; otherwise marks that
		// arrive late make a second sync recompute up to every Service for nothing.
		c.synced = append(c.synced, h.inf.HasSynced, reg.HasSynced)
	}
	return c, nil
}

// trimCached is the informers' transform: it removes from cached objects what the
// proxy never reads and what is large across tens of thousands of them: managedFields,
// kubectl's last-applied-configuration annotation (a copy of the whole object), and in
// EndpointSlices the owner references and each endpoint's targetRef (the Pod it is) and
// deprecatedTopology.
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
			s.Endpoints[i].TargetRef = nil
			s.Endpoints[i].DeprecatedTopology = nil
		}
	}
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
		c.markDirty(model.ServiceName{Namespace: s.Namespace, Name: s.Name})
	}
}

func (c *Controller) onSlice(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
		if svc := s.Labels[discoveryv1.LabelServiceName]; svc != "" {
			name := model.ServiceName{Namespace: s.Namespace, Name: svc}
			c.noteSliceChange(s, name)
			c.markDirty(name)
		}
	}
}

func (c *Controller) onNode(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if n, ok := obj.(*corev1.Node); ok && n.Name == c.cfg.NodeName {
		// Handlers run after the informer's store changed: a node missing there was deleted.
		if c.nodeGone(n) {
			c.noteNode(nil)
		} else {
			c.noteNode(n)
		}
		c.noteQueued(time.Now())
		// The zone or addresses may have changed: every Service is recomputed.
		c.mu.Lock()
		c.fullDue = true
		c.mu.Unlock()
		c.poke()
	}
}

// nodeGone reports whether the node object is no longer in the informer (it was deleted).
func (c *Controller) nodeGone(n *corev1.Node) bool {
	_, err := c.nodes.Get(n.Name)
	return err != nil
}

func (c *Controller) markDirty(name model.ServiceName) {
	c.noteQueued(time.Now())
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

// start runs the informers and waits for their caches.
func (c *Controller) start(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	c.nodeFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return errors.New("informer caches did not sync")
	}
	return nil
}

// SyncOnce waits for the informers, makes one full sync and reports whether it succeeded.
func (c *Controller) SyncOnce(ctx context.Context) error {
	if err := c.start(ctx); err != nil {
		return err
	}
	if err := c.sync(true); err != nil {
		return err
	}
	return nil
}

// Run syncs until ctx ends: changes after at most MinSyncPeriod, a full repair every
// SyncPeriod (or further apart when a repair takes long, see repairInterval), failed kernel
// calls again with exponential backoff.
func (c *Controller) Run(ctx context.Context) error {
	if err := c.start(ctx); err != nil {
		return err
	}
	for {
		c.mu.Lock()
		now := time.Now()
		ready := now.Sub(c.lastSync) >= c.cfg.MinSyncPeriod
		retryReady := c.retryAt.IsZero() || !now.Before(c.retryAt)
		pendingRetry := len(c.retryVS) > 0 || len(c.retryIP) > 0
		period := repairInterval(c.cfg.SyncPeriod, c.fullTook)
		full := now.Sub(c.lastFull) >= period || (c.fullDue && ready && retryReady)
		work := full || (ready && (len(c.dirty) > 0 || (pendingRetry && retryReady)))
		next := c.lastFull.Add(period)
		if len(c.dirty) > 0 {
			next = minTime(next, c.lastSync.Add(c.cfg.MinSyncPeriod))
		}
		if pendingRetry || c.fullDue {
			next = minTime(next, maxTime(c.retryAt, c.lastSync.Add(c.cfg.MinSyncPeriod)))
		}
		drainDue := time.Time{}
		if c.ipvs.Draining() > 0 {
			drainDue = c.lastDrain.Add(drainInterval)
			next = minTime(next, drainDue)
		}
		c.mu.Unlock()

		if !drainDue.IsZero() && !now.Before(drainDue) {
			c.drain()
			continue
		}

		if work {
			_ = c.sync(full) // errors are logged and retried inside
			continue
		}
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-c.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// repairDutyCycle bounds the share of the sync loop's time the periodic repair may take:
// a change that arrives during a repair waits for it, so at a scale where one repair takes
// longer than SyncPeriod/repairDutyCycle the repairs are spaced further apart. (kube-proxy's
// IPVS mode, whose every sync is a full one, keeps a core busy at a few thousand Services.)
const repairDutyCycle = 5

// repairInterval is the time from the end of one periodic repair to the start of the next:
// syncPeriod, or repairDutyCycle times the last repair's duration if that is longer.
func repairInterval(syncPeriod, lastTook time.Duration) time.Duration {
	return max(syncPeriod, repairDutyCycle*lastTook)
}

// drainInterval is how often draining real servers are checked for remaining connections.
const drainInterval = time.Second

// drain ends the drains whose connections are gone or whose time is up.
func (c *Controller) drain() {
	res := c.ipvs.Drain()
	c.mu.Lock()
	c.lastDrain = time.Now()
	c.mu.Unlock()
	c.afterIPVS(res)
	for k, e := range res.Errors {
		c.log.Error("checking a draining real server failed; will retry", "virtual_server", k, "err", e)
	}
	if res.Writes > 0 {
		c.log.Info("drained real servers removed", "ipvs_writes", res.Writes, "still_draining", c.ipvs.Draining())
	}
}

// afterIPVS cleans conntrack for UDP real servers that went away and for UDP virtual
// servers that got their first real server.
func (c *Controller) afterIPVS(res IPVSResult) {
	c.noteIPVS(res)
	if c.conntrack == nil {
		return
	}
	for _, r := range res.RemovedUDP {
		if n, err := c.conntrack.ClearRealServer(r.VS, r.RS); err != nil {
			c.log.Warn("clearing conntrack entries of a removed UDP endpoint", "virtual_server", r.VS, "real_server", r.RS, "err", err)
		} else if n > 0 {
			c.log.Info("cleared conntrack entries of a removed UDP endpoint", "virtual_server", r.VS, "real_server", r.RS, "entries", n)
		}
	}
	for _, vs := range res.FirstUDPReals {
		if n, err := c.conntrack.ClearVirtualServer(vs); err != nil {
			c.log.Warn("clearing stale conntrack entries of a UDP Service", "virtual_server", vs, "err", err)
		} else if n > 0 {
			c.log.Info("cleared stale conntrack entries of a UDP Service", "virtual_server", vs, "entries", n)
		}
	}
}

// Stats returns the statistics of the last sync.
func (c *Controller) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// sync computes and applies. full recomputes every Service and repairs the kernel against a
// dump; otherwise only dirty Services (and earlier failures) are applied from the caches.
func (c *Controller) sync(full bool) error {
	start := time.Now()
	c.mu.Lock()
	dirty := c.dirty
	c.dirty = map[model.ServiceName]bool{}
	retryVS, retryIP := c.retryVS, c.retryIP
	c.retryVS, c.retryIP = map[model.VSKey]bool{}, map[netip.Addr]bool{}
	triggers := c.triggers
	c.triggers = map[model.ServiceName][]string{}
	if full {
		c.fullDue = false
	}
	c.mu.Unlock()

	st := Stats{Full: full}
	var vsErrs map[model.VSKey]error
	var ipErrs map[netip.Addr]error
	var err error
	if full {
		st.Services, vsErrs, ipErrs, err = c.syncFull(&st)
	} else {
		st.Services, vsErrs, ipErrs = c.syncChanged(dirty, retryVS, retryIP, &st)
	}
	st.Errors = len(vsErrs) + len(ipErrs)
	if err != nil {
		st.Errors++
	}
	st.Duration = time.Since(start)
	st.VirtualSrvrs = len(c.state.vsOwner)

	c.mu.Lock()
	for k, e := range vsErrs {
		c.retryVS[k] = true
		c.logVSError(k, e)
	}
	for a, e := range ipErrs {
		c.retryIP[a] = true
		c.log.Error("binding address failed; will retry", "address", a, "services", joinNames(c.state.servicesBinding(a)), "err", e)
	}
	if err != nil {
		c.fullDue = true // a failed full sync is retried in full
	}
	failed := st.Errors > 0
	if failed {
		if c.backoff == 0 {
			c.backoff = time.Second
		} else {
			c.backoff = min(2*c.backoff, c.cfg.MaxRetryBackoff)
		}
		c.retryAt = time.Now().Add(c.backoff)
	} else {
		c.backoff = 0
		c.retryAt = time.Time{}
	}
	c.lastSync = time.Now()
	if full {
		c.lastFull = c.lastSync
		if err == nil {
			prev := repairInterval(c.cfg.SyncPeriod, c.fullTook)
			c.fullTook = st.Duration
			if next := repairInterval(c.cfg.SyncPeriod, c.fullTook); prev <= c.cfg.SyncPeriod && next > c.cfg.SyncPeriod {
				c.log.Warn("the periodic repair is slow: it now runs less often than --sync-period, so that changes wait for it at most a fifth of the time",
					"took", st.Duration.Round(time.Millisecond), "sync_period", c.cfg.SyncPeriod, "repair_every", next.Round(time.Second))
			}
		}
	}
	st.TotalSyncs = c.stats.TotalSyncs + 1
	c.stats = st
	c.mu.Unlock()

	c.noteSync(full, st, err != nil, start, triggers)
	attrs := []any{"full", st.Full, "services", st.Services, "ipvs_writes", st.IPVSWrites,
		"addr_writes", st.AddrWrites, "ipset_writes", st.SetWrites, "iptables_restores", st.Restores, "errors", st.Errors, "virtual_servers", st.VirtualSrvrs, "took", st.Duration.Round(time.Microsecond)}
	if full {
		p := st.Phases
		attrs = append(attrs, "took_build", p.Build.Round(time.Millisecond), "took_firewall", p.Firewall.Round(time.Millisecond),
			"took_addresses", p.Addresses.Round(time.Millisecond), "took_ipvs", p.IPVS.Round(time.Millisecond))
	}
	c.log.Info("sync done", attrs...)
	if err != nil {
		return err
	}
	if failed {
		return fmt.Errorf("%d kernel operations failed (see the log); they will be retried", st.Errors)
	}
	return nil
}

func (c *Controller) logVSError(k model.VSKey, e error) {
	owner, _ := c.state.ownerOf(k)
	var su SchedulerUnavailable
	if errors.As(e, &su) {
		c.unavailable[su.UnavailableScheduler()] = true
		c.log.Warn("the kernel has no such IPVS scheduler; the Service gets the default", "service", owner,
			"virtual_server", k, "scheduler", su.UnavailableScheduler(), "default", c.cfg.DefaultScheduler)
		if owner.Name != "" {
			c.dirty[owner] = true
		}
		return
	}
	c.log.Error("programming a virtual server failed; will retry", "service", owner, "virtual_server", k, "err", e)
}

// refreshNode reads the zone, the node's own addresses (which no Service may take) and the
// node IPs for NodePort virtual servers.
func (c *Controller) refreshNode() error {
	c.nodeZone = ""
	node, nerr := c.nodes.Get(c.cfg.NodeName)
	if nerr == nil {
		c.nodeZone = node.Labels[corev1.LabelTopologyZone]
	}
	host, err := c.hostAddrs()
	if err != nil {
		return fmt.Errorf("listing the node's addresses: %w", err)
	}
	c.hostAddrSet = make(map[netip.Addr]bool, len(host))
	for _, a := range host {
		c.hostAddrSet[a.WithZone("").Unmap()] = true
	}
	if !c.cfg.NodePortPrimary {
		c.nodeIPs = proxy.NodePortAddresses(c.cfg.NodePortAddresses, host)
		return nil
	}
	c.nodeIPs = nil
	if node != nil {
		for _, a := range node.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
				c.nodeIPs = append(c.nodeIPs, ip.Unmap())
			}
		}
	}
	return nil
}

func (c *Controller) proxyConfig() *proxy.Config {
	return &proxy.Config{
		DefaultScheduler:      c.cfg.DefaultScheduler,
		UnavailableSchedulers: c.unavailable,
		NoSchedulers:          c.cfg.NoSchedulers,
		NodeName:              c.cfg.NodeName,
		NodeZone:              c.nodeZone,
		NodeIPs:               c.nodeIPs,
		HostAddrs:             c.hostAddrSet,
	}
}

// recompute builds one Service's desired state, resolves it against the other Services'
// (a virtual server another Service owns is taken out of it, with a Problem naming that
// Service), and only then gives the resolved state to the firewall and reports its
// Problems: a Service that lost a conflict must write nothing for what it lost, and be told.
func (c *Controller) recompute(name model.ServiceName, pcfg *proxy.Config) change {
	svc, st := c.build(name, pcfg)
	ch := c.updateState(name, st)
	c.stage(name, st)
	if st == nil {
		delete(c.problems, name)
	} else {
		c.reportProblems(svc, name, st)
	}
	return ch
}

// build computes one Service's desired state (nil: gone, or not the proxy's to handle).
func (c *Controller) build(name model.ServiceName, pcfg *proxy.Config) (*corev1.Service, *model.ServiceState) {
	svc, err := c.services.Services(name.Namespace).Get(name.Name)
	if err != nil {
		return nil, nil
	}
	objs, _ := c.slices.ByIndex(sliceByService, name.Namespace+"/"+name.Name)
	slices := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		slices = append(slices, o.(*discoveryv1.EndpointSlice))
	}
	st := proxy.BuildService(svc, slices, pcfg)
	if st == nil {
		return nil, nil
	}
	return svc, st
}

// stage tells the firewall about a Service's new resolved desired state.
func (c *Controller) stage(name model.ServiceName, st *model.ServiceState) {
	if c.fw != nil {
		c.fw.Stage(name, st)
	}
}

func (c *Controller) reportProblems(svc *corev1.Service, name model.ServiceName, st *model.ServiceState) {
	var parts []string
	for _, p := range st.Reasons {
		parts = append(parts, p.String())
	}
	sig := strings.Join(parts, "\n")
	if sig == c.problems[name] {
		return
	}
	c.problems[name] = sig
	for _, p := range st.Reasons {
		c.log.Warn("service problem", "service", name, "reason", p.Reason, "message", p.Message)
		if c.obs.Metrics != nil {
			c.obs.Metrics.InvalidAnnotation(p.Reason)
		}
		if c.recorder != nil {
			c.recorder.Event(svc, corev1.EventTypeWarning, p.Reason, p.Message)
		}
	}
}

// syncChanged recomputes the dirty Services and applies only what changed, plus whatever
// failed before. No kernel reads: a sync with nothing to change writes nothing.
func (c *Controller) syncChanged(dirty map[model.ServiceName]bool, retryVS map[model.VSKey]bool,
	retryIP map[netip.Addr]bool, st *Stats) (int, map[model.VSKey]error, map[netip.Addr]error) {
	pcfg := c.proxyConfig()
	vsChanges := map[model.VSKey]*model.VirtualServer{}
	var bind, unbind []netip.Addr
	for _, name := range sortedNames(dirty) {
		ch := c.recompute(name, pcfg)
		for k, v := range ch.vs {
			vsChanges[k] = v
		}
		bind = append(bind, ch.bind...)
		unbind = append(unbind, ch.unbind...)
		for _, r := range ch.requeue {
			c.markDirtyLater(r)
		}
	}
	// Earlier failures are applied again from the desired state as it is now (looked up
	// per key: a sync must not cost more because the cluster is larger).
	for k := range retryVS {
		if _, ok := vsChanges[k]; !ok {
			vsChanges[k] = c.state.desiredVS(k)
		}
	}
	for a := range retryIP {
		if c.state.bound(a) {
			bind = append(bind, a)
		} else {
			unbind = append(unbind, a)
		}
	}

	ipErrs := map[netip.Addr]error{}
	// Order: set entries and rules, addresses, then virtual servers, then address and set
	// entry removals, so no packet meets a virtual server whose path is not ready yet.
	c.noteFirewall(c.fwOpen(), st, metrics.OpAdd)
	ar := c.addrs.Apply(bind, nil)
	c.noteAddrs(ar, st)
	mergeErrs(ipErrs, ar.Errors)
	res := c.ipvs.Apply(vsChanges)
	st.IPVSWrites += res.Writes
	c.afterIPVS(res)
	vsErrs := res.Errors
	ar = c.addrs.Apply(nil, unbind)
	c.noteAddrs(ar, st)
	mergeErrs(ipErrs, ar.Errors)
	c.noteFirewall(c.fwClose(), st, metrics.OpDelete)
	return len(dirty), vsErrs, ipErrs
}

// syncFull recomputes every Service and repairs the kernel against a fresh dump.
func (c *Controller) syncFull(st *Stats) (int, map[model.VSKey]error, map[netip.Addr]error, error) {
	if err := c.addrs.EnsureLink(); err != nil {
		return 0, nil, nil, fmt.Errorf("dummy interface: %w", err)
	}
	if err := c.refreshNode(); err != nil {
		return 0, nil, nil, err
	}
	pcfg := c.proxyConfig()
	phase := time.Now()
	lap := func(d *time.Duration) {
		now := time.Now()
		*d, phase = now.Sub(phase), now
	}
	svcs, err := c.services.List(labels.Everything())
	if err != nil {
		return 0, nil, nil, err
	}
	seen := map[model.ServiceName]bool{}
	for _, s := range svcs {
		seen[model.ServiceName{Namespace: s.Namespace, Name: s.Name}] = true
	}
	for name := range c.state.services {
		if !seen[name] {
			c.updateState(name, nil)
			c.stage(name, nil)
			delete(c.problems, name)
		}
	}
	for _, name := range sortedNames(seen) {
		for _, r := range c.recompute(name, pcfg).requeue {
			c.markDirtyLater(r)
		}
	}

	lap(&st.Phases.Build)
	if c.fw != nil {
		c.fw.SetNodeIPs(c.nodeIPs)
		r := c.fw.Resync()
		lap(&st.Phases.Firewall)
		c.noteFirewall(r, st, metrics.OpUpdate)
		if r.Err != nil {
			return len(seen), nil, nil, fmt.Errorf("repairing ipsets and iptables rules: %w", r.Err)
		}
	}
	// The addresses and IPVS are repaired at once: they are independent kernel tables (the
	// kernel walks a device's address list on every add, so binding tens of thousands of
	// addresses is slow on its own, and it need not hold the virtual servers up). A virtual
	// server is the proxy's when its address is one the proxy binds or was bound to
	// kube-ipvs0 when the repair began (a Service deleted while the proxy was down leaves
	// both behind), or a node IP with a port in the NodePort range; the IPVS repair waits for
	// that listing before deciding what to delete.
	binds, vses := c.state.allBinds(), c.state.allVSes()
	nodeIP := map[netip.Addr]bool{}
	for _, a := range c.nodeIPs {
		nodeIP[a] = true
	}
	listed := make(chan map[netip.Addr]bool, 1)
	var once sync.Once
	found := func(m map[netip.Addr]bool) { once.Do(func() { listed <- m }) }
	var ar AddrResult
	var addrTook time.Duration
	addrsDone := make(chan struct{})
	go func() {
		defer close(addrsDone)
		start := time.Now()
		ar = c.addrs.Resync(binds, found)
		addrTook = time.Since(start)
		found(nil) // in case the reconciler did not call it
	}()
	var prior map[netip.Addr]bool
	priorKnown := false
	owned := func(k model.VSKey) bool {
		if !priorKnown {
			prior, priorKnown = <-listed, true
		}
		for _, p := range c.cfg.ExcludeCIDRs {
			if p.Contains(k.Addr) {
				return false
			}
		}
		if binds[k.Addr] || prior[k.Addr] {
			return true
		}
		return nodeIP[k.Addr] && k.Port >= c.cfg.NodePortMin && k.Port <= c.cfg.NodePortMax
	}
	ipvsStart := time.Now()
	res := c.ipvs.Resync(vses, owned)
	st.Phases.IPVS = time.Since(ipvsStart)
	<-addrsDone
	st.Phases.Addresses = addrTook
	st.IPVSWrites += res.Writes
	c.afterIPVS(res)
	ipErrs := map[netip.Addr]error{}
	c.noteAddrs(ar, st)
	mergeErrs(ipErrs, ar.Errors)
	switch {
	case res.Err != nil && ar.Err != nil:
		err = fmt.Errorf("repairing IPVS: %w; repairing the dummy interface's addresses: %w", res.Err, ar.Err)
	case res.Err != nil:
		err = fmt.Errorf("repairing IPVS: %w", res.Err)
	case ar.Err != nil:
		err = fmt.Errorf("repairing the dummy interface's addresses: %w", ar.Err)
	}
	return len(seen), res.Errors, ipErrs, err
}

// updateState changes the desired state under stateMu, for concurrent readers.
func (c *Controller) updateState(name model.ServiceName, next *model.ServiceState) change {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.state.update(name, next)
}

// markDirtyLater queues a Service for the next sync (called from the sync goroutine).
func (c *Controller) markDirtyLater(name model.ServiceName) {
	c.mu.Lock()
	c.dirty[name] = true
	c.mu.Unlock()
	c.poke()
}

func mergeErrs[K comparable](dst, src map[K]error) {
	for k, v := range src {
		dst[k] = v
	}
}

func sortedNames(m map[model.ServiceName]bool) []model.ServiceName {
	out := make([]model.ServiceName, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return nameLess(out[i], out[j]) })
	return out
}

// nameLess orders names as their String()s ("namespace/name") order, without building the
// strings: a full sync sorts every Service.
func nameLess(a, b model.ServiceName) bool {
	at := func(n model.ServiceName, i int) (byte, bool) {
		switch {
		case i < len(n.Namespace):
			return n.Namespace[i], true
		case i == len(n.Namespace):
			return '/', true
		case i-len(n.Namespace)-1 < len(n.Name):
			return n.Name[i-len(n.Namespace)-1], true
		}
		return 0, false
	}
	for i := 0; ; i++ {
		x, okA := at(a, i)
		y, okB := at(b, i)
		switch {
		case !okA || !okB:
			return !okA && okB
		case x != y:
			return x < y
		}
	}
}

func joinNames(ns []model.ServiceName) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = n.String()
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
