package controller

import (
	"context"
	"log/slog"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/watchlist"

	"github.com/kube-ipvs/kube-ipvs/dataplane"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// ListerWatchers are where the controller's informers list and watch each resource: an API
// server's (ClientListerWatchers) or the manifests source's.
type ListerWatchers struct {
	Services, EndpointSlices cache.ListerWatcher
	// Nodes lists and watches Nodes; the controller asks it for its own Node alone, by a
	// metadata.name field selector.
	Nodes cache.ListerWatcher
	// ServiceCIDRs is nil when the source has no ServiceCIDR objects: --service-cidr then
	// gives the Service CIDRs.
	ServiceCIDRs cache.ListerWatcher
}

// ClientListerWatchers lists and watches through a clientset, as client-go's informer
// factory does. ServiceCIDRs are watched only if discovery says the API server serves them.
func ClientListerWatchers(client kubernetes.Interface) (ListerWatchers, error) {
	lws := ListerWatchers{
		Services: clientLW(client, client.CoreV1().Services("").List, client.CoreV1().Services("").Watch),
		EndpointSlices: clientLW(client, client.DiscoveryV1().EndpointSlices("").List,
			client.DiscoveryV1().EndpointSlices("").Watch),
		Nodes: clientLW(client, client.CoreV1().Nodes().List, client.CoreV1().Nodes().Watch),
	}
	serves, err := servesServiceCIDRs(client.Discovery())
	if err != nil {
		return lws, err
	}
	if serves {
		lws.ServiceCIDRs = clientLW(client, client.NetworkingV1().ServiceCIDRs().List, client.NetworkingV1().ServiceCIDRs().Watch)
	}
	return lws, nil
}

// clientLW is a typed client's List and Watch as a ListerWatcher. Like the informer
// factory's, it tells the reflector whether the client can stream its lists (WatchList).
func clientLW[L runtime.Object](client kubernetes.Interface,
	list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return list(ctx, o)
		},
		WatchFuncWithContext: watchFn,
	}, client)
}

// selected is a ListerWatcher whose every List and Watch has a field selector.
type selected struct {
	lw  cache.ListerWatcherWithContext
	raw cache.ListerWatcher
	sel string
}

// WithFieldSelector is lw with sel as the field selector of every List and Watch.
func WithFieldSelector(lw cache.ListerWatcher, sel string) cache.ListerWatcher {
	return &selected{lw: cache.ToListerWatcherWithContext(lw), raw: lw, sel: sel}
}

func (s *selected) opts(o metav1.ListOptions) metav1.ListOptions {
	o.FieldSelector = s.sel
	return o
}

func (s *selected) List(o metav1.ListOptions) (runtime.Object, error) {
	return s.lw.ListWithContext(context.Background(), s.opts(o))
}

func (s *selected) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return s.lw.WatchWithContext(context.Background(), s.opts(o))
}

func (s *selected) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	return s.lw.ListWithContext(ctx, s.opts(o))
}

func (s *selected) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return s.lw.WatchWithContext(ctx, s.opts(o))
}

// IsWatchListSemanticsUnSupported passes on what the wrapped ListerWatcher says.
func (s *selected) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(s.raw)
}

// NewFromListerWatchers is New for informers that read lws instead of a clientset: the
// manifests source's. Without a clientset, Events are only what recorder does with them.
func NewFromListerWatchers(cfg Config, lws ListerWatchers, dp dataplane.Dataplane, hostAddrs func() ([]netip.Addr, error),
	recorder record.EventRecorder, obs Observers, log *slog.Logger) (*Controller, error) {
	c := &Controller{
		cfg: cfg, dp: dp, hostAddrs: hostAddrs, recorder: recorder, log: log, obs: obs,
		wake:  make(chan struct{}, 1),
		dirty: map[model.ServiceName]bool{}, triggers: map[model.ServiceName][]trigger{}, pendingSvc: map[model.ServiceName]bool{},
		sched:   newSchedule(cfg.MinSyncPeriod, cfg.SyncPeriod, cfg.MaxRetryBackoff),
		retryVS: map[model.VSKey]bool{}, retryIP: map[netip.Addr]bool{},
		problems: newProblemReporter(recorder, obs.Metrics, log), unavailable: map[string]bool{},
		healthErr: map[model.ServiceName]string{}, state: newDesiredState(), built: map[model.ServiceName]buildInputs{},
		checks: newBackendChecks(cfg.BackendChecks),
	}
	src, err := newSources(lws, cfg.NodeName, cfg.ConfigSyncPeriod, c)
	if err != nil {
		return nil, err
	}
	c.src = src
	return c, nil
}
