package introspect

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestServeAndFetch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "state.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v, want 0600", fi.Mode(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	want := fixtureDoc(t)
	go func() { done <- Serve(ctx, l, func() Document { return want }) }()
	got, err := Fetch(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Node != "node-a" || len(got.Services) != 1 || got.Services[0].Endpoints[1].Why != want.Services[0].Endpoints[1].Why {
		t.Errorf("document changed on the way: %+v", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("socket left behind after the server stopped: %v", err)
	}

	// A second Listen replaces a stale socket; a regular file is never replaced.
	l2, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	l2.(*net.UnixListener).SetUnlinkOnClose(false)
	l2.Close()
	if l3, err := Listen(path); err != nil {
		t.Errorf("stale socket not replaced: %v", err)
	} else {
		l3.Close()
	}
	file := filepath.Join(t.TempDir(), "not-a-socket")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("a regular file was replaced, or the error does not say why: %v", err)
	}
}

// TestFetchErrorsSayWhatFailed: unreachable, malformed and foreign documents each give an
// error that names the socket and the failure.
func TestFetchErrorsSayWhatFailed(t *testing.T) {
	dir := t.TempDir()
	if _, err := Fetch(context.Background(), filepath.Join(dir, "absent.sock")); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("absent socket: %v", err)
	}
	serveRaw := func(name, body string) string {
		path := filepath.Join(dir, name)
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) }),
			ReadHeaderTimeout: time.Second}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { srv.Close() })
		return path
	}
	for _, tc := range []struct{ name, body, want string }{
		{"malformed.sock", `{"version": "kube-ipvs.io/state/v1", "services": [`, "malformed"},
		{"other.sock", `{"version": "v0"}`, `version "v0"`},
	} {
		_, err := Fetch(context.Background(), serveRaw(tc.name, tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s: error %v, want one naming the socket and %q", tc.name, err, tc.want)
		}
	}
}
