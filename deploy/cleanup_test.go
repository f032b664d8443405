package deploy

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
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

// deploy/migrate adds `cleanup --kube-proxy` as an init container of the same DaemonSet,
// with the xtables lock the DaemonSet already mounts.
func TestMigrateOverlayAddsTheKubeProxyCleanup(t *testing.T) {
	patch := only[*appsv1.DaemonSet](t, "migrate/cleanup-kube-proxy.yaml")
	ds := only[*appsv1.DaemonSet](t, "daemonset.yaml")
	if patch.Name != ds.Name || patch.Namespace != ds.Namespace {
		t.Errorf("the patch is for %s/%s, the DaemonSet is %s/%s", patch.Namespace, patch.Name, ds.Namespace, ds.Name)
	}
	ic := container(t, patch.Spec.Template.Spec.InitContainers, "cleanup-kube-proxy")
	if !slices.Equal(ic.Args, []string{"cleanup", "--kube-proxy"}) {
		t.Errorf("init args %q", ic.Args)
	}
	have := map[string]bool{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		have[v.Name] = true
	}
	for _, m := range ic.VolumeMounts {
		if !have[m.Name] {
			t.Errorf("the init container mounts %q, which the DaemonSet has no volume for", m.Name)
		}
	}
}
