package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"
)

// sliRun is make sli's run (docs/sli.md) in place of the checks: the network programming
// latency SLI of the proxy on the real node(s), measured the way ClusterLoader2 measures it,
// under a load modelled on ClusterLoader2's load test whose Pods live on fake nodes (kwok).
type sliRun struct {
	kwok, stages string // the kwok binary and its stages (hack/sli/kwok-stages.yaml)
	report       string // where sli.json and kwok.log go

	services, replicas, fakeNodes int
	nodePortEvery                 int           // every n-th Service is a NodePort
	createQPS                     float64       // Services (each with its Deployment) created per second
	churn                         time.Duration // how long the measured churn lasts
	churnQPS                      float64       // changes per second during the churn

	result sliResult

	// mu guards want: each Service's Deployment's replicas as the churn last set them.
	mu   sync.Mutex
	want map[int]int
	// probe, during the churn, cross-checks a sample of the scale-ups (sliprobe.go).
	probe *sliProbe
}

// sliResult is sli.json: the run's settings and what it measured.
type sliResult struct {
	Proxy     string  `json:"proxy"`
	Nodes     int     `json:"nodes"`
	FakeNodes int     `json:"fakeNodes"`
	Services  int     `json:"services"`
	Replicas  int     `json:"replicas"`
	ChurnSecs float64 `json:"churnSeconds"`
	// The load's phases.
	CreateSecs     float64 `json:"createSeconds"`     // creating every Service and Deployment
	ReadySecs      float64 `json:"readySeconds"`      // until every EndpointSlice held its Pods
	ProgrammedSecs float64 `json:"programmedSeconds"` // until the proxy had programmed them all
	Changes        int     `json:"changes"`           // the churn's changes made
	// The SLI over the churn: kubeproxy_network_programming_duration_seconds' observations
	// between the scrapes before and after it, and Prometheus' histogram_quantile of them.
	Observations uint64  `json:"observations"`
	P50          float64 `json:"p50"`
	P90          float64 `json:"p90"`
	P99          float64 `json:"p99"`
	MeanSecs     float64 `json:"mean"`
	// The probe: a sample of the scale-ups, timed from their slice's trigger time to their
	// virtual server's new real server as the node's kernel showed it (sliprobe.go).
	Probed      int     `json:"probed"`
	ProbeFailed int     `json:"probeFailed"`
	ProbeP50    float64 `json:"probeP50"`
	ProbeP90    float64 `json:"probeP90"`
	ProbeMax    float64 `json:"probeMax"`
	// What the proxy on the first node cost: its resident set at the churn's end and at
	// most, its container cgroup's memory peak, its CPU seconds over the churn and in all,
	// and how long a new proxy Pod took to be Ready with every Service programmed.
	ProxyRSSMiB        float64 `json:"proxyRSSMiB"`
	ProxyPeakRSSMiB    float64 `json:"proxyPeakRSSMiB"`
	ProxyCgroupPeakMiB float64 `json:"proxyCgroupPeakMiB"`
	ProxyCPUChurnSecs  float64 `json:"proxyCPUChurnSeconds"`
	ProxyCPUSecs       float64 `json:"proxyCPUSeconds"`
	RestartReadySecs   float64 `json:"restartReadySeconds"`
	// The API server's restart mid-churn: how long it was away, and how often the proxy
	// restarted meanwhile (0).
	APIServerDownSecs float64 `json:"apiServerDownSeconds"`
	ProxyRestarts     int32   `json:"proxyRestarts"`
}

// The fake nodes: labelled for the load's nodeSelector, tainted so that nothing else lands
// there, annotated for kwok.
const (
	sliNodeLabel = "kube-ipvs.io/sli-fake-node"
	kwokTaintKey = "kwok.x-k8s.io/node"
	sliNamespace = "sli-%d" // a namespace per 1,000 Services, as CL2 spreads its load
	sliPerNS     = 1000
)

// maxSLINodes is how many nodes the cluster CIDR holds in make sli: kube-controller-manager
// gives each node a /25 of 10.244.0.0/16 there (the real nodes' pod network is unchanged),
// and the fake nodes' Pods take their addresses from kwok's own --cidr.
const maxSLINodes = 512

func (c *checker) sliSteps() []step {
	return []step{
		{"every Node is Ready", true, c.nodeReady},
		c.deployStep(),
		{fmt.Sprintf("kwok runs %d fake nodes, all Ready", c.sli.fakeNodes), true, c.sliFakeNodes},
		{fmt.Sprintf("%d Services, each with %d Pods on the fake nodes, are programmed", c.sli.services, c.sli.replicas), true, c.sliLoad},
		{fmt.Sprintf("the network programming latency over %s of churn", c.sli.churn), true, c.sliChurn},
		{"a new proxy Pod is Ready with every Service programmed", false, c.sliRestart},
	}
}

// sliClient is a client whose rate limits do not shape the load: the load's own pacing does.
func (c *checker) sliClient() (kubernetes.Interface, error) {
	cfg := c.h.AdminConfig()
	cfg.QPS, cfg.Burst = 500, 1000
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	return kubernetes.NewForConfig(cfg)
}

// sliFakeNodes starts kwok on the host, managing the nodes labelled sliNodeLabel, and
// creates them.
func (c *checker) sliFakeNodes(ctx context.Context) (string, error) {
	s := c.sli
	args := []string{"--kubeconfig=" + c.h.adminKC, "--config=" + s.stages,
		"--manage-nodes-with-label-selector=" + sliNodeLabel,
		// Node IPs and Pod IPs no packet ever goes to: TEST-NET-2 and the shared address space.
		"--node-ip=198.51.100.1", "--cidr=100.64.0.0/10",
		"--node-lease-duration-seconds=40"}
	if err := c.h.StartAt("kwok", s.kwok, args...); err != nil {
		return "", err
	}
	cs, err := c.sliClient()
	if err != nil {
		return "", err
	}
	t := time.Now()
	for i := range s.fakeNodes {
		if err := createRetrying(ctx, func() error {
			_, err := cs.CoreV1().Nodes().Create(ctx, fakeNode(i), metav1.CreateOptions{})
			return err
		}); err != nil {
			return "", fmt.Errorf("fake node %d: %w", i, err)
		}
	}
	n := &noter{boot: c.boot}
	var ready int
	err = poll(ctx, 10*time.Minute, 2*time.Second, func() (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sliNodeLabel})
		if err != nil {
			return false, nil
		}
		ready = 0
		for i := range nodes.Items {
			if nodeIsReady(&nodes.Items[i]) {
				ready++
			}
		}
		n.note(fmt.Sprintf("%d of %d fake nodes Ready", ready, s.fakeNodes))
		return ready == s.fakeNodes, nil
	})
	if err != nil {
		return "", fmt.Errorf("%d of %d fake nodes Ready: %w (kwok's log: %s)", ready, s.fakeNodes, err, c.h.Path("kwok.log"))
	}
	return fmt.Sprintf("%d fake nodes created and Ready in %s", s.fakeNodes, time.Since(t).Round(time.Second)), nil
}

func fakeNode(i int) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        fmt.Sprintf("sli-fake-%d", i),
			Labels:      map[string]string{sliNodeLabel: "true", "kubernetes.io/hostname": fmt.Sprintf("sli-fake-%d", i), corev1.LabelTopologyZone: zoneName(i)},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: kwokTaintKey, Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi")},
			Capacity:    corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi")},
		},
	}
}

func zoneName(i int) string { return "zone-" + string(rune('a'+i%3)) }

func nodeIsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// sliName is Service i's name, and its Deployment's.
func sliName(i int) (ns, name string) {
	return fmt.Sprintf(sliNamespace, i/sliPerNS), fmt.Sprintf("svc-%d", i)
}

func (s *sliRun) service(i int) *corev1.Service {
	ns, name := sliName(i)
	typ := corev1.ServiceTypeClusterIP
	if s.nodePortEvery > 0 && i%s.nodePortEvery == s.nodePortEvery-1 {
		typ = corev1.ServiceTypeNodePort
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
}

func (s *sliRun) deployment(i, replicas int) *appsv1.Deployment {
	ns, name := sliName(i)
	labels := map[string]string{"app": name}
	r := int32(replicas)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &r,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{sliNodeLabel: "true"},
					Tolerations:  []corev1.Toleration{{Key: kwokTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					// Never run: kwok only reports it Running and Ready.
					Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10.2",
						Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}},
					TerminationGracePeriodSeconds: new(int64),
				},
			},
		},
	}
}

// sliLoad creates the namespaces, then every Service with its Deployment at createQPS, and
// waits until every EndpointSlice holds its Pods and the proxy has programmed them all.
func (c *checker) sliLoad(ctx context.Context) (string, error) {
	s := c.sli
	cs, err := c.sliClient()
	if err != nil {
		return "", err
	}
	for ns := range (s.services + sliPerNS - 1) / sliPerNS {
		name := fmt.Sprintf(sliNamespace, ns)
		if err := createRetrying(ctx, func() error {
			_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return err
		}); err != nil {
			return "", fmt.Errorf("namespace %s: %w", name, err)
		}
	}
	t0 := time.Now()
	n := &noter{boot: c.boot}
	err = paced(ctx, s.services, s.createQPS, 8, func(i int) error {
		ns, _ := sliName(i)
		if err := createRetrying(ctx, func() error {
			_, err := cs.CoreV1().Services(ns).Create(ctx, s.service(i), metav1.CreateOptions{})
			return err
		}); err != nil {
			return err
		}
		return createRetrying(ctx, func() error {
			_, err := cs.AppsV1().Deployments(ns).Create(ctx, s.deployment(i, s.replicas), metav1.CreateOptions{})
			return err
		})
	}, func(done int) { n.note(fmt.Sprintf("created %d of %d Services and Deployments", done, s.services)) })
	if err != nil {
		return "", err
	}
	s.result.CreateSecs = time.Since(t0).Seconds()

	want := s.services * s.replicas
	var have int
	err = poll(ctx, 30*time.Minute, 5*time.Second, func() (bool, error) {
		have, err = sliReadyEndpoints(ctx, cs, s.services)
		if err != nil {
			return false, nil
		}
		n.note(fmt.Sprintf("%d of %d endpoints ready in the EndpointSlices", have, want))
		return have >= want, nil
	})
	if err != nil {
		return "", fmt.Errorf("%d of %d endpoints ready: %w", have, want, err)
	}
	s.result.ReadySecs = time.Since(t0).Seconds()

	// Programmed: the proxy's programming histogram stops growing while every endpoint is
	// in the slices (its count is the changes it has programmed).
	var last uint64
	stable := 0
	err = poll(ctx, 30*time.Minute, 5*time.Second, func() (bool, error) {
		h, err := c.programming(ctx)
		if err != nil {
			return false, nil
		}
		if h.count == last {
			stable++
		} else {
			stable, last = 0, h.count
		}
		n.note(fmt.Sprintf("the proxy has observed %d programmed changes", h.count))
		return stable >= 3, nil
	})
	if err != nil {
		return "", fmt.Errorf("the proxy did not settle: %w", err)
	}
	s.result.ProgrammedSecs = time.Since(t0).Seconds()
	return fmt.Sprintf("created in %.0f s, every endpoint ready in the slices after %.0f s, the proxy settled after %.0f s (%d programmed changes)",
		s.result.CreateSecs, s.result.ReadySecs, s.result.ProgrammedSecs, last), nil
}

// sliReadyEndpoints counts the ready endpoints in the load's EndpointSlices.
func sliReadyEndpoints(ctx context.Context, cs kubernetes.Interface, services int) (int, error) {
	n := 0
	for ns := range (services + sliPerNS - 1) / sliPerNS {
		opts := metav1.ListOptions{Limit: 500}
		for {
			l, err := cs.DiscoveryV1().EndpointSlices(fmt.Sprintf(sliNamespace, ns)).List(ctx, opts)
			if err != nil {
				return 0, err
			}
			for i := range l.Items {
				n += readyIn(&l.Items[i])
			}
			if l.Continue == "" {
				break
			}
			opts.Continue = l.Continue
		}
	}
	return n, nil
}

func readyIn(s *discoveryv1.EndpointSlice) int {
	n := 0
	for _, e := range s.Endpoints {
		if e.Conditions.Ready == nil || *e.Conditions.Ready {
			n++
		}
	}
	return n
}

// programming scrapes the programming latency histogram of the proxy on every real node,
// summed (ClusterLoader2 sums over every kube-proxy).
func (c *checker) programming(ctx context.Context) (histogram, error) {
	var total histogram
	for i, n := range c.h.nodes {
		b, err := c.cs.CoreV1().RESTClient().Get().
			AbsPath(fmt.Sprintf("/api/v1/nodes/%s:%d/proxy/metrics", n.name, 10249)).DoRaw(ctx)
		if err != nil {
			return histogram{}, fmt.Errorf("%s /metrics: %w", n.name, err)
		}
		h, err := parseHistogramOrEmpty(string(b), programmingMetric)
		if err != nil {
			return histogram{}, fmt.Errorf("%s: %w", n.name, err)
		}
		if i == 0 {
			total = h
			continue
		}
		if total, err = total.plus(h); err != nil {
			return histogram{}, err
		}
	}
	return total, nil
}

// sliChurn scrapes the histogram, makes changes at churnQPS for the churn's length (scale a
// Deployment up or down, roll one, or replace a Service with a new one), scrapes again, and
// reports the SLI over what was programmed in between.
func (c *checker) sliChurn(ctx context.Context) (string, error) {
	s := c.sli
	cs, err := c.sliClient()
	if err != nil {
		return "", err
	}
	before, err := c.programming(ctx)
	if err != nil {
		return "", err
	}
	s.probe = newSLIProbe(c, cs)
	// The proxy's cost is reported beside the SLI; not reading it fails nothing.
	costBefore, costErr := c.proxyCost(ctx, c.h.nodes[0])
	n := &noter{boot: c.boot}
	total := int(math.Round(s.churnQPS * s.churn.Seconds()))
	var failed atomic.Int64
	// The churn in two halves with a restart of the API server between them: the proxy must
	// ride it out (its watches break and resume) without restarting itself.
	half := total / 2
	for part, r := range [][2]int{{0, half}, {half, total}} {
		if part == 1 {
			what, err := c.sliRestartAPIServer(ctx)
			if err != nil {
				return "", err
			}
			logf("sli: %s", what)
		}
		err = paced(ctx, r[1]-r[0], s.churnQPS, 4, func(k int) error {
			if err := s.change(ctx, cs, r[0]+k); err != nil {
				failed.Add(1)
				logf("sli: change %d: %v", r[0]+k, err)
			}
			return nil
		}, func(done int) {
			if done%100 == 0 {
				n.note(fmt.Sprintf("%d of %d changes made", r[0]+done, total))
			}
		})
		if err != nil {
			return "", err
		}
	}
	// What the last changes triggered is programmed within seconds; a minute is ample.
	if err := sleepCtx(ctx, time.Minute); err != nil {
		return "", err
	}
	after, err := c.programming(ctx)
	if err != nil {
		return "", err
	}
	d, err := after.since(before)
	if err != nil {
		return "", err
	}
	costAfter, err := c.proxyCost(ctx, c.h.nodes[0])
	if err = errors.Join(costErr, err); err != nil {
		logf("sli: the proxy's cost not read: %v", err)
		costBefore, costAfter = proxyCost{}, proxyCost{}
	}
	r := &s.result
	r.ProxyRSSMiB, r.ProxyPeakRSSMiB = float64(costAfter.rssKiB)/1024, float64(costAfter.peakRSSKiB)/1024
	r.ProxyCgroupPeakMiB = float64(costAfter.cgroupPeak) / (1 << 20)
	r.ProxyCPUChurnSecs, r.ProxyCPUSecs = costAfter.cpuSecs-costBefore.cpuSecs, costAfter.cpuSecs
	probed, p50, p90, worst, probeFailures := s.probe.summary()
	r.Probed, r.ProbeP50, r.ProbeP90, r.ProbeMax = probed, p50.Seconds(), p90.Seconds(), worst.Seconds()
	r.ProbeFailed = len(probeFailures)
	for i, f := range probeFailures {
		if i == 5 {
			logf("sli: %d more probes failed", len(probeFailures)-5)
			break
		}
		logf("sli: probe: %s", f)
	}
	r.Changes, r.ChurnSecs = total-int(failed.Load()), s.churn.Seconds()
	r.Observations = d.count
	r.P50, r.P90, r.P99 = d.promQuantile(0.5), d.promQuantile(0.9), d.promQuantile(0.99)
	if d.count > 0 {
		r.MeanSecs = d.sum / float64(d.count)
	}
	if failed.Load() > int64(total/20) {
		return "", fmt.Errorf("%d of %d changes failed", failed.Load(), total)
	}
	return fmt.Sprintf("p50 %.2f s, p90 %.2f s, p99 %.2f s, mean %.2f s over %d observations of %d changes; "+
		"the kernel probe of %d scale-ups (%d failed): p50 %.2f s, p90 %.2f s, worst %.2f s; "+
		"the proxy: RSS %.0f MiB (peak %.0f), %.0f CPU-s over the churn, %.0f in all",
		r.P50, r.P90, r.P99, r.MeanSecs, r.Observations, r.Changes,
		r.Probed, r.ProbeFailed, r.ProbeP50, r.ProbeP90, r.ProbeMax,
		r.ProxyRSSMiB, r.ProxyPeakRSSMiB, r.ProxyCPUChurnSecs, r.ProxyCPUSecs), nil
}

// change k of the churn, by k modulo 4 on Service k*7919 mod N (a prime stride, so that
// consecutive changes touch Services far apart): scale its Deployment to one Pod more, or
// back to REPLICAS, roll it (a new template: every Pod replaced), or replace the Service by a new
// one of the same name (a deletion, then a creation whose trigger is the Service's).
func (s *sliRun) change(ctx context.Context, cs kubernetes.Interface, k int) error {
	i := (k * 7919) % s.services
	ns, name := sliName(i)
	deps := cs.AppsV1().Deployments(ns)
	switch k % 4 {
	case 0, 1:
		replicas := s.replicas
		if k%4 == 0 {
			replicas++
		}
		patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
		if _, err := deps.Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
		s.mu.Lock()
		was, ok := s.want[i]
		if s.want == nil {
			s.want = map[int]int{}
		}
		s.want[i] = replicas
		s.mu.Unlock()
		// Every fourth scale-up that changes something is probed.
		if s.probe != nil && k%16 == 0 && (!ok || was == s.replicas) {
			s.probe.watch(ctx, ns, name, replicas)
		}
		return nil
	case 2:
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kube-ipvs.io/sli-roll":%q}}}}}`, strconv.Itoa(k))
		_, err := deps.Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	default:
		svcs := cs.CoreV1().Services(ns)
		if err := svcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		return createRetrying(ctx, func() error {
			_, err := svcs.Create(ctx, s.service(i), metav1.CreateOptions{})
			return err
		})
	}
}

// writeReport writes sli.json into the report folder and returns the run's last line.
func (s *sliRun) writeReport(proxy string, nodes int) (string, error) {
	r := &s.result
	r.Proxy, r.Nodes, r.FakeNodes, r.Services, r.Replicas = proxy, nodes, s.fakeNodes, s.services, s.replicas
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(s.report, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(s.report, "sli.json"), append(b, '\n'), 0o644); err != nil {
		return "", err
	}
	return fmt.Sprintf("sli: %s %d Services, %d nodes: p50 %.2f s, p90 %.2f s, p99 %.2f s over %d changes",
		proxy, s.services, nodes+s.fakeNodes, r.P50, r.P90, r.P99, r.Changes), nil
}

// paced calls fn(0..n-1) from workers goroutines, starting at most qps calls a second, and
// progress after each; the first error stops it.
func paced(ctx context.Context, n int, qps float64, workers int, fn func(i int) error, progress func(done int)) error {
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, workers)
	var done atomic.Int64
	for range workers {
		go func() {
			for i := range next {
				if err := fn(i); err != nil {
					errs <- fmt.Errorf("%d: %w", i, err)
					cancel()
					return
				}
				progress(int(done.Add(1)))
			}
			errs <- nil
		}()
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / qps))
	defer tick.Stop()
	var err error
feed:
	for i := range n {
		select {
		case <-ctx.Done():
			break feed
		case <-tick.C:
		}
		select {
		case <-ctx.Done():
			break feed
		case next <- i:
		}
	}
	close(next)
	for range workers {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err == nil {
		err = ctx.Err()
		if errors.Is(err, context.Canceled) && done.Load() == int64(n) {
			err = nil
		}
	}
	return err
}

// createRetrying retries what the API server may refuse for a moment under the load
// (throttling, a timeout); it gives up on anything else.
func createRetrying(ctx context.Context, fn func() error) error {
	var err error
	for attempt := range 10 {
		if err = fn(); err == nil || !retriable(err) {
			return err
		}
		if e := sleepCtx(ctx, time.Duration(attempt+1)*500*time.Millisecond); e != nil {
			return e
		}
	}
	return err
}

func retriable(err error) bool {
	s := err.Error()
	for _, m := range []string{"Too many requests", "timeout", "Timeout", "connection refused", "EOF", "try again later"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// poll calls cond every interval until it says done, it fails, or timeout passes.
func poll(ctx context.Context, timeout, interval time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		if err := sleepCtx(ctx, interval); err != nil {
			return err
		}
	}
}

// parseSLI reads make sli's flags (hack/sli/run.sh passes them) and checks them; with
// paths false (--checks sli-validate, before anything is built) the files are not asked for.
func parseSLI(realNodes int, paths bool) (*sliRun, error) {
	s := &sliRun{kwok: flag("kwok"), stages: flag("kwok-stages"), report: flag("report"),
		services: 10000, replicas: 5, fakeNodes: 500, nodePortEvery: 5,
		createQPS: 20, churn: 10 * time.Minute, churnQPS: 5}
	if paths && (s.kwok == "" || s.stages == "" || s.report == "") {
		return nil, errors.New("--checks sli needs --kwok, --kwok-stages and --report")
	}
	ints := []struct {
		name string
		v    *int
	}{{"services", &s.services}, {"replicas", &s.replicas}, {"fake-nodes", &s.fakeNodes}}
	for _, f := range ints {
		if v := flag(f.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("--%s %q: want a number above 0", f.name, v)
			}
			*f.v = n
		}
	}
	if v := flag("churn"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("--churn %q: want a Go duration such as 10m", v)
		}
		s.churn = d
	}
	if realNodes+s.fakeNodes > maxSLINodes {
		return nil, fmt.Errorf("%d real and %d fake nodes: the cluster CIDR of make sli holds %d nodes", realNodes, s.fakeNodes, maxSLINodes)
	}
	if pods := s.services * (s.replicas + 1); pods > s.fakeNodes*110 {
		return nil, fmt.Errorf("%d Services of %d Pods (one more while one scales up) need %d fake nodes of 110 Pods, not %d",
			s.services, s.replicas, (pods+109)/110, s.fakeNodes)
	}
	if abs, err := filepath.Abs(s.report); err == nil {
		s.report = abs
	}
	return s, nil
}

// nodeCIDRMask is each node's podCIDR size: /25 in make sli, where 512 nodes must fit in
// 10.244.0.0/16, /24 otherwise.
func (h *host) nodeCIDRMask() string {
	if h.sli != nil {
		return "25"
	}
	return "24"
}

// sliControllerArgs raise kube-controller-manager's client rate and workers in make sli, so
// that its queues add little to the latency measured (docs/sli.md says how much they add).
func (h *host) sliControllerArgs() []string {
	if h.sli == nil {
		return nil
	}
	return []string{"--kube-api-qps=300", "--kube-api-burst=600", "--concurrent-service-endpoint-syncs=20",
		"--concurrent-deployment-syncs=20", "--concurrent-replicaset-syncs=20"}
}

// sliSchedulerArgs raise kube-scheduler's client rate in make sli.
func (h *host) sliSchedulerArgs() []string {
	if h.sli == nil {
		return nil
	}
	return []string{"--kube-api-qps=300", "--kube-api-burst=600"}
}

// sliRestartAPIServer stops the API server and starts it again mid-churn, and says what the
// proxy did meanwhile: its Pods' restarts before and after (none is what it should do).
func (c *checker) sliRestartAPIServer(ctx context.Context) (string, error) {
	before, err := c.proxyRestarts(ctx)
	if err != nil {
		return "", err
	}
	t := time.Now()
	if err := c.h.StopAPIServer(); err != nil {
		return "", err
	}
	if err := c.h.StartAPIServer(ctx); err != nil {
		return "", fmt.Errorf("the API server did not come back: %w", err)
	}
	down := time.Since(t)
	// Time for the proxy's watches to resume, and for a crash to show.
	if err := sleepCtx(ctx, 20*time.Second); err != nil {
		return "", err
	}
	after, err := c.proxyRestarts(ctx)
	if err != nil {
		return "", err
	}
	c.sli.result.APIServerDownSecs = down.Seconds()
	c.sli.result.ProxyRestarts = after - before
	if after != before {
		return "", fmt.Errorf("the proxy restarted %d times while the API server restarted", after-before)
	}
	return fmt.Sprintf("the API server restarted mid-churn (%s from stop to ready); the proxy kept running (no restart)",
		down.Round(100*time.Millisecond)), nil
}

// proxyRestarts sums the restart counts of the proxy's containers on every node.
func (c *checker) proxyRestarts(ctx context.Context) (int32, error) {
	sel := proxySelector
	if c.h.proxy == "kube-proxy" {
		sel = kubeProxySelector
	}
	var n int32
	err := poll(ctx, time.Minute, 2*time.Second, func() (bool, error) {
		pods, err := c.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, nil
		}
		n = 0
		for _, p := range pods.Items {
			for _, st := range p.Status.ContainerStatuses {
				n += st.RestartCount
			}
		}
		return true, nil
	})
	return n, err
}
