package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// forbidden are client-go's test doubles: nothing the product runs may depend on them.
var forbidden = []string{"k8s.io/client-go/kubernetes/fake", "k8s.io/client-go/testing"}

// clientGoTesting is the one client-go's own package gentype (what its real typed clients are
// built on) imports, for the fakes it also defines: it is in every client's dependencies, so
// only the project's own packages are held to not importing it.
const clientGoTesting = "k8s.io/client-go/testing"

// importers returns, for each forbidden package among the dependencies of pkgs, the packages
// that import it directly.
func importers(t *testing.T, pkgs []string) map[string][]string {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`}, pkgs...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	found := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			for _, bad := range forbidden {
				if imp == bad {
					found[bad] = append(found[bad], f[0])
				}
			}
		}
	}
	return found
}

// No production package (everything but the bench, which keeps a fake clientset as its
// stand-in API server, and the test harnesses under test/) depends on client-go's fake
// clientset or its testing package. The same listing of the bench must find its fake:
// otherwise the check itself is broken.
func TestNoProductionPackageImportsClientGoTestDoubles(t *testing.T) {
	const module = "github.com/kube-ipvs/kube-ipvs/"
	out, err := exec.Command("go", "list", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var prod []string
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, module+"bench") || strings.HasPrefix(p, module+"test/") {
			continue
		}
		prod = append(prod, p)
	}
	if len(prod) < 10 || !slices.Contains(prod, module+"cmd/kube-ipvs") || !slices.Contains(prod, module+"manifests") {
		t.Fatalf("production packages %v: the listing is wrong", prod)
	}
	for bad, by := range importers(t, prod) {
		if bad == clientGoTesting {
			by = slices.DeleteFunc(by, func(p string) bool { return !strings.HasPrefix(p, module) })
		}
		if len(by) > 0 {
			t.Errorf("%s is imported by %s", bad, strings.Join(by, ", "))
		}
	}
	if got := importers(t, []string{module + "bench"}); len(got[forbidden[0]]) == 0 {
		t.Errorf("the check finds no fake clientset in the bench (%v): it would miss one in the product too", got)
	}
}
