package ipvsmode

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/kube-ipvs/kube-ipvs/ipvs"
)

// The IPVS handover file (--handover-file): a proxy that stops cleanly writes what it had
// applied to IPVS, and its successor's first repair takes the real servers of unchanged
// virtual servers from it instead of reading every one back (see ipvs/handover.go for what
// that trusts). The file names the kernel boot and the network namespace it was written in,
// and is used only in the same ones: a reboot or another namespace has another IPVS table.
// The successor removes it as it reads it, so a proxy that later dies without writing one
// leaves none, and its successor reads the kernel whole.

// handoverHeader starts the file: the boot's and the namespace's identities, one line each.
const handoverHeader = "kube-ipvs handover\n"

// SaveHandover writes the handover to path, through a temporary file renamed into place,
// so that a successor never reads half of one. Call it once the sync loop stopped.
func (d *Dataplane) SaveHandover(path string) (int, error) {
	id, err := handoverIdentity()
	if err != nil {
		return 0, err
	}
	vses := d.p.IPVS.Handover()
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return 0, fmt.Errorf("write the handover: %w", err)
	}
	defer os.Remove(tmp.Name()) // once renamed, a no-op
	w := bufio.NewWriter(tmp)
	_, err = w.WriteString(handoverHeader + id)
	if err == nil {
		err = ipvs.WriteHandover(w, vses)
	}
	if err == nil {
		err = w.Flush()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return 0, fmt.Errorf("write the handover %s: %w", path, err)
	}
	return len(vses), nil
}

// LoadHandover reads the handover at path and removes it. One written on this boot in this
// network namespace goes to the IPVS reconciler for the first repair; it returns how many
// virtual servers it held. No file is no error (0, nil); one from another boot or
// namespace, or that cannot be read, is dropped with an error that says why.
func (d *Dataplane) LoadHandover(path string) (int, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the handover: %w", err)
	}
	defer f.Close()
	if err := os.Remove(path); err != nil {
		return 0, fmt.Errorf("remove the handover %s (not used, lest a later start take it again): %w", path, err)
	}
	id, err := handoverIdentity()
	if err != nil {
		return 0, err
	}
	r := bufio.NewReader(f)
	header := make([]byte, len(handoverHeader)+len(id))
	if _, err := io.ReadFull(r, header); err != nil || string(header[:len(handoverHeader)]) != handoverHeader {
		return 0, fmt.Errorf("the handover %s is not one", path)
	}
	if got := string(header[len(handoverHeader):]); got != id {
		return 0, fmt.Errorf("the handover %s was written on another boot or in another network namespace (%q, here %q): not used", path, strings.TrimSpace(got), strings.TrimSpace(id))
	}
	vses, err := ipvs.ReadHandover(r)
	if err != nil {
		return 0, fmt.Errorf("the handover %s: %w", path, err)
	}
	d.p.IPVS.TakeHandover(vses)
	return len(vses), nil
}

// handoverIdentity is the kernel's boot id and this process's network namespace (device
// and inode of /proc/self/ns/net), one line each. The proxy's IPVS sockets are opened in
// the process's namespace (ipvsmode.New).
func handoverIdentity() (string, error) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("handover: the boot id: %w", err)
	}
	fi, err := os.Stat("/proc/self/ns/net")
	if err != nil {
		return "", fmt.Errorf("handover: the network namespace: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", errors.New("handover: the network namespace has no inode")
	}
	return fmt.Sprintf("boot %s\nnetns %d:%d\n", strings.TrimSpace(string(boot)), st.Dev, st.Ino), nil
}
