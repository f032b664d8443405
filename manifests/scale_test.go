package manifests

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// synthObjects is n Services, each with one EndpointSlice of one endpoint.
func synthObjects(n int) Objects {
	objs := Objects{}
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		objs["Service default/"+name] = &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.ServiceSpec{ClusterIP: fmt.Sprintf("10.96.%d.%d", i/250, i%250+1),
				Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		}
		objs["EndpointSlice default/"+name] = &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{fmt.Sprintf("10.244.%d.%d", i/250, i%250+1)}}},
		}
	}
	return objs
}

// Filling the source costs a bounded number of allocations per object, whatever N (client-go's
// field-managed fake tracker took about 2,900 per object, and grew with N). The bound fails
// if an expensive store, or any per-object work that grows with the store, comes.
func TestSyncCostPerObjectIsSmallAndFlat(t *testing.T) {
	perObject := func(n int) float64 {
		objs := synthObjects(n)
		allocs := testing.AllocsPerRun(1, func() {
			if _, err := NewSource().Sync(objs); err != nil {
				t.Fatal(err)
			}
		})
		return allocs / float64(len(objs))
	}
	small, large := perObject(100), perObject(1000)
	t.Logf("allocations per object: %.0f at 200 objects, %.0f at 2,000", small, large)
	if large > 200 {
		t.Errorf("%.0f allocations per object written; want at most 200", large)
	}
	if large > 1.5*small {
		t.Errorf("cost per object grows with N: %.0f at 2,000 objects vs %.0f at 200", large, small)
	}
}

// A reload after one file changed writes only that file's objects.
func TestReloadWritesOnlyTheChangedFilesObjects(t *testing.T) {
	dir := t.TempDir()
	other := "apiVersion: v1\nkind: Service\nmetadata: {name: other}\nspec: {clusterIP: 10.96.0.9, ports: [{port: 53}]}\n"
	write(t, dir, "a.yaml", goodSvc)
	write(t, dir, "b.yaml", other)
	src := NewSource()
	first, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Sync(first); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "b.yaml", strings.Replace(other, "port: 53", "port: 5353", 1))
	second, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := src.Sync(second)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ch.Added, ch.Updated, ch.Deleted) != "[] [Service default/other] []" {
		t.Errorf("reload wrote %+v; want only the changed file's Service other", ch)
	}
}

func BenchmarkSync2000Services(b *testing.B) {
	objs := synthObjects(2000)
	for b.Loop() {
		if _, err := NewSource().Sync(objs); err != nil {
			b.Fatal(err)
		}
	}
}
