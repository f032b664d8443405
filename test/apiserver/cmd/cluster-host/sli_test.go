package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The load's objects: every fifth Service a NodePort, the Pods only on the fake nodes.
func TestSLILoadObjects(t *testing.T) {
	s := &sliRun{services: 10, replicas: 5, nodePortEvery: 5}
	nodePorts := 0
	for i := range s.services {
		if s.service(i).Spec.Type == corev1.ServiceTypeNodePort {
			nodePorts++
		}
	}
	if nodePorts != 2 {
		t.Errorf("%d NodePorts of 10 Services, want 2", nodePorts)
	}
	d := s.deployment(3, 5)
	if *d.Spec.Replicas != 5 || d.Spec.Template.Spec.NodeSelector[sliNodeLabel] != "true" ||
		len(d.Spec.Template.Spec.Tolerations) != 1 || d.Spec.Template.Spec.Tolerations[0].Key != kwokTaintKey {
		t.Errorf("deployment %+v", d.Spec)
	}
	if svc := s.service(3); svc.Spec.Selector["app"] != d.Spec.Template.Labels["app"] || svc.Namespace != d.Namespace {
		t.Errorf("Service %s/%s does not select Deployment %s/%s's Pods", svc.Namespace, svc.Name, d.Namespace, d.Name)
	}
	if ns, _ := sliName(2500); ns != "sli-2" {
		t.Errorf("Service 2500 in %s, want sli-2", ns)
	}
}

// The churn's four kinds of change, each on the objects it names.
func TestSLIChurnChanges(t *testing.T) {
	s := &sliRun{services: 4, replicas: 5, nodePortEvery: 5}
	var objs []runtime.Object
	for i := range s.services {
		objs = append(objs, s.service(i), s.deployment(i, s.replicas))
	}
	cs := fake.NewClientset(objs...)
	var mu sync.Mutex
	var seen []string
	cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
		return false, nil, nil
	})
	ctx := context.Background()
	for k := range 4 {
		if err := s.change(ctx, cs, k); err != nil {
			t.Fatalf("change %d: %v", k, err)
		}
	}
	want := []string{
		"patch deployments/",                   // up
		"patch deployments/",                   // down
		"patch deployments/",                   // roll
		"delete services/", "create services/", // replace
	}
	if len(seen) != len(want) {
		t.Fatalf("calls %q, want %q", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Errorf("call %d: %q, want %q", i, seen[i], want[i])
		}
	}
	// Change 2 rolled Service (2*7919)%4's Deployment.
	ns, name := sliName((2 * 7919) % 4)
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || d.Spec.Template.Annotations["kube-ipvs.io/sli-roll"] != "2" {
		t.Errorf("the rolled Deployment: %v %v", d.Spec.Template.Annotations, err)
	}
	// Change 0 scaled Service 0's Deployment up by one, change 1 Service 7919%4's back.
	ns, name = sliName(0)
	if d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{}); err != nil || *d.Spec.Replicas != 6 {
		t.Errorf("Service 0's Deployment after scaling up: %v", err)
	}
}

// paced keeps to its rate, and the first error stops it.
func TestPaced(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	start := time.Now()
	err := paced(context.Background(), 10, 100, 3, func(int) error {
		mu.Lock()
		calls++
		mu.Unlock()
		return nil
	}, func(int) {})
	if err != nil || calls != 10 {
		t.Fatalf("paced: %d calls, %v", calls, err)
	}
	if d := time.Since(start); d < 90*time.Millisecond {
		t.Errorf("10 calls at 100 a second took %s", d)
	}
	boom := errors.New("boom")
	calls = 0
	err = paced(context.Background(), 1000, 1000, 2, func(i int) error {
		mu.Lock()
		calls++
		mu.Unlock()
		if i == 5 {
			return boom
		}
		return nil
	}, func(int) {})
	if !errors.Is(err, boom) || calls >= 1000 {
		t.Errorf("after an error: %d calls, %v", calls, err)
	}
}

// The probe reads the latest trigger time of the Service's slices once they hold the new
// number of ready endpoints, and sums its samples up.
func TestSLIProbeTriggerAndSummary(t *testing.T) {
	ready := true
	slice := func(name, trigger string, n int) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "sli-0", Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: "svc-1"}, Annotations: map[string]string{triggerAnnotation: trigger}}}
		for range n {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
		}
		return s
	}
	cs := fake.NewClientset(slice("a", "2026-12-07T10:00:01Z", 4), slice("b", "2026-12-07T10:00:03Z", 2))
	p := &sliProbe{cs: cs}
	got, err := p.trigger(context.Background(), "sli-0", "svc-1", 6)
	if err != nil || !got.Equal(time.Date(2026, 12, 7, 10, 0, 3, 0, time.UTC)) {
		t.Errorf("trigger %v, %v; want the later slice's 10:00:03", got, err)
	}
	for _, ms := range []int{900, 100, 500, 300, 700, 200, 800, 400, 600, 1000} {
		p.latencies = append(p.latencies, time.Duration(ms)*time.Millisecond)
	}
	p.failures = []string{"x"}
	n, p50, p90, worst, failures := p.summary()
	if n != 10 || p50 != 500*time.Millisecond || p90 != 900*time.Millisecond || worst != time.Second || len(failures) != 1 {
		t.Errorf("summary: %d, p50 %s, p90 %s, worst %s, %d failures", n, p50, p90, worst, len(failures))
	}
}

func TestParseProxyCost(t *testing.T) {
	pc, err := parseProxyCost("rss 102400\nhwm 153600\nusage_usec 12500000\npeak 209715200\n")
	if err != nil || pc.rssKiB != 102400 || pc.peakRSSKiB != 153600 || pc.cpuSecs != 12.5 || pc.cgroupPeak != 209715200 {
		t.Errorf("%+v, %v", pc, err)
	}
	if _, err := parseProxyCost("rss 1\nhwm 2\n"); err == nil {
		t.Error("a partial answer was accepted")
	}
}
