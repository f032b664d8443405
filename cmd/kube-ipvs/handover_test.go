package main

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/record"

	"github.com/kube-ipvs/kube-ipvs/cleanup"
	"github.com/kube-ipvs/kube-ipvs/metrics"
)

// A failed attempt is a Warning Event on the Node and an error in the log, both naming
// what failed and when it is retried; the attempt that finishes is a Normal Event and a
// loud log line with the counts, after one line per removed object.
func TestReportHandoverTellsTheOperator(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	m := metrics.New(metrics.WithoutRuntimeMetrics())
	chain := cleanup.Object{Kind: cleanup.KindChain, Name: "KUBE-SERVICES", Family: "ipv4", Backend: "nft", Table: "nat", Owner: cleanup.OwnerKubeProxy}
	set := cleanup.Object{Kind: cleanup.KindSet, Name: "KUBE-CLUSTER-IP", Owner: cleanup.OwnerKubeProxy, Error: "set in use"}
	reportHandover(cleanup.Attempt{N: 1, Objects: []cleanup.Object{chain, set}, Err: errors.New("1 of kube-proxy's objects could not be removed: ipset KUBE-CLUSTER-IP (kube-proxy): set in use"), Retry: 2 * time.Second},
		"node-a", rec, m, log)
	if e := <-rec.Events; !strings.HasPrefix(e, "Warning KubeProxyCleanupFailed") || !strings.Contains(e, "ipset KUBE-CLUSTER-IP (kube-proxy): set in use") ||
		!strings.Contains(e, "retrying in 2s") || !strings.Contains(e, "removed so far: 1 chain") {
		t.Errorf("failure Event %q", e)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "set in use") || !strings.Contains(l, `object="chain iptables-nft nat KUBE-SERVICES (kube-proxy)"`) {
		t.Errorf("failure log:\n%s", l)
	}
	logs.Reset()
	set.Error = ""
	reportHandover(cleanup.Attempt{N: 2, Objects: []cleanup.Object{set}}, "node-a", rec, m, log)
	if e := <-rec.Events; e != "Normal KubeProxyCleanedUp removed kube-proxy's leftovers after the first full sync: 1 ipset" {
		t.Errorf("success Event %q", e)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "ipsets=1") || !strings.Contains(l, `removed="1 ipset"`) {
		t.Errorf("success log:\n%s", l)
	}
	logs.Reset()
	reportHandover(cleanup.Attempt{N: 1}, "node-a", rec, m, log)
	if l := logs.String(); !strings.Contains(l, "level=INFO") || !strings.Contains(l, "no kube-proxy leftovers found") || len(rec.Events) != 0 {
		t.Errorf("nothing to remove: %d Events, log:\n%s", len(rec.Events), l)
	}
	if got := countsText(map[string]int{"rule": 2, "chain": 3}); got != "3 chain, 2 rule" {
		t.Errorf("countsText = %q", got)
	}
}
