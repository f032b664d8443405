package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kube-ipvs/kube-ipvs/controller"
)

// podCIDRsOf reads a Node's pod CIDRs as kube-proxy's NodeCIDR mode does: the first of each
// family in spec.podCIDRs (spec.podCIDR when the list is empty), masked. Entries that do
// not parse are skipped; nil when the node has none yet.
func podCIDRsOf(node *corev1.Node) []netip.Prefix {
	list := node.Spec.PodCIDRs
	if len(list) == 0 && node.Spec.PodCIDR != "" {
		list = []string{node.Spec.PodCIDR}
	}
	var out []netip.Prefix
	var have4, have6 bool
	for _, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			continue
		}
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked()
		if p.Addr().Is4() && !have4 || p.Addr().Is6() && !have6 {
			out = append(out, p)
			have4, have6 = have4 || p.Addr().Is4(), have6 || p.Addr().Is6()
		}
	}
	return out
}

// watchPodCIDRs is --detect-local-mode=NodeCIDR: it waits until this node's Node object has
// pod CIDRs and returns them, the local CIDRs of the firewall rules; as kube-proxy does, it
// then stops the proxy through fatal when they change, for its restart to read the new
// ones (the rules are rendered from the configuration once).
func watchPodCIDRs(ctx context.Context, nodes cache.ListerWatcher, nodeName string, fatal context.CancelCauseFunc, log *slog.Logger) ([]netip.Prefix, error) {
	inf := cache.NewSharedIndexInformer(controller.WithFieldSelector(nodes, "metadata.name="+nodeName), &corev1.Node{}, 0, cache.Indexers{})
	current := make(chan []netip.Prefix, 1)
	var first []netip.Prefix
	seen := func(obj any) {
		node, ok := obj.(*corev1.Node)
		if !ok || node.Name != nodeName {
			return
		}
		cidrs := podCIDRsOf(node)
		if len(cidrs) == 0 {
			return
		}
		if first == nil {
			first = cidrs
			current <- cidrs
			return
		}
		if !slices.Equal(first, cidrs) {
			fatal(fmt.Errorf("--detect-local-mode=NodeCIDR: Node %s's pod CIDRs changed from %v to %v; exiting so that the restart uses them, as kube-proxy does", nodeName, first, cidrs))
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
	}); err != nil {
		return nil, err
	}
	go inf.RunWithContext(ctx)
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case cidrs := <-current:
			log.Info("local traffic: the Node's pod CIDRs", "node", nodeName, "cidrs", cidrs)
			return cidrs, nil
		case <-tick.C:
			log.Warn("--detect-local-mode=NodeCIDR: waiting for the Node's spec.podCIDRs", "node", nodeName)
		case <-ctx.Done():
			return nil, fmt.Errorf("--detect-local-mode=NodeCIDR: Node %s has no spec.podCIDRs yet: %w", nodeName, context.Cause(ctx))
		}
	}
}
