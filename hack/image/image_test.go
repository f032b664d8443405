package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// tree makes a small root file system: a folder, an executable, a symbolic link.
func tree(t *testing.T, content string) string {
	t.Helper()
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "usr/bin/tool"), []byte(content), 0o755))
	must(t, os.Symlink("usr/bin", filepath.Join(root, "bin")))
	must(t, os.MkdirAll(filepath.Join(root, "tmp"), 0o755))
	must(t, os.Chmod(filepath.Join(root, "tmp"), 0o777|os.ModeSticky))
	return root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var epoch = time.Unix(1700000000, 0).UTC()

func TestTreeTarIsSortedOwnedByRootAndTimed(t *testing.T) {
	var buf bytes.Buffer
	must(t, writeTree(&buf, tree(t, "x"), epoch))
	tr := tar.NewReader(&buf)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(t, err)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(epoch) {
			t.Errorf("%s: owner %d:%d %q:%q time %v", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
		if h.Name == "tmp/" && h.Mode != 0o1777 {
			t.Errorf("tmp/ mode %o, want 1777", h.Mode)
		}
		names = append(names, h.Name)
	}
	want := []string{"bin", "tmp/", "usr/", "usr/bin/", "usr/bin/tool"}
	if len(names) != len(want) {
		t.Fatalf("entries %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("entries %v, want %v", names, want)
		}
	}
}

func testRecipe(amd64, arm64 string) recipe {
	return recipe{name: "kube-ipvs", version: "v1.2.3", revision: "abc", created: epoch,
		roots: map[string]string{"linux/amd64": amd64, "linux/arm64": arm64}}
}

var platforms = []string{"linux/amd64", "linux/arm64"}

// Two builds of equal trees made at different times give the same index digest; a changed
// byte changes it.
func TestBuildIsReproducible(t *testing.T) {
	digest := func(r recipe) string {
		b, err := build(r, platforms, t.TempDir())
		must(t, err)
		d, err := b.index.Digest()
		must(t, err)
		return d.String()
	}
	a := digest(testRecipe(tree(t, "x"), tree(t, "y")))
	time.Sleep(1100 * time.Millisecond) // the trees' own file times differ now
	b := digest(testRecipe(tree(t, "x"), tree(t, "y")))
	if a != b {
		t.Errorf("same trees, different digests: %s %s", a, b)
	}
	if c := digest(testRecipe(tree(t, "x"), tree(t, "z"))); c == a {
		t.Errorf("a changed file kept the digest %s", c)
	}
}

// The layout written holds the index; unpacking a platform gives back its tree, config and
// labels.
func TestWriteThenUnpack(t *testing.T) {
	r := testRecipe(tree(t, "amd64 tool"), tree(t, "arm64 tool"))
	b, err := build(r, platforms, t.TempDir())
	must(t, err)
	out := t.TempDir()
	must(t, b.write(r, out))
	for _, f := range []string{"kube-ipvs-amd64.tar", "kube-ipvs-arm64.tar", "oci/index.json", "oci/oci-layout"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	img, err := imageFromLayout(filepath.Join(out, "oci"), "linux/arm64")
	must(t, err)
	root := filepath.Join(t.TempDir(), "root")
	must(t, unpack(img, root))
	if got, err := os.ReadFile(filepath.Join(root, "bin/tool")); err != nil || string(got) != "arm64 tool" {
		t.Errorf("bin/tool: %q %v", got, err)
	}
	cf, err := img.ConfigFile()
	must(t, err)
	if cf.Architecture != "arm64" || cf.Config.Labels["org.opencontainers.image.version"] != "v1.2.3" ||
		cf.Config.Labels["org.opencontainers.image.revision"] != "abc" || cf.Config.User != "0:0" {
		t.Errorf("config %+v", cf)
	}
	text, err := runtimeConfig(img)
	must(t, err)
	if want := "image_entrypoint=('/usr/local/bin/kube-ipvs')\n"; !bytes.Contains([]byte(text), []byte(want)) {
		t.Errorf("runtime config %q lacks %q", text, want)
	}
}

// An image of another program (the cluster's pause) has its own entrypoint, no kube-ipvs
// arguments, and its archive is named after the repository's last element.
func TestOtherImageEntrypoint(t *testing.T) {
	r := recipe{name: "registry.k8s.io/pause", version: "3.10.1", revision: "abc", created: epoch,
		roots: map[string]string{"linux/amd64": tree(t, "pause")}, entrypoint: []string{"/pause"}}
	b, err := build(r, platforms[:1], t.TempDir())
	must(t, err)
	out := t.TempDir()
	must(t, b.write(r, out))
	if _, err := os.Stat(filepath.Join(out, "pause-amd64.tar")); err != nil {
		t.Error(err)
	}
	cf, err := b.images[0].ConfigFile()
	must(t, err)
	if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/pause" || len(cf.Config.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [/pause] and none", cf.Config.Entrypoint, cf.Config.Cmd)
	}
}

// A cmd without an entrypoint gives an image that runs its cmd, as busybox's runs sh.
func TestCmdWithoutEntrypoint(t *testing.T) {
	r := recipe{name: "registry.k8s.io/e2e-test-images/busybox", version: "1.37.0-2", revision: "abc",
		created: epoch, roots: map[string]string{"linux/amd64": tree(t, "busybox")}, cmd: []string{"sh"}}
	b, err := build(r, platforms[:1], t.TempDir())
	must(t, err)
	cf, err := b.images[0].ConfigFile()
	must(t, err)
	if len(cf.Config.Entrypoint) != 0 || len(cf.Config.Cmd) != 1 || cf.Config.Cmd[0] != "sh" {
		t.Errorf("entrypoint %q cmd %q, want none and [sh]", cf.Config.Entrypoint, cf.Config.Cmd)
	}
}
