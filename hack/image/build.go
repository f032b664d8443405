package main

import (
	"compress/gzip"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// recipe is what an image is made of; the same recipe and trees give the same digests.
type recipe struct {
	name     string // repository name, as deploy/kustomization.yaml's images[].name
	version  string // the tag and org.opencontainers.image.version
	revision string // the source's commit, org.opencontainers.image.revision
	created  time.Time
	// roots maps a platform ("linux/amd64") to the folder holding its root file system.
	roots map[string]string
	// The image's run-time settings and the layer's history line; empty means kube-ipvs's own
	// (the defaults below), which `make image` uses. A cmd without an entrypoint is an image
	// that runs its cmd (busybox's sh, hack/conformance).
	entrypoint, cmd []string
	createdBy       string
}

// kube-ipvs's run-time settings; deploy/daemonset.yaml relies on them (it gives args only).
// Other images (the cluster's pause and test server, hack/cluster/images.sh) set their own.
var (
	entrypoint = []string{"/usr/local/bin/kube-ipvs"}
	command    = []string{"run"}
	env        = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	createdBy  = "hack/image (Debian packages of hack/image/packages.txt and kube-ipvs)"
)

// platformImage is one architecture's image: a single layer holding the whole tree.
func platformImage(r recipe, platform, root, work string) (v1.Image, error) {
	p, err := v1.ParsePlatform(platform)
	if err != nil {
		return nil, err
	}
	layerFile := filepath.Join(work, p.Architecture+".tar")
	if err := writeTreeFile(layerFile, root, r.created); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromFile(layerFile, tarball.WithMediaType(types.OCILayer),
		tarball.WithCompressionLevel(gzip.BestCompression))
	if err != nil {
		return nil, err
	}
	ep, cmd, hist := entrypoint, command, createdBy
	if r.entrypoint != nil {
		// An image given its own entrypoint has only the arguments it is given.
		ep, cmd = r.entrypoint, r.cmd
	} else if r.cmd != nil {
		ep, cmd = nil, r.cmd
	}
	if r.createdBy != "" {
		hist = r.createdBy
	}
	cfg := &v1.ConfigFile{
		Architecture: p.Architecture,
		Variant:      p.Variant,
		OS:           p.OS,
		Created:      v1.Time{Time: r.created},
		Config: v1.Config{
			Entrypoint: ep,
			Cmd:        cmd,
			Env:        env,
			// Root, on purpose: the proxy changes the node's network namespace and loads
			// kernel modules (deploy/daemonset.yaml says which capabilities and why).
			User:   "0:0",
			Labels: labels(r),
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
	return mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: r.created},
			CreatedBy: hist,
		},
	})
}

func labels(r recipe) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    r.name,
		"org.opencontainers.image.version":  r.version,
		"org.opencontainers.image.revision": r.revision,
		"org.opencontainers.image.created":  r.created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.source":   "https://github.com/kube-ipvs/kube-ipvs",
	}
}

func writeTreeFile(path, root string, mtime time.Time) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeTree(f, root, mtime); err != nil {
		f.Close()
		return fmt.Errorf("tar of %s: %w", root, err)
	}
	return f.Close()
}

// built is the result of a build: the index and each platform's image, in platform order.
type built struct {
	index     v1.ImageIndex
	platforms []string
	images    []v1.Image
}

// build makes the image index of every platform of r, in the order given.
func build(r recipe, platforms []string, work string) (*built, error) {
	b := &built{index: mutate.IndexMediaType(empty.Index, types.OCIImageIndex), platforms: platforms}
	for _, platform := range platforms {
		img, err := platformImage(r, platform, r.roots[platform], work)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", platform, err)
		}
		p, _ := v1.ParsePlatform(platform)
		b.index = mutate.AppendManifests(b.index, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{MediaType: types.OCIManifestSchema1, Platform: p},
		})
		b.images = append(b.images, img)
	}
	return b, nil
}

// write stores the build as an OCI image layout in out/oci (its index.json naming the index
// by version) and, per platform, a `docker load` archive out/NAME-ARCH.tar.
func (b *built) write(r recipe, out string) error {
	if err := os.RemoveAll(filepath.Join(out, "oci")); err != nil {
		return err
	}
	lp, err := layout.Write(filepath.Join(out, "oci"), empty.Index)
	if err != nil {
		return err
	}
	refName := map[string]string{"org.opencontainers.image.ref.name": r.version}
	if err := lp.AppendIndex(b.index, layout.WithAnnotations(refName)); err != nil {
		return err
	}
	tag, err := name.NewTag(r.name + ":" + r.version)
	if err != nil {
		return err
	}
	for i, img := range b.images {
		p, _ := v1.ParsePlatform(b.platforms[i])
		// The archive is named after the repository's last element (registry.k8s.io/pause
		// gives pause-amd64.tar).
		if err := tarball.WriteToFile(filepath.Join(out, path.Base(r.name)+"-"+p.Architecture+".tar"), tag, img); err != nil {
			return err
		}
	}
	return nil
}
