package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"
)

// Runs share the lock; a cleanup cannot take it while one holds it, and can once all have
// let go; a run that starts during a cleanup waits for it.
func TestRunAndCleanupLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "kube-ipvs.lock")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	run1, err := holdRunLock(ctx, path, log)
	if err != nil {
		t.Fatal(err)
	}
	run2, err := holdRunLock(ctx, path, log)
	if err != nil {
		t.Fatalf("a second run: %v", err)
	}
	if _, err := takeCleanupLock(path); !errors.Is(err, errProxyRunning) {
		t.Fatalf("cleanup while two runs hold the lock: %v", err)
	}
	run1()
	if _, err := takeCleanupLock(path); !errors.Is(err, errProxyRunning) {
		t.Fatalf("cleanup while one run holds the lock: %v", err)
	}
	run2()
	release, err := takeCleanupLock(path)
	if err != nil {
		t.Fatalf("cleanup with no run: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := holdRunLock(ctx, path, log)
		if err == nil {
			r()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("run did not wait for the cleanup: %v", err)
	case <-time.After(3 * lockPoll):
	}
	release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("run after the cleanup: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run still waits after the cleanup ended")
	}
	short, cancel := context.WithTimeout(ctx, 2*lockPoll)
	defer cancel()
	release, _ = takeCleanupLock(path)
	defer release()
	if _, err := holdRunLock(short, path, log); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a waiting run whose context ends: %v", err)
	}
}
