package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/kube-ipvs/kube-ipvs/config"
	"github.com/kube-ipvs/kube-ipvs/preflight"
)

// Proxy modes of --mode.
const (
	modeAuto     = config.ModeAuto
	modeIPVS     = config.ModeIPVS
	modeIPTables = config.ModeIPTables
)

// chooseMode decides the proxy mode. auto and ipvs run the preflight (which loads missing
// modules); auto falls back to iptables when IPVS cannot work and says so loudly; ipvs
// refuses to run without it, printing the preflight table.
func chooseMode(ctx context.Context, o runOptions, stderr io.Writer, log *slog.Logger) (string, []preflight.Row, error) {
	if o.Mode == modeIPTables {
		log.Warn("running the iptables proxier because --mode=iptables: IPVS schedulers, graceful termination and constant-size rules are off")
		return modeIPTables, nil, nil
	}
	usable, rep := preflight.Check(ctx, preflight.Options{DefaultScheduler: o.Scheduler, StrictARP: o.StrictARP, RateEstimation: o.rateEstimation})
	if usable {
		return modeIPVS, nil, nil
	}
	if o.Mode == modeIPVS {
		_ = rep.WriteTable(stderr)
		return "", nil, fmt.Errorf("--mode=ipvs, but IPVS cannot run on this node (the preflight table above says why)")
	}
	blocking := rep.Blocking()
	var failed []string
	for _, r := range blocking {
		failed = append(failed, fmt.Sprintf("%s: %s (fix: %s)", r.Name, r.Detail, r.Fix))
	}
	log.Warn("IPVS CANNOT RUN ON THIS NODE: FALLING BACK TO THE IPTABLES PROXIER",
		"failed_checks", strings.Join(failed, "; "),
		"consequence", "random balancing instead of IPVS schedulers, no graceful termination, rules that grow with the Services")
	return modeIPTables, blocking, nil
}

// nodeFallbackEvent raises the fallback as a Warning Event on this node's Node object.
func nodeFallbackEvent(recorder record.EventRecorder, node string, blocking []preflight.Row) {
	var names []string
	for _, r := range blocking {
		names = append(names, r.Name)
	}
	ref := &corev1.ObjectReference{Kind: "Node", Name: node, UID: "", APIVersion: "v1"}
	recorder.Eventf(ref, corev1.EventTypeWarning, "IPVSUnavailable",
		"kube-ipvs fell back to the iptables proxier: IPVS checks failed: %s (run `kube-ipvs preflight` on the node for the fixes)",
		strings.Join(names, ", "))
}
