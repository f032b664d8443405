package main

import (
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// report prints the index's digest and, per platform, the image's digest and its size as
// pulled (compressed layers, config and manifest) and as unpacked (the layer tar).
func (b *built) report(w io.Writer, r recipe) error {
	d, err := b.index.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "image %s:%s index %s\n", r.name, r.version, d)
	for i, img := range b.images {
		digest, compressed, uncompressed, err := sizes(img)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  %-12s %s  %.1f MiB compressed, %.1f MiB uncompressed\n",
			b.platforms[i], digest, mib(compressed), mib(uncompressed))
	}
	return nil
}

func sizes(img v1.Image) (digest v1.Hash, compressed, uncompressed int64, err error) {
	if digest, err = img.Digest(); err != nil {
		return
	}
	m, err := img.Manifest()
	if err != nil {
		return
	}
	raw, err := img.RawManifest()
	if err != nil {
		return
	}
	compressed = m.Config.Size + int64(len(raw))
	for _, l := range m.Layers {
		compressed += l.Size
	}
	layers, err := img.Layers()
	if err != nil {
		return
	}
	for _, l := range layers {
		rc, e := l.Uncompressed()
		if e != nil {
			return digest, 0, 0, e
		}
		n, e := io.Copy(io.Discard, rc)
		rc.Close()
		if e != nil {
			return digest, 0, 0, e
		}
		uncompressed += n
	}
	return
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
