package main

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// writeTree writes the folder root as a tar stream that depends only on the files' names,
// contents, permissions and link targets: entries in lexical order (filepath.WalkDir's),
// every time set to mtime, owner 0:0 with no user or group names. So the same tree gives the
// same bytes, hence the same layer digest, whoever builds it and whenever.
func writeTree(w io.Writer, root string, mtime time.Time) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := treeHeader(path, filepath.ToSlash(rel), info, mtime)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		return copyFile(tw, path)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// treeHeader is the tar header of one file of the tree; only directories, regular files and
// symbolic links can be in an image built from unpacked packages.
func treeHeader(path, name string, info fs.FileInfo, mtime time.Time) (*tar.Header, error) {
	hdr := &tar.Header{
		Name:    name,
		Mode:    int64(info.Mode().Perm()),
		ModTime: mtime,
		Format:  tar.FormatPAX,
	}
	if info.Mode()&fs.ModeSetuid != 0 {
		hdr.Mode |= 0o4000
	}
	if info.Mode()&fs.ModeSetgid != 0 {
		hdr.Mode |= 0o2000
	}
	if info.Mode()&fs.ModeSticky != 0 {
		hdr.Mode |= 0o1000
	}
	switch {
	case info.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
	case info.Mode().IsRegular():
		hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return nil, err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
	default:
		return nil, fmt.Errorf("%s: %v is neither a file, a folder nor a symbolic link", path, info.Mode().Type())
	}
	return hdr, nil
}

func copyFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
