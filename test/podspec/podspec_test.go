package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestExpandAsTheKubelet(t *testing.T) {
	got := expandAll([]string{"--n=$(NODE)", "$$(NODE)", "$(MISSING)", "a$(NODE)b$(NODE)"}, map[string]string{"NODE": "n1"})
	want := []string{"--n=n1", "$(NODE)", "$(MISSING)", "an1bn1"}
	if !slices.Equal(got, want) {
		t.Errorf("expand: %q, want %q", got, want)
	}
}

// The real manifests: the node name reaches env and args, optional ConfigMap keys that are
// absent are left out, and the configMap volume's file is the ConfigMap's config.yaml.
func TestDeployManifests(t *testing.T) {
	p, err := load("../../deploy/daemonset.yaml", "../../deploy/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files := t.TempDir()
	var out strings.Builder
	if err := p.write(&out, "node-7", files); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"init0_name='init'\n",
		"init0_command=()\n",
		"init0_args=('run' '--init-only' '--config=/etc/kube-ipvs/config.yaml')\n",
		"init0_privileged=1\n",
		"main0_privileged=0\n",
		"main0_name='kube-ipvs'\n",
		"main0_command=()\n",
		"'--hostname-override=node-7'",
		"'NODE_NAME=node-7'",
		"'configMap|config|/etc/kube-ipvs|ro'",
		"'hostPath|/lib/modules|/lib/modules|ro'",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("podspec output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "KUBERNETES_SERVICE_HOST") {
		t.Errorf("an absent optional ConfigMap key became an env var:\n%s", text)
	}
	got, err := os.ReadFile(filepath.Join(files, "config", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := p.configMap.Data["config.yaml"]; string(got) != want || want == "" {
		t.Errorf("config volume file differs from the ConfigMap's config.yaml")
	}
}
