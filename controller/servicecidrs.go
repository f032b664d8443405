package controller

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/discovery"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kube-ipvs/kube-ipvs/metrics"
)

// serviceCIDRGroupVersion and serviceCIDRResource are where discovery lists the ServiceCIDR
// objects the proxy watches for the cluster's Service CIDRs.
var serviceCIDRGroupVersion = networkingv1.SchemeGroupVersion.String()

const serviceCIDRResource = "servicecidrs"

// servesServiceCIDRs asks discovery whether the API server has ServiceCIDR objects
// (Kubernetes 1.33 and later, or earlier with the beta enabled in v1). Without them the
// informer could never sync; --service-cidr is then the only source.
func servesServiceCIDRs(d discovery.DiscoveryInterface) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(serviceCIDRGroupVersion)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, errors.Join(errors.New("asking the API server whether it serves ServiceCIDRs"), err)
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == serviceCIDRResource }), nil
}

// watchServiceCIDRs adds the ServiceCIDR informer when the source has ServiceCIDRs (lw).
func (s *sources) watchServiceCIDRs(lw cache.ListerWatcher, resync time.Duration, c *Controller) error {
	if lw == nil {
		c.log.Info("the source has no ServiceCIDR objects (networking.k8s.io/v1); --service-cidr gives the Service CIDRs")
		return nil
	}
	inf, err := newInformer(lw, &networkingv1.ServiceCIDR{}, resync, cache.Indexers{})
	if err != nil {
		return err
	}
	s.informers = append(s.informers, inf)
	s.serviceCIDRs = networkinglisters.NewServiceCIDRLister(inf.GetIndexer())
	s.cidrsSynced, err = informerHandler{inf: inf, fn: c.onServiceCIDR}.register()
	return err
}

// serviceCIDRSyncWait bounds the start's wait for the ServiceCIDR informer (waitServiceCIDRs);
// a variable for tests.
var serviceCIDRSyncWait = 10 * time.Second

// waitServiceCIDRs gives the ServiceCIDR informer a bounded time to sync, so that the first
// repair has the API's CIDRs. It never holds the proxy up: without list and watch on
// servicecidrs (an older role) the informer never syncs, and --service-cidr applies until
// it does; its first objects then ask for a repair like any change.
func (c *Controller) waitServiceCIDRs(ctx context.Context) {
	if c.src.serviceCIDRs == nil {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, serviceCIDRSyncWait)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), c.src.cidrsSynced...) && ctx.Err() == nil {
		c.log.Warn("ServiceCIDR objects are not listed yet (may the proxy list and watch servicecidrs?); --service-cidr applies until they are",
			"waited", serviceCIDRSyncWait)
	}
}

// cidrsListed reports whether the ServiceCIDR informer is there and synced.
func (s *sources) cidrsListed() bool {
	if s.serviceCIDRs == nil {
		return false
	}
	for _, synced := range s.cidrsSynced {
		if !synced() {
			return false
		}
	}
	return true
}

// onServiceCIDR asks for a repair: the Service CIDRs are part of every family's firewall,
// which only a repair rewrites.
func (c *Controller) onServiceCIDR(any) {
	c.noteQueued(metrics.ChangeOther, time.Now())
	c.mu.Lock()
	c.cidrsChanged = true
	c.mu.Unlock()
	c.poke()
}

// serviceCIDRs is the effective set: every CIDR of every ServiceCIDR object (a terminating
// one still has Services in it), or the configured ones when the API has none. It also says
// which source it came from, for the log.
func (c *Controller) serviceCIDRs() ([]netip.Prefix, string) {
	if c.src.cidrsListed() {
		objs, err := c.src.serviceCIDRs.List(labels.Everything())
		if err == nil {
			if got := cidrsOf(objs); len(got) > 0 {
				return got, "ServiceCIDR objects"
			}
		}
	}
	return normalizePrefixes(c.cfg.ServiceCIDRs), "--service-cidr"
}

// cidrsOf reads the objects' CIDRs; a value the API server should have refused is skipped.
func cidrsOf(objs []*networkingv1.ServiceCIDR) []netip.Prefix {
	var out []netip.Prefix
	for _, o := range objs {
		for _, s := range o.Spec.CIDRs {
			if p, err := netip.ParsePrefix(s); err == nil && p.Bits() > 0 {
				out = append(out, p)
			}
		}
	}
	return normalizePrefixes(out)
}

// normalizePrefixes masks, sorts and drops repeats: the form the dataplanes get and the log
// compares. An IPv4-mapped prefix belongs to neither family's rules and is left out
// (--service-cidr refuses one).
func normalizePrefixes(in []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(in))
	for _, p := range in {
		if p.IsValid() && !p.Addr().Is4In6() {
			out = append(out, p.Masked())
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out)
}

// noteServiceCIDRs logs the effective Service CIDRs when they change.
func (c *Controller) noteServiceCIDRs(cidrs []netip.Prefix, from string) {
	if slices.Equal(cidrs, c.lastCIDRs) && c.lastCIDRsLogged {
		return
	}
	c.lastCIDRs, c.lastCIDRsLogged = cidrs, true
	c.log.Info("Service CIDRs: new connections to an address there that no Service holds are refused", "cidrs", cidrs, "from", from)
}
