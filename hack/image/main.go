// Command image builds kube-ipvs's OCI image from prepared root file systems, without a
// container engine, and unpacks it again (for the guest proof). hack/image/build.sh drives
// it; it is a module of its own so the product's go.mod never holds an image library.
//
//	image build --root linux/amd64=DIR --root linux/arm64=DIR --version V --revision R --created UNIX --out DIR
//	      [--name NAME] [--entrypoint A,B] [--cmd C,D] [--created-by TEXT]
//	image unpack --layout DIR --platform linux/amd64 --root DIR [--config FILE]
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: image build|unpack [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = buildCommand(os.Args[2:])
	case "unpack":
		err = unpackCommand(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want build or unpack", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// rootsFlag collects --root PLATFORM=DIR in the order given.
type rootsFlag struct {
	order []string
	dirs  map[string]string
}

func (f *rootsFlag) String() string { return strings.Join(f.order, ",") }

func (f *rootsFlag) Set(v string) error {
	platform, dir, ok := strings.Cut(v, "=")
	if !ok || platform == "" || dir == "" {
		return fmt.Errorf("want PLATFORM=DIR, got %q", v)
	}
	if f.dirs == nil {
		f.dirs = map[string]string{}
	}
	if _, dup := f.dirs[platform]; dup {
		return fmt.Errorf("platform %s given twice", platform)
	}
	f.order = append(f.order, platform)
	f.dirs[platform] = dir
	return nil
}

func buildCommand(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	var roots rootsFlag
	fs.Var(&roots, "root", "PLATFORM=DIR: a platform's root file system (repeat per platform)")
	nameFlag := fs.String("name", "kube-ipvs", "the image's repository name")
	version := fs.String("version", "", "the tag and version label")
	revision := fs.String("revision", "", "the source commit (revision label)")
	created := fs.Int64("created", 0, "the creation time in Unix seconds (every file's time too)")
	out := fs.String("out", "", "output folder: oci/ (image layout) and NAME-ARCH.tar (docker load)")
	ep := fs.String("entrypoint", "", "the entrypoint, words separated by commas (default kube-ipvs's)")
	cmd := fs.String("cmd", "", "the default arguments, separated by commas (default kube-ipvs's; none with --entrypoint; alone, the command with no entrypoint)")
	createdBy := fs.String("created-by", "", "the layer's history line (default kube-ipvs's)")
	fs.Parse(args)
	if len(roots.order) == 0 || *version == "" || *revision == "" || *out == "" {
		return fmt.Errorf("build needs --root, --version, --revision and --out")
	}
	r := recipe{name: *nameFlag, version: *version, revision: *revision,
		created: time.Unix(*created, 0).UTC(), roots: roots.dirs,
		entrypoint: words(*ep), cmd: words(*cmd), createdBy: *createdBy}
	work, err := os.MkdirTemp(*out, ".layers.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	b, err := build(r, roots.order, work)
	if err != nil {
		return err
	}
	if err := b.write(r, *out); err != nil {
		return err
	}
	return b.report(os.Stdout, r)
}

// words splits a comma-separated list; the empty string is no words.
func words(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func unpackCommand(args []string) error {
	fs := flag.NewFlagSet("unpack", flag.ExitOnError)
	dir := fs.String("layout", "", "the OCI image layout")
	platform := fs.String("platform", "linux/amd64", "which image of the index")
	root := fs.String("root", "", "empty folder to unpack the root file system into")
	config := fs.String("config", "", "file to write the image's entrypoint, cmd, env and user into (bash)")
	fs.Parse(args)
	if *dir == "" || *root == "" {
		return fmt.Errorf("unpack needs --layout and --root")
	}
	img, err := imageFromLayout(*dir, *platform)
	if err != nil {
		return err
	}
	if err := unpack(img, *root); err != nil {
		return err
	}
	if *config == "" {
		return nil
	}
	text, err := runtimeConfig(img)
	if err != nil {
		return err
	}
	return os.WriteFile(*config, []byte(text), 0o644)
}
