package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kube-ipvs/kube-ipvs/controller"
	"github.com/kube-ipvs/kube-ipvs/manifests"
)

// source is where the controller's informers read: an API server, or the objects of
// --manifests.
type source struct {
	// client is the API server's clientset; nil with --manifests, which has no API to
	// write Events to (they are logged).
	client kubernetes.Interface
	lws    controller.ListerWatchers
	// reload re-reads --manifests and applies what changed in them; nil for an API server.
	reload func()
}

// newSource returns the source the flags name: the API server of --kubeconfig, or the
// manifests source filled from --manifests.
func newSource(ctx context.Context, o runOptions, log *slog.Logger) (source, error) {
	if o.Manifests == "" {
		rc, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		if err != nil {
			return source{}, fmt.Errorf("kubeconfig: %w", err)
		}
		rc.UserAgent = "kube-ipvs/" + version
		// kube-proxy's clientConnection; zero values keep client-go's defaults.
		rc.QPS, rc.Burst = o.KubeAPIQPS, o.KubeAPIBurst
		rc.ContentType, rc.AcceptContentTypes = o.KubeAPIContentType, o.KubeAPIAcceptContentTypes
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return source{}, err
		}
		lws, err := controller.ClientListerWatchers(cs)
		return source{client: cs, lws: lws}, err
	}
	ms := manifests.NewSource()
	load := func() {
		objs, err := manifests.Load(o.Manifests)
		if err != nil {
			// Bad documents are named; everything that parsed still applies.
			log.Error("manifests have errors; the valid objects are applied", "path", o.Manifests, "err", err)
		}
		if objs == nil {
			return
		}
		ch, err := ms.Sync(objs)
		if err != nil {
			log.Error("applying manifests", "path", o.Manifests, "err", err)
		}
		log.Info("manifests loaded", "path", o.Manifests, "objects", len(objs),
			"added", len(ch.Added), "updated", len(ch.Updated), "deleted", len(ch.Deleted))
	}
	load()
	return source{lws: manifestListerWatchers(ms), reload: load}, nil
}

// manifestListerWatchers serves every resource from the manifests, ServiceCIDRs included:
// a file may hold ServiceCIDR objects, and without any --service-cidr applies.
func manifestListerWatchers(ms *manifests.Source) controller.ListerWatchers {
	return controller.ListerWatchers{
		Services:       ms.ListerWatcher("Service"),
		EndpointSlices: ms.ListerWatcher("EndpointSlice"),
		Nodes:          ms.ListerWatcher("Node"),
		ServiceCIDRs:   ms.ListerWatcher("ServiceCIDR"),
	}
}

func reloadOnHUP(ctx context.Context, reload func(), log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			log.Info("SIGHUP: re-reading manifests")
			reload()
		}
	}
}
