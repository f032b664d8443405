package manifests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

const goodSvc = `apiVersion: v1
kind: Service
metadata: {name: web}
spec: {clusterIP: 10.96.0.1, ports: [{port: 80}]}
`

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadNamesBadDocumentsAndKeepsGoodOnes(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.yaml", goodSvc+"---\napiVersion: v1\nkind: Service\nmetadata: {name: bad, namespace: x}\nspec: {ports: [{port: eighty}]}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n")
	write(t, dir, "b.yml", "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n")
	write(t, dir, "notes.txt", "not a manifest")
	write(t, dir, "c.yaml", "kind: [unclosed\n")

	objs, err := Load(dir)
	if err == nil {
		t.Fatal("want an error for the bad documents")
	}
	msg := err.Error()
	for _, want := range []string{"a.yaml: document 2 (Service x/bad)", "a.yaml: document 3", "ConfigMap", "c.yaml: document 1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not mention %q:\n%s", want, msg)
		}
	}
	if len(objs) != 2 || objs["Service default/web"] == nil || objs["Node n1"] == nil {
		t.Errorf("loaded %v, want Service default/web and Node n1", keys(objs))
	}
}

func keys(o Objects) []string {
	var k []string
	for x := range o {
		k = append(k, x)
	}
	return k
}

func TestSyncCreatesUpdatesAndDeletesOnlyWhatChanged(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "s.yaml", goodSvc+"---\napiVersion: v1\nkind: Service\nmetadata: {name: gone}\nspec: {clusterIP: 10.96.0.2, ports: [{port: 81}]}\n")
	ctx := context.Background()
	cs := fake.NewClientset()
	first, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := Sync(ctx, cs, nil, first); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "s.yaml", strings.Replace(goodSvc, "port: 80", "port: 8080", 1))
	second, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cs.ClearActions()
	if err := Sync(ctx, cs, first, second); err != nil {
		t.Fatal(err)
	}
	var verbs []string
	for _, a := range cs.Actions() {
		verbs = append(verbs, a.GetVerb())
	}
	if strings.Join(verbs, ",") != "create,update,delete" {
		t.Errorf("actions %v, want create (exists) then update for web and delete for gone", verbs)
	}
	svc, err := cs.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || svc.Spec.Ports[0].Port != 8080 {
		t.Errorf("web after sync: %v %v", svc, err)
	}
	if _, err := cs.CoreV1().Services("default").Get(ctx, "gone", metav1.GetOptions{}); err == nil {
		t.Error("gone still exists")
	}
	cs.ClearActions()
	if err := Sync(ctx, cs, second, second); err != nil || len(cs.Actions()) != 0 {
		t.Errorf("a no-op sync made %d calls (%v)", len(cs.Actions()), err)
	}
}

const serviceCIDRDoc = `apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata: {name: extra}
spec: {cidrs: [10.97.0.0/16, "fd00:97::/108"]}
`

// ServiceCIDR objects load (cluster-scoped, no namespace), reach the clientset, leave it
// when their document goes, and discovery lists the resource, so the controller watches it.
func TestServiceCIDRsLoadAndSync(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "cidr.yaml", serviceCIDRDoc)
	objs, err := Load(dir)
	if err != nil || objs["ServiceCIDR extra"] == nil {
		t.Fatalf("loaded %v, %v; want ServiceCIDR extra", keys(objs), err)
	}
	ctx := context.Background()
	cs := NewClientset()
	if err := Sync(ctx, cs, nil, objs); err != nil {
		t.Fatal(err)
	}
	got, err := cs.NetworkingV1().ServiceCIDRs().Get(ctx, "extra", metav1.GetOptions{})
	if err != nil || strings.Join(got.Spec.CIDRs, ",") != "10.97.0.0/16,fd00:97::/108" {
		t.Fatalf("ServiceCIDR extra in the clientset: %v, %v", got, err)
	}
	if err := Sync(ctx, cs, objs, Objects{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.NetworkingV1().ServiceCIDRs().Get(ctx, "extra", metav1.GetOptions{}); err == nil {
		t.Error("a ServiceCIDR whose document went is still in the clientset")
	}
	list, err := cs.Discovery().ServerResourcesForGroupVersion("networking.k8s.io/v1")
	if err != nil || len(list.APIResources) != 1 || list.APIResources[0].Name != "servicecidrs" {
		t.Errorf("discovery: %v, %v; want servicecidrs listed", list, err)
	}
}
