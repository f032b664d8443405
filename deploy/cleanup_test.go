package deploy

import (
	"os"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kube-ipvs/kube-ipvs/config"
)

// runLockFile is `kube-ipvs run`'s and `kube-ipvs cleanup`'s --lock-file default.
const runLockFile = "/run/kube-ipvs.lock"

// hostFileMount returns the host path and type of the volume mounted at path.
func hostFileMount(t *testing.T, pod corev1.PodSpec, c corev1.Container, path string) (string, corev1.HostPathType) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.MountPath != path {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.HostPath != nil && v.HostPath.Type != nil {
				return v.HostPath.Path, *v.HostPath.Type
			}
		}
	}
	return "", ""
}

// The proxy and the cleanup Job share the host's lock file, so cleanup sees a running proxy.
func TestRunAndCleanupShareTheLockFile(t *testing.T) {
	ds := only[*appsv1.DaemonSet](t, "daemonset.yaml")
	pod := ds.Spec.Template.Spec
	if p, typ := hostFileMount(t, pod, container(t, pod.Containers, "kube-ipvs"), runLockFile); p != runLockFile || typ != corev1.HostPathFileOrCreate {
		t.Errorf("the proxy mounts %q (%s) at %s; want the host's %s, FileOrCreate", p, typ, runLockFile, runLockFile)
	}
	job := only[*batchv1.Job](t, "cleanup/job.yaml")
	jp := job.Spec.Template.Spec
	c := container(t, jp.Containers, "cleanup")
	if len(c.Args) == 0 || c.Args[0] != "cleanup" || c.Image != "kube-ipvs" {
		t.Errorf("the Job runs %s %q", c.Image, c.Args)
	}
	if !jp.HostNetwork || jp.RestartPolicy != corev1.RestartPolicyNever || jp.NodeName == "" {
		t.Errorf("the Job's pod: hostNetwork %v, restartPolicy %s, nodeName %q", jp.HostNetwork, jp.RestartPolicy, jp.NodeName)
	}
	for _, f := range []string{runLockFile, "/run/xtables.lock"} {
		if p, typ := hostFileMount(t, jp, c, f); p != f || typ != corev1.HostPathFileOrCreate {
			t.Errorf("the Job mounts %q (%s) at %s", p, typ, f)
		}
	}
	if sc := c.SecurityContext; sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Add, "NET_ADMIN") {
		t.Errorf("the Job's securityContext %+v lacks NET_ADMIN", sc)
	}
}

// deploy/migrate adds --cleanup-kube-proxy to the proxy's own `kube-ipvs run`, the
// DaemonSet's first container, so that kube-proxy's leftovers go after the first full sync
// (no init container, which would remove them before). test/kustomize builds the overlay.
func TestMigrateOverlayAddsTheKubeProxyCleanupToRun(t *testing.T) {
	data, err := os.ReadFile("migrate/cleanup-kube-proxy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ops []struct{ Op, Path, Value string }
	if err := yaml.UnmarshalStrict(data, &ops); err != nil {
		t.Fatal(err)
	}
	want := []struct{ Op, Path, Value string }{{"add", "/spec/template/spec/containers/0/args/-", "--" + config.FlagCleanupKubeProxy}}
	if !slices.Equal(ops, want) {
		t.Errorf("the patch is %+v; want %+v", ops, want)
	}
	ds := only[*appsv1.DaemonSet](t, "daemonset.yaml")
	if c := ds.Spec.Template.Spec.Containers[0]; c.Name != "kube-ipvs" || len(c.Args) == 0 || c.Args[0] != "run" {
		t.Errorf("the DaemonSet's first container is %s running %q; the patch expects kube-ipvs running run", c.Name, c.Args)
	}
}
