package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// defaultLockFile is the file through which `kube-ipvs run` and `kube-ipvs cleanup` learn of
// each other on a node. Every run holds a shared flock on it for as long as it lives (so
// two proxies, a misconfiguration but not this lock's business, do not block each other);
// cleanup takes an exclusive one, which it cannot get while any run holds the file. The
// kernel drops a process's locks when it exits, however it exits, so a crashed proxy never
// leaves the node locked. Pods share it through a hostPath mount (deploy/).
const defaultLockFile = "/run/kube-ipvs.lock"

// lockPoll is how often run tries again for its lock while a cleanup holds it.
const lockPoll = 100 * time.Millisecond

// errProxyRunning is the error of a cleanup that finds a proxy running.
var errProxyRunning = errors.New("a kube-ipvs run is active on this node")

func openLock(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lock file %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock file %s: %w", path, err)
	}
	return f, nil
}

// holdRunLock takes run's shared lock on path and keeps it until release is called (or the
// process ends). While a cleanup holds the file it waits, saying so, until the cleanup ends
// or ctx is done. An empty path takes no lock.
func holdRunLock(ctx context.Context, path string, log *slog.Logger) (release func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := openLock(path)
	if err != nil {
		return nil, err
	}
	for waiting := false; ; waiting = true {
		err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock file %s: %w", path, err)
		}
		if !waiting {
			log.Warn("kube-ipvs cleanup is running on this node; waiting for it to finish", "lock_file", path)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(lockPoll):
		}
	}
}

// takeCleanupLock takes cleanup's exclusive lock on path, or fails with errProxyRunning
// while a run holds the file.
func takeCleanupLock(path string) (release func(), err error) {
	f, err := openLock(path)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case err == nil:
		return func() { f.Close() }, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		f.Close()
		return nil, fmt.Errorf("%w (it holds %s)", errProxyRunning, path)
	}
	f.Close()
	return nil, fmt.Errorf("lock file %s: %w", path, err)
}
