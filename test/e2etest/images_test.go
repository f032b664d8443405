package e2etest

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// The files each image must hold: the programs the [sig-network] specs run in it (sh -c
// command lines with nc, curl, wget, dig, getent, seq, timeout, ss ...) and what the image is
// for. Paths as in the layer, under usr/ (/bin is a link to usr/bin).
var wantFiles = map[string][]string{
	"agnhost": {"agnhost", "agnhost-2", "coredns", "localhost.crt", "localhost.key", "uploads/",
		"usr/bin/sh", "usr/bin/bash", "usr/bin/nc", "usr/bin/curl", "usr/bin/wget", "usr/bin/dig",
		"usr/bin/nslookup", "usr/bin/getent", "usr/bin/seq", "usr/bin/timeout", "usr/bin/sleep",
		"usr/bin/cat", "usr/bin/echo", "usr/bin/test", "usr/bin/grep", "usr/bin/tail",
		"usr/bin/tr", "usr/bin/awk", "usr/bin/ss", "usr/bin/ip", "usr/bin/hostname", "usr/bin/iperf"},
	"busybox": {"usr/bin/busybox", "usr/bin/sh", "usr/bin/sleep", "usr/bin/nc", "usr/bin/wget",
		"usr/bin/echo", "usr/bin/cat"},
	"pause":                  {"pause"},
	"nginx":                  {"usr/sbin/nginx", "etc/nginx/nginx.conf", "etc/nginx/conf.d/default.conf", "usr/bin/sh"},
	"glibc-dns-testing":      {"usr/bin/sh", "usr/bin/dig", "usr/bin/getent", "usr/bin/seq", "usr/bin/sleep"},
	"distroless-iptables":    {"usr/bin/sh", "usr/bin/sleep", "usr/bin/cat", "usr/bin/test", "usr/bin/grep", "usr/bin/which", "usr/sbin/conntrack", "usr/sbin/iptables"},
	"regression-issue-74839": {"regression-issue-74839"},
}

// archiveDir is where hack/conformance/build.sh put the archives (it runs this test with
// CONFORMANCE_IMAGES set); without it the test has nothing to look at.
func archiveDir(t *testing.T) string {
	dir := os.Getenv("CONFORMANCE_IMAGES")
	if dir == "" {
		t.Skip("CONFORMANCE_IMAGES is not set (hack/conformance/build.sh sets it)")
	}
	return dir
}

// Each archive is tagged with exactly the reference the suite's manifest gives its image, so
// that the node has it under the name the suite's pods ask for and nothing is pulled.
func TestArchiveNamesMatchManifest(t *testing.T) {
	dir := archiveDir(t)
	for _, name := range Names() {
		want, err := Ref(name)
		if err != nil {
			t.Fatal(err)
		}
		m, err := archiveManifest(filepath.Join(dir, name+"-amd64.tar"))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(m) != 1 || len(m[0].RepoTags) != 1 || m[0].RepoTags[0] != want {
			t.Errorf("%s-amd64.tar is tagged %v, manifest.go says %s", name, tags(m), want)
		}
	}
}

// Each image holds the programs its specs run.
func TestImagesHoldTheirTools(t *testing.T) {
	dir := archiveDir(t)
	for _, name := range Names() {
		files, err := layerFiles(filepath.Join(dir, name+"-amd64.tar"))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for _, f := range wantFiles[name] {
			if !files.exists(f) {
				t.Errorf("%s lacks %s", name, f)
			}
		}
	}
}

func TestEveryImageHasItsChecks(t *testing.T) {
	for _, name := range Names() {
		if len(wantFiles[name]) == 0 {
			t.Errorf("no files to check for %s", name)
		}
	}
}

// archiveEntry is one image of a `docker load` archive's manifest.json.
type archiveEntry struct {
	Config   string
	RepoTags []string
	Layers   []string
}

func tags(m []archiveEntry) []string {
	var out []string
	for _, e := range m {
		out = append(out, e.RepoTags...)
	}
	return out
}

func archiveManifest(file string) ([]archiveEntry, error) {
	var m []archiveEntry
	err := eachEntry(file, func(hdr *tar.Header, r io.Reader) (bool, error) {
		if hdr.Name != "manifest.json" {
			return false, nil
		}
		return true, json.NewDecoder(r).Decode(&m)
	})
	if err == nil && m == nil {
		err = errors.New("no manifest.json")
	}
	return m, err
}

// eachEntry calls fn on the archive's entries until it says done.
func eachEntry(file string, fn func(*tar.Header, io.Reader) (bool, error)) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if done, err := fn(hdr, tr); done || err != nil {
			return err
		}
	}
}

// tree is an image's file system: each path with its link target ("" for files, "/" for
// folders).
type tree map[string]string

// layerFiles reads the single layer of the archive's image.
func layerFiles(file string) (tree, error) {
	m, err := archiveManifest(file)
	if err != nil {
		return nil, err
	}
	if len(m) != 1 || len(m[0].Layers) != 1 {
		return nil, fmt.Errorf("want one image of one layer, got %+v", m)
	}
	files := tree{}
	err = eachEntry(file, func(hdr *tar.Header, r io.Reader) (bool, error) {
		if hdr.Name != m[0].Layers[0] {
			return false, nil
		}
		zr, err := gzip.NewReader(r)
		if err != nil {
			return true, err
		}
		lr := tar.NewReader(zr)
		for {
			h, err := lr.Next()
			if err == io.EOF {
				return true, nil
			}
			if err != nil {
				return true, err
			}
			switch h.Typeflag {
			case tar.TypeDir:
				files[strings.TrimSuffix(h.Name, "/")] = "/"
			case tar.TypeSymlink:
				files[h.Name] = h.Linkname
			default:
				files[h.Name] = ""
			}
		}
	})
	return files, err
}

// exists says whether p (a trailing / asks for a folder) is in the tree, following symbolic
// links (their last element; the layer's folders are real but for /bin, /lib and /sbin).
func (t tree) exists(p string) bool {
	dir := strings.HasSuffix(p, "/")
	p = strings.TrimSuffix(p, "/")
	for range 10 {
		target, ok := t[p]
		switch {
		case !ok:
			return false
		case target == "/":
			return true
		case target == "":
			return !dir
		case strings.HasPrefix(target, "/"):
			p = strings.TrimPrefix(path.Clean(target), "/")
		default:
			p = path.Join(path.Dir(p), target)
		}
	}
	return false
}
