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

	"github.com/kube-ipvs/kube-ipvs/manifests"
)

// newSource returns the clientset the informers read: a real API server's, or a fake one
// filled from --manifests (with a function that re-reads them).
func newSource(ctx context.Context, o runOptions, log *slog.Logger) (kubernetes.Interface, func(), error) {
	if o.Manifests == "" {
		rc, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		if err != nil {
			return nil, nil, fmt.Errorf("kubeconfig: %w", err)
		}
		rc.UserAgent = "kube-ipvs/" + version
		// kube-proxy's clientConnection; zero values keep client-go's defaults.
		rc.QPS, rc.Burst = o.KubeAPIQPS, o.KubeAPIBurst
		rc.ContentType, rc.AcceptContentTypes = o.KubeAPIContentType, o.KubeAPIAcceptContentTypes
		cs, err := kubernetes.NewForConfig(rc)
		return cs, nil, err
	}
	cs := manifests.NewClientset()
	var current manifests.Objects
	load := func() {
		objs, err := manifests.Load(o.Manifests)
		if err != nil {
			// Bad documents are named; everything that parsed still applies.
			log.Error("manifests have errors; the valid objects are applied", "path", o.Manifests, "err", err)
		}
		if objs == nil {
			return
		}
		if err := manifests.Sync(ctx, cs, current, objs); err != nil {
			log.Error("applying manifests", "path", o.Manifests, "err", err)
		}
		current = objs
		log.Info("manifests loaded", "path", o.Manifests, "objects", len(objs))
	}
	load()
	return cs, load, nil
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
