package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/kube-ipvs/kube-ipvs/cleanup"
	"github.com/kube-ipvs/kube-ipvs/ipset"
	"github.com/kube-ipvs/kube-ipvs/iptables"
	"github.com/kube-ipvs/kube-ipvs/metrics"
)

// The waits between failed attempts of --cleanup-kube-proxy: short at first (a rule
// someone else was restoring at that moment), at most a couple of minutes (a set a foreign
// rule holds waits for an operator).
const (
	handoverFirstRetry = 2 * time.Second
	handoverMaxRetry   = 2 * time.Minute
)

// startKubeProxyCleanup starts --cleanup-kube-proxy in the background and returns the
// controller's FirstRepair observer, which lets it begin. In both modes kube-ipvs' rules
// are its own KIPVS-* chains and sets and the cleanup selects kube-proxy's KUBE-* ones by
// name, whichever of kube-proxy's modes wrote them: after the first repair the proxy's own
// rules carry every Service (and keep conntrack in use), so kube-proxy's stale ones go in
// either mode. Readiness never waits for it.
func startKubeProxyCleanup(ctx context.Context, node string, recorder record.EventRecorder, m *metrics.Metrics, log *slog.Logger) func() {
	log = log.With("task", "cleanup-kube-proxy")
	ready := make(chan struct{})
	m.KubeProxyCleanupPending()
	h := cleanup.Handover{
		First: handoverFirstRetry, Max: handoverMaxRetry,
		Attempt: func() ([]cleanup.Object, error) { return removeKubeProxy(log) },
		Report:  func(a cleanup.Attempt) { reportHandover(a, node, recorder, m, log) },
	}
	log.Info("kube-proxy's leftovers will be removed after the first full sync")
	go func() {
		if err := h.Run(ctx, ready); err != nil && ctx.Err() == nil {
			log.Error("removing kube-proxy's leftovers stopped", "err", err)
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(ready) }) }
}

// removeKubeProxy is one attempt: it opens the node's ipsets and iptables tools afresh (no
// IPVS or links: nothing of those is kube-proxy's to remove) and removes kube-proxy's
// chains, jumps and sets.
func removeKubeProxy(log *slog.Logger) ([]cleanup.Object, error) {
	sets, err := ipset.NewKernel()
	if err != nil {
		return nil, fmt.Errorf("opening ipset: %w", err)
	}
	defer sets.Close()
	k := cleanup.Kernel{Sets: sets, Tables: iptables.NewTools(iptables.OSExec{}, iptables.Config{})}
	objs, notes, err := cleanup.RemoveKubeProxy(k)
	for _, n := range notes {
		log.Debug("cleanup note", "note", n)
	}
	return objs, err
}

// reportHandover logs an attempt (every removed object, then the counts, loudly), counts
// it in the metrics, and raises an Event on the Node: Normal when done, Warning on a
// failure, where `kubectl describe node` shows it.
func reportHandover(a cleanup.Attempt, node string, recorder record.EventRecorder, m *metrics.Metrics, log *slog.Logger) {
	removed := a.Removed()
	for _, o := range a.Objects {
		if o.Error == "" {
			log.Info("removed kube-proxy's object", "object", o.String())
		}
	}
	m.KubeProxyCleanupAttempt(removed, a.Err == nil)
	counts := countsText(removed)
	ref := &corev1.ObjectReference{Kind: "Node", Name: node, APIVersion: "v1"}
	if a.Err != nil {
		log.Error("removing kube-proxy's leftovers failed; will retry", "attempt", a.N, "removed", counts, "retry_in", a.Retry, "err", a.Err)
		if recorder != nil {
			recorder.Eventf(ref, corev1.EventTypeWarning, "KubeProxyCleanupFailed",
				"removing kube-proxy's leftovers failed (attempt %d, retrying in %s; removed so far: %s): %v", a.N, a.Retry, counts, a.Err)
		}
		return
	}
	if len(a.Objects) == 0 {
		// A restart after the migration: nothing to say beyond the log.
		log.Info("no kube-proxy leftovers found after the first full sync", "attempt", a.N)
		return
	}
	log.Warn("kube-proxy's leftovers removed after the first full sync", "attempt", a.N, "removed", counts,
		"chains", removed[cleanup.KindChain], "rules", removed[cleanup.KindRule], "ipsets", removed[cleanup.KindSet])
	if recorder != nil {
		recorder.Eventf(ref, corev1.EventTypeNormal, "KubeProxyCleanedUp",
			"removed kube-proxy's leftovers after the first full sync: %s", counts)
	}
}

// countsText is "3 chain, 2 rule, 1 ipset" (kinds sorted), or "nothing".
func countsText(n map[string]int) string {
	var parts []string
	for _, kind := range slices.Sorted(maps.Keys(n)) {
		parts = append(parts, fmt.Sprintf("%d %s", n[kind], kind))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}
