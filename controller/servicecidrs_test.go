package controller

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func serviceCIDR(name string, cidrs ...string) *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
}

// servingServiceCIDRs is a fake clientset whose discovery lists ServiceCIDRs, as an API
// server of Kubernetes 1.33 or later does.
func servingServiceCIDRs(objs ...*networkingv1.ServiceCIDR) *fake.Clientset {
	cs := fake.NewClientset()
	cs.Resources = append(cs.Resources, &metav1.APIResourceList{GroupVersion: serviceCIDRGroupVersion,
		APIResources: []metav1.APIResource{{Name: serviceCIDRResource, Kind: "ServiceCIDR"}}})
	for _, o := range objs {
		if _, err := cs.NetworkingV1().ServiceCIDRs().Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			panic(err)
		}
	}
	return cs
}

func cidrConfig(flags ...string) Config {
	return Config{NodeName: "node-a", DefaultScheduler: "rr", SyncPeriod: time.Hour, ServiceCIDRs: prefixes(flags...)}
}

func (h *harness) repairedCIDRs() []netip.Prefix {
	if p := h.dp.cidrs.Load(); p != nil {
		return *p
	}
	return nil
}

// The repair gets every CIDR of every ServiceCIDR object, masked, sorted, once each, and
// the flags only when the API has none.
func TestServiceCIDRsFromTheAPIOrTheFlags(t *testing.T) {
	cases := []struct {
		name   string
		client *fake.Clientset
		flags  []string
		want   []netip.Prefix
	}{
		{"objects win over flags", servingServiceCIDRs(serviceCIDR("kubernetes", "10.96.0.0/12", "fd00:96::/108"),
			serviceCIDR("extra", "10.200.0.7/24", "10.96.0.0/12")), []string{"10.50.0.0/16"},
			prefixes("10.96.0.0/12", "10.200.0.0/24", "fd00:96::/108")},
		{"no objects: the flags", servingServiceCIDRs(), []string{"fd00:96::/108", "10.96.0.0/12"},
			prefixes("10.96.0.0/12", "fd00:96::/108")},
		{"not served: the flags", fake.NewClientset(), []string{"10.96.0.0/12"}, prefixes("10.96.0.0/12")},
		{"nothing", fake.NewClientset(), nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := startHarnessWith(t, tc.client, Observers{}, cidrConfig(tc.flags...))
			if err := h.c.sync(true); err != nil {
				t.Fatal(err)
			}
			if got := h.repairedCIDRs(); !slices.Equal(got, tc.want) {
				t.Errorf("repair got Service CIDRs %v, want %v", got, tc.want)
			}
		})
	}
}

// Without ServiceCIDRs in discovery there is no informer: it could never sync, and the
// start would wait for it forever.
func TestNoServiceCIDRInformerWhenTheAPIHasNone(t *testing.T) {
	h := startHarnessWith(t, fake.NewClientset(), Observers{}, cidrConfig())
	if h.c.src.serviceCIDRs != nil {
		t.Error("a ServiceCIDR informer was started against an API server without them")
	}
}

// A ServiceCIDR added or removed while the proxy runs reaches the dataplane at once, by a
// repair, without waiting for the sync period (an hour here).
func TestServiceCIDRChangeRepairsWithoutRestart(t *testing.T) {
	client := servingServiceCIDRs(serviceCIDR("kubernetes", "10.96.0.0/16"))
	h := startHarnessWith(t, client, Observers{}, cidrConfig("10.50.0.0/16"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitCIDRs := func(want []netip.Prefix) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !slices.Equal(h.repairedCIDRs(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("the last repair had Service CIDRs %v, want %v", h.repairedCIDRs(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitCIDRs(prefixes("10.96.0.0/16"))
	if _, err := client.NetworkingV1().ServiceCIDRs().Create(ctx, serviceCIDR("more", "10.97.0.0/16"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCIDRs(prefixes("10.96.0.0/16", "10.97.0.0/16"))
	for _, name := range []string{"kubernetes", "more"} {
		if err := client.NetworkingV1().ServiceCIDRs().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitCIDRs(prefixes("10.50.0.0/16")) // none left in the API: the flags again
}

func TestNormalizePrefixes(t *testing.T) {
	in := append(prefixes("fd00::1/64", "10.96.0.9/12", "10.96.0.0/12", "::ffff:10.0.0.0/104"), netip.Prefix{})
	if got, want := normalizePrefixes(in), prefixes("10.96.0.0/12", "fd00::/64"); !slices.Equal(got, want) {
		t.Errorf("normalizePrefixes = %v, want %v", got, want)
	}
}

// A role without list on servicecidrs (an older rbac.yaml) does not hold the proxy up: after
// a bounded wait the flags apply, and the Services are programmed.
func TestForbiddenServiceCIDRsFallBackToTheFlags(t *testing.T) {
	defer func(d time.Duration) { serviceCIDRSyncWait = d }(serviceCIDRSyncWait)
	serviceCIDRSyncWait = 200 * time.Millisecond
	client := servingServiceCIDRs()
	client.PrependReactor("list", "servicecidrs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(networkingv1.Resource("servicecidrs"), "", errors.New("no rule"))
	})
	if _, err := client.CoreV1().Services("ns").Create(context.Background(), service("a", "10.96.0.1", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	h := startHarnessWith(t, client, Observers{}, cidrConfig("10.96.0.0/16"))
	if err := h.c.sync(true); err != nil {
		t.Fatal(err)
	}
	if h.c.src.cidrsListed() {
		t.Fatal("the ServiceCIDR informer synced although listing them is forbidden")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the start took %s", took)
	}
	if got := h.repairedCIDRs(); !slices.Equal(got, prefixes("10.96.0.0/16")) {
		t.Errorf("repair got Service CIDRs %v, want the flag's", got)
	}
	if h.dp.vs[vsKey("10.96.0.1", 80)] == nil {
		t.Error("the Service was not programmed")
	}
}
