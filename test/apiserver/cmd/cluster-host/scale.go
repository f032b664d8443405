package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// minSyncPeriod is kube-ipvs' default (deploy/configmap.yaml), which the cluster keeps, and
// kube-proxy's in hack/cluster/kube-proxy.
const minSyncPeriod = time.Second

// scale scales the echo Deployment to 10 and back to 3. Both ways it measures when the
// EndpointSlices say so and when the IPVS table follows; while scaling down, a request loop
// through the ClusterIP must see no failure (the terminating Pods drain for 10 s while
// the proxy stops sending them new connections).
func (c *checker) scale(ctx context.Context) (string, error) {
	vs := c.echoIP + ":9000"
	up, err := c.scaleTo(ctx, 10, vs)
	if err != nil {
		return "", err
	}
	if err := c.waitReplicas(ctx, "default", "echo", 10); err != nil {
		return "", err
	}
	client, err := c.cs.CoreV1().Pods("default").Get(ctx, "client", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	traceCtx, stopTrace := context.WithCancel(ctx)
	trace, traceDone := c.startScaleTrace(traceCtx, vs, client.Status.PodIP)
	defer func() { stopTrace(); traceDone() }()
	wait := c.startLoop(ctx, 200, vs)
	down, downErr := c.scaleTo(ctx, 3, vs)
	loopOut, loopErr := wait()
	if downErr != nil {
		// The request loop's result and the time line say what the node was doing.
		stopTrace()
		traceDone()
		return "", fmt.Errorf("%w; the request loop: %v: %s%s", downErr, loopErr, loopOut, trace)
	}
	stopTrace()
	traceDone()
	a, err := parseSummary(loopOut)
	if loopErr != nil || err != nil || a.failed > 0 {
		return "", fmt.Errorf("the request loop during the scale-down: %v %v: %s%s%s",
			loopErr, err, loopOut, trace, c.scaleDiagnosis(ctx, vs))
	}
	if os.Getenv("CLUSTER_TRACE") != "" {
		logf("%s", trace)
	}
	if err := c.waitReplicas(ctx, "default", "echo", 3); err != nil {
		return "", err
	}
	if err := c.readEchoPods(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("up: %s; down: %s; 200 requests during the scale-down, 0 failed, answered by %d Pods; %s",
		up, down, len(a.byName), stallLine(loopOut)), nil
}

// stallLine is kipvs-echo ask --stalls' report of the times the client did not run.
func stallLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "the client was ") {
			return l
		}
	}
	return "no stall report"
}

// scaleTo scales the echo Deployment to n and waits for the EndpointSlices to list n ready
// endpoints and the IPVS table to hold exactly those at a weight above 0. The table must
// follow the slices within minSyncPeriod plus 2 s (the watch's delay and the polls' period).
func (c *checker) scaleTo(ctx context.Context, n int, vs string) (string, error) {
	t0 := time.Now()
	if _, _, err := c.h.kubectl(ctx, "scale", "deployment/echo", "--replicas="+strconv.Itoa(n)); err != nil {
		return "", err
	}
	var tSlices, tIPVS time.Time
	deadline := time.Now().Add(5 * time.Minute)
	for tSlices.IsZero() || tIPVS.IsZero() {
		if time.Now().After(deadline) {
			return "", fmt.Errorf("after 5 minutes: slices at %v, IPVS at %v", tSlices, tIPVS)
		}
		ready, err := c.readyEndpoints(ctx)
		if err != nil {
			return "", err
		}
		if tSlices.IsZero() && len(ready) == n {
			tSlices = time.Now()
		}
		rep, err := c.h.ipvsOnNode(ctx, c.clientNode)
		if err != nil {
			return "", err
		}
		active := 0
		for _, w := range realServers(rep.Output, vs) {
			if w > 0 {
				active++
			}
		}
		if tIPVS.IsZero() && active == n && len(ready) == n {
			tIPVS = time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
	lag := tIPVS.Sub(tSlices)
	res := fmt.Sprintf("%d ready endpoints %s after kubectl scale, IPVS %s later",
		n, tSlices.Sub(t0).Round(100*time.Millisecond), lag.Round(100*time.Millisecond))
	if lag > minSyncPeriod+2*time.Second {
		return "", fmt.Errorf("%s: more than minSyncPeriod (%s) + 2 s", res, minSyncPeriod)
	}
	return res, nil
}

// readyEndpoints lists the ready endpoints' addresses of the echo Service's EndpointSlices.
func (c *checker) readyEndpoints(ctx context.Context) ([]string, error) {
	slices, err := c.cs.DiscoveryV1().EndpointSlices("default").List(ctx,
		metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=echo"})
	if err != nil {
		return nil, err
	}
	var ready []string
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				ready = append(ready, strings.Join(e.Addresses, ","))
			}
		}
	}
	return ready, nil
}

// scaleDiagnosis is what a failed request loop needs looked at: the virtual server's real
// servers and weights, its connections in the IPVS table, and the end of the proxy's log.
func (c *checker) scaleDiagnosis(ctx context.Context, vs string) string {
	var b strings.Builder
	for _, argv := range [][]string{{"ipvsadm", "-Ln", "-t", vs}, {"ipvsadm", "-Lnc"}} {
		rep, err := c.h.onNode(ctx, c.clientNode, 10*time.Second, argv...)
		fmt.Fprintf(&b, "\n--- %s (%v)\n%s", strings.Join(argv, " "), err, rep.Output)
	}
	p := c.h.proxy
	log, _, err := c.h.kubectl(ctx, "-n", "kube-system", "logs", "ds/"+p, "-c", p, "--tail=40")
	fmt.Fprintf(&b, "\n--- %s log, last 40 lines (%v)\n%s", p, err, log)
	return b.String()
}
