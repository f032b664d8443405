package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"net"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/kube-ipvs/kube-ipvs/config"
)

const namespace = "kube-system"

// wantKinds is every manifest and the kinds it holds, in order.
var wantKinds = map[string][]string{
	"rbac.yaml":      {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"},
	"configmap.yaml": {"ConfigMap"},
	"daemonset.yaml": {"DaemonSet"},
}

// decodeFile decodes every document of a manifest with client-go's scheme, then again
// strictly with sigs.k8s.io/yaml into the same type, so that a misspelt or misplaced field
// (which the scheme's decoder drops silently) fails the test.
func decodeFile(t *testing.T, file string) []runtime.Object {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []runtime.Object
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if j, err := yaml.YAMLToJSON(doc); err != nil || string(j) == "null" {
			continue // only comments
		}
		obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s document %d: %v", file, i, err)
		}
		strict := reflect.New(reflect.TypeOf(obj).Elem()).Interface()
		if err := yaml.UnmarshalStrict(doc, strict); err != nil {
			t.Errorf("%s document %d (%s): %v", file, i, gvk.Kind, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

func kindOf(o runtime.Object) string {
	return reflect.TypeOf(o).Elem().Name()
}

func only[T runtime.Object](t *testing.T, file string) T {
	t.Helper()
	for _, o := range decodeFile(t, file) {
		if v, ok := o.(T); ok {
			return v
		}
	}
	var zero T
	t.Fatalf("%s holds no %T", file, zero)
	return zero
}

func TestManifestsDecodeToTheirKinds(t *testing.T) {
	for file, kinds := range wantKinds {
		var got []string
		for _, o := range decodeFile(t, file) {
			got = append(got, kindOf(o))
			if m, ok := o.(interface{ GetNamespace() string }); ok {
				ns := m.GetNamespace()
				clusterScoped := kindOf(o) == "ClusterRole" || kindOf(o) == "ClusterRoleBinding"
				if clusterScoped != (ns == "") || (!clusterScoped && ns != namespace) {
					t.Errorf("%s: %s has namespace %q", file, kindOf(o), ns)
				}
			}
		}
		if !slices.Equal(got, kinds) {
			t.Errorf("%s holds %v, want %v", file, got, kinds)
		}
	}
}

func TestClusterRoleIsLeastPrivilege(t *testing.T) {
	role := only[*rbacv1.ClusterRole](t, "rbac.yaml")
	want := map[string]bool{}
	for _, r := range []string{"/services", "/nodes", "discovery.k8s.io/endpointslices"} {
		for _, v := range []string{"get", "list", "watch"} {
			want[r+" "+v] = true
		}
	}
	for _, v := range []string{"list", "watch"} {
		want["networking.k8s.io/servicecidrs "+v] = true
	}
	for _, r := range []string{"/events", "events.k8s.io/events"} {
		for _, v := range []string{"create", "patch"} {
			want[r+" "+v] = true
		}
	}
	got := map[string]bool{}
	for _, rule := range role.Rules {
		if len(rule.ResourceNames) > 0 || len(rule.NonResourceURLs) > 0 {
			t.Errorf("rule %+v: resourceNames or nonResourceURLs", rule)
		}
		for _, g := range rule.APIGroups {
			for _, r := range rule.Resources {
				for _, v := range rule.Verbs {
					if g == "*" || r == "*" || v == "*" || strings.Contains(r, "/") {
						t.Errorf("rule %+v: wildcard or subresource", rule)
					}
					got[g+"/"+r+" "+v] = true
				}
			}
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("the ClusterRole grants\n%v\nwant exactly\n%v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
}

func TestBindingGrantsTheRoleToTheServiceAccount(t *testing.T) {
	sa := only[*corev1.ServiceAccount](t, "rbac.yaml")
	role := only[*rbacv1.ClusterRole](t, "rbac.yaml")
	b := only[*rbacv1.ClusterRoleBinding](t, "rbac.yaml")
	if b.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}) {
		t.Errorf("roleRef %+v", b.RoleRef)
	}
	want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: namespace}}
	if !reflect.DeepEqual(b.Subjects, want) {
		t.Errorf("subjects %+v, want %+v", b.Subjects, want)
	}
	ds := only[*appsv1.DaemonSet](t, "daemonset.yaml")
	if ds.Spec.Template.Spec.ServiceAccountName != sa.Name || sa.Name != "kube-ipvs" {
		t.Errorf("the DaemonSet runs as %q; the ServiceAccount is %q", ds.Spec.Template.Spec.ServiceAccountName, sa.Name)
	}
}

func container(t *testing.T, cs []corev1.Container, name string) corev1.Container {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

func TestDaemonSet(t *testing.T) {
	ds := only[*appsv1.DaemonSet](t, "daemonset.yaml")
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork {
		t.Error("hostNetwork is not set")
	}
	if pod.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q", pod.PriorityClassName)
	}
	if !reflect.DeepEqual(pod.Tolerations, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}) {
		t.Errorf("tolerations %+v; want one that tolerates every taint", pod.Tolerations)
	}
	if sel := ds.Spec.Selector.MatchLabels; len(sel) == 0 || !maps.Equal(sel, ds.Spec.Template.Labels) {
		t.Errorf("selector %v does not match the template's labels %v", sel, ds.Spec.Template.Labels)
	}
	u := ds.Spec.UpdateStrategy
	if u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil ||
		u.RollingUpdate.MaxUnavailable == nil || u.RollingUpdate.MaxUnavailable.String() != "10%" {
		t.Errorf("updateStrategy %+v", u)
	}

	c := container(t, pod.Containers, "kube-ipvs")
	if c.Image != "kube-ipvs" {
		t.Errorf("image %q: kustomization.yaml's images entry rewrites the name kube-ipvs", c.Image)
	}
	for _, arg := range []string{"run", "--config=/etc/kube-ipvs/config.yaml", "--hostname-override=$(NODE_NAME)"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %q lack %q", c.Args, arg)
		}
	}
	var nodeName *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == "NODE_NAME" {
			nodeName = &c.Env[i]
		}
	}
	if nodeName == nil || nodeName.ValueFrom == nil || nodeName.ValueFrom.FieldRef == nil ||
		nodeName.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME does not come from the downward API's spec.nodeName: %+v", nodeName)
	}
	for _, e := range c.Env {
		if ref := e.ValueFrom; ref != nil && ref.ConfigMapKeyRef != nil &&
			(ref.ConfigMapKeyRef.Optional == nil || !*ref.ConfigMapKeyRef.Optional) {
			t.Errorf("env %s: a ConfigMap key the user may not set must be optional", e.Name)
		}
	}

	probe := func(name string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.IntValue() != 10256 {
			t.Errorf("%s probe %+v; want GET %s on port 10256", name, p, path)
		}
	}
	probe("liveness", c.LivenessProbe, "/livez")
	probe("readiness", c.ReadinessProbe, "/healthz")

	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resource requests %v", c.Resources.Requests)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("no securityContext capabilities")
	}
	// Least privilege: the init container did what needs more (see daemonset.yaml).
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("the proxy container is privileged; the init container is the privileged step")
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_RAW", "SYS_RESOURCE"}) {
		t.Errorf("capabilities %+v; want drop ALL, add NET_ADMIN, NET_RAW, SYS_RESOURCE", sc.Capabilities)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("the proxy container allows privilege escalation")
	}

	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
		if _, ok := volumes[m.Name]; !ok {
			t.Errorf("mount %s: no volume %q", m.MountPath, m.Name)
		}
	}
	if m, ok := mounts["/lib/modules"]; !ok || !m.ReadOnly || volumes[m.Name].HostPath == nil || volumes[m.Name].HostPath.Path != "/lib/modules" {
		t.Errorf("/lib/modules: mount %+v volume %+v; want the host's, read-only", m, volumes[m.Name])
	}
	lock, ok := mounts["/run/xtables.lock"]
	if hp := volumes[lock.Name].HostPath; !ok || hp == nil || hp.Path != "/run/xtables.lock" || hp.Type == nil || *hp.Type != corev1.HostPathFileOrCreate {
		t.Errorf("/run/xtables.lock: mount %+v volume %+v; want the host's, FileOrCreate", lock, volumes[lock.Name])
	}
	cfg, ok := mounts["/etc/kube-ipvs"]
	if cm := volumes[cfg.Name].ConfigMap; !ok || cm == nil || cm.Name != "kube-ipvs" ||
		!slices.Contains(cm.Items, corev1.KeyToPath{Key: "config.yaml", Path: "config.yaml"}) {
		t.Errorf("/etc/kube-ipvs: mount %+v volume %+v; want config.yaml from ConfigMap kube-ipvs", cfg, volumes[cfg.Name])
	}

	// The init container is `run --init-only` on the proxy's own configuration, privileged.
	if len(pod.InitContainers) != 1 {
		t.Errorf("%d init containers; want the --init-only one", len(pod.InitContainers))
	}
	ic := container(t, pod.InitContainers, "init")
	if ic.Image != c.Image {
		t.Errorf("init image %q, proxy image %q", ic.Image, c.Image)
	}
	if want := []string{"run", "--init-only", "--config=/etc/kube-ipvs/config.yaml"}; len(ic.Command) != 0 || !slices.Equal(ic.Args, want) {
		t.Errorf("init command %q args %q; want the entrypoint with %q (the proxy's --config)", ic.Command, ic.Args, want)
	}
	initMounts := map[string]corev1.VolumeMount{}
	for _, m := range ic.VolumeMounts {
		initMounts[m.MountPath] = m
	}
	if m := initMounts["/lib/modules"]; !m.ReadOnly || m.Name != mounts["/lib/modules"].Name {
		t.Errorf("init mounts %+v; want /lib/modules read-only", ic.VolumeMounts)
	}
	if m := initMounts["/etc/kube-ipvs"]; m.Name != cfg.Name {
		t.Errorf("init mounts %+v; want the proxy's configuration at /etc/kube-ipvs", ic.VolumeMounts)
	}
	if isc := ic.SecurityContext; isc == nil || isc.Privileged == nil || !*isc.Privileged {
		t.Errorf("init securityContext %+v; want privileged (a writable /proc/sys and /sys, modprobe)", isc)
	}
}

func TestConfigMapHoldsAValidCompleteConfiguration(t *testing.T) {
	cm := only[*corev1.ConfigMap](t, "configmap.yaml")
	if cm.Name != "kube-ipvs" || len(cm.Data) != 1 {
		t.Fatalf("ConfigMap %s with keys %v; want kube-ipvs with config.yaml", cm.Name, slices.Collect(maps.Keys(cm.Data)))
	}
	text := cm.Data["config.yaml"]
	s, warnings, err := config.Parse([]byte(text))
	if err != nil || len(warnings) != 0 {
		t.Fatalf("config.yaml: %v %q", err, warnings)
	}
	if s.Kind != config.Kind {
		t.Errorf("kind %s", s.Kind)
	}
	// Every field is shown, so that the file documents the whole format.
	var raw map[string]any
	if err := yaml.Unmarshal([]byte(text), &raw); err != nil {
		t.Fatal(err)
	}
	delete(raw, "apiVersion")
	delete(raw, "kind")
	if got, want := slices.Sorted(maps.Keys(raw)), slices.Sorted(slices.Values(config.FieldNames())); !slices.Equal(got, want) {
		t.Errorf("config.yaml fields %v, want every field %v", got, want)
	}
	// The defaults shown are the defaults: the file read into fresh run options changes
	// nothing, for every field, but where deploy/ chooses otherwise.
	var defaults, fromFile config.Options
	dfs := pflag.NewFlagSet("defaults", pflag.ContinueOnError)
	defaults.AddFlags(dfs)
	for flag, v := range map[string]string{
		"handover-file": "/run/kube-ipvs/ipvs-handover", // deploy/ keeps a handover in the host's /run
		"bind-address":  "",                             // bindAddress 0.0.0.0 is read as unset, as kube-proxy does
	} {
		if err := dfs.Set(flag, v); err != nil {
			t.Fatal(err)
		}
	}
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fromFile.AddFlags(fs)
	if err := config.ApplyToFlags(s, fs); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromFile, defaults) {
		fs.VisitAll(func(f *pflag.Flag) {
			if want := dfs.Lookup(f.Name).Value.String(); f.Value.String() != want {
				t.Errorf("config.yaml gives --%s %q; want %q, the default", f.Name, f.Value, want)
			}
		})
	}
	// The probes reach the health server.
	_, port, err := net.SplitHostPort(s.Values["healthz-bind-address"])
	if err != nil || port != "10256" {
		t.Errorf("healthzBindAddress %q: the probes use port 10256", s.Values["healthz-bind-address"])
	}
}

// kustomization is the part of kustomize's Kustomization that deploy/ uses; decoding into it
// strictly catches any other field.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

func TestKustomization(t *testing.T) {
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatal(err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" || k.Namespace != namespace {
		t.Errorf("header %s %s namespace %q", k.APIVersion, k.Kind, k.Namespace)
	}
	if got, want := slices.Sorted(slices.Values(k.Resources)), slices.Sorted(maps.Keys(wantKinds)); !slices.Equal(got, want) {
		t.Errorf("resources %v, want %v", got, want)
	}
	if len(k.Images) != 1 || k.Images[0].Name != "kube-ipvs" || k.Images[0].NewTag == "" {
		t.Errorf("images %+v; want kube-ipvs with a tag", k.Images)
	}

	// The build itself is checked with kustomize's library in test/kustomize (a module of its
	// own), so that no kubectl is needed.
}

// TestImageRecipe checks that the one image recipe (hack/image, `make image`; there is no
// Dockerfile to drift from it) holds what the DaemonSet runs and the README promises, and
// that the image is named the same in hack/image/build.sh, kustomization.yaml and the README.
func TestImageRecipe(t *testing.T) {
	if _, err := os.Stat("Dockerfile"); err == nil {
		t.Error("deploy/Dockerfile exists again: the image has one recipe, hack/image (make image)")
	}
	pkgs := imagePackages(t)
	for pkg, why := range map[string]string{
		"iptables":  "iptables-{legacy,nft}-{save,restore}, run by the proxy",
		"ipset":     "the debugging tool for the proxy's sets",
		"ipvsadm":   "the IPVS debugging tool",
		"kmod":      "modprobe, run by the init container's --init-only",
		"conntrack": "the conntrack debugging tool",
		"iproute2":  "ip, to look at kube-ipvs0",
		"netbase":   "/etc/protocols and /etc/services",
	} {
		if !slices.Contains(pkgs, pkg) {
			t.Errorf("hack/image/packages.txt lacks %s (%s)", pkg, why)
		}
	}
	build, err := os.ReadFile("../hack/image/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &k); err != nil || len(k.Images) != 1 {
		t.Fatalf("kustomization.yaml images: %v %+v", err, k.Images)
	}
	name := k.Images[0].Name
	if !strings.Contains(string(build), "--name "+name+" ") {
		t.Errorf("hack/image/build.sh does not name the image %q as kustomization.yaml does", name)
	}
	for _, want := range []string{"kustomize edit set image " + name + "=REGISTRY/" + name + ":TAG", "make image"} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
}

// imagePackages is hack/image/packages.txt's package names.
func imagePackages(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../hack/image/packages.txt")
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, line := range strings.Split(string(data), "\n") {
		line, _, _ = strings.Cut(line, "#")
		if f := strings.Fields(line); len(f) > 0 {
			pkgs = append(pkgs, f[0])
		}
	}
	return pkgs
}
