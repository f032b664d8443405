package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// imageFromLayout finds the platform's image in the layout's (only) image index.
func imageFromLayout(dir, platform string) (v1.Image, error) {
	want, err := v1.ParsePlatform(platform)
	if err != nil {
		return nil, err
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("%s: index.json names %d entries, want the one image index", dir, len(m.Manifests))
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.OS == want.OS && d.Platform.Architecture == want.Architecture {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("%s: no image for %s", dir, platform)
}

// unpack writes the image's flattened root file system into the empty folder root, as a
// container runtime would see it.
func unpack(img v1.Image, root string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := unpackEntry(tr, hdr, root); err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
	}
}

func unpackEntry(r io.Reader, hdr *tar.Header, root string) error {
	rel := filepath.Clean("/" + hdr.Name)
	if rel == "/" {
		return nil
	}
	path := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	mode := os.FileMode(hdr.Mode).Perm() | modeBits(hdr.Mode)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := os.MkdirAll(path, mode); err != nil {
			return err
		}
		return os.Chmod(path, mode)
	case tar.TypeReg:
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		return os.Chmod(path, mode) // the umask must not narrow it
	case tar.TypeSymlink:
		return os.Symlink(hdr.Linkname, path)
	case tar.TypeLink:
		return os.Link(filepath.Join(root, filepath.Clean("/"+hdr.Linkname)), path)
	}
	return fmt.Errorf("unexpected tar entry type %q", hdr.Typeflag)
}

func modeBits(m int64) os.FileMode {
	var b os.FileMode
	if m&0o4000 != 0 {
		b |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		b |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		b |= os.ModeSticky
	}
	return b
}

// runtimeConfig is the image's entrypoint, command, environment and user as bash
// assignments, for scripts that start a container's process by hand (the guest proof).
func runtimeConfig(img v1.Image) (string, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	c := cf.Config
	var b strings.Builder
	fmt.Fprintf(&b, "image_entrypoint=(%s)\n", shellWords(c.Entrypoint))
	fmt.Fprintf(&b, "image_cmd=(%s)\n", shellWords(c.Cmd))
	fmt.Fprintf(&b, "image_env=(%s)\n", shellWords(c.Env))
	fmt.Fprintf(&b, "image_user=%s\n", shellQuote(c.User))
	return b.String(), nil
}

func shellWords(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = shellQuote(w)
	}
	return strings.Join(q, " ")
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
