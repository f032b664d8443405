package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	src := NewSource()
	first, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Sync(first); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "s.yaml", strings.Replace(goodSvc, "port: 80", "port: 8080", 1))
	second, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := src.Sync(second)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ch.Added, ch.Updated, ch.Deleted) != "[] [Service default/web] [Service default/gone]" {
		t.Errorf("changes %+v, want web updated and gone deleted", ch)
	}
	l, err := src.ListerWatcher("Service").List(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	items := l.(*corev1.ServiceList).Items
	if len(items) != 1 || items[0].Name != "web" || items[0].Spec.Ports[0].Port != 8080 {
		t.Errorf("Services after sync: %+v, want web alone on port 8080", items)
	}
	if ch, err := src.Sync(second); err != nil || len(ch.Added)+len(ch.Updated)+len(ch.Deleted) != 0 {
		t.Errorf("a no-op sync wrote %+v (%v)", ch, err)
	}
}

const serviceCIDRDoc = `apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata: {name: extra}
spec: {cidrs: [10.97.0.0/16, "fd00:97::/108"]}
`

// ServiceCIDR objects load (cluster-scoped, no namespace), reach the source and leave it
// when their document goes.
func TestServiceCIDRsLoadAndSync(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "cidr.yaml", serviceCIDRDoc)
	objs, err := Load(dir)
	if err != nil || objs["ServiceCIDR extra"] == nil {
		t.Fatalf("loaded %v, %v; want ServiceCIDR extra", keys(objs), err)
	}
	src := NewSource()
	if _, err := src.Sync(objs); err != nil {
		t.Fatal(err)
	}
	lw := src.ListerWatcher("ServiceCIDR")
	l, err := lw.List(metav1.ListOptions{FieldSelector: "metadata.name=extra"})
	if err != nil {
		t.Fatal(err)
	}
	if items := l.(*networkingv1.ServiceCIDRList).Items; len(items) != 1 || strings.Join(items[0].Spec.CIDRs, ",") != "10.97.0.0/16,fd00:97::/108" {
		t.Fatalf("ServiceCIDRs in the source: %+v", items)
	}
	if _, err := src.Sync(Objects{}); err != nil {
		t.Fatal(err)
	}
	if l, _ := lw.List(metav1.ListOptions{}); len(l.(*networkingv1.ServiceCIDRList).Items) != 0 {
		t.Error("a ServiceCIDR whose document went is still in the source")
	}
}
