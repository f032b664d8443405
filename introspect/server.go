package introspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Listen opens the unix socket at path for Serve: it makes the folder, replaces a stale
// socket a previous run left (never a file of another kind), and makes the socket
// readable by root only (the document names every pod the node serves).
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("state socket %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("state socket %s: exists and is not a socket; not replacing it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("state socket %s: remove the stale one: %w", path, err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("state socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("state socket %s: %w", path, err)
	}
	return l, nil
}

// Serve answers GET Path on l with the document doc returns, until ctx ends; then it
// closes l and removes the socket file.
func Serve(ctx context.Context, l net.Listener, doc func() Document) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Path, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		if err := enc.Encode(doc()); err != nil {
			// The client sees a cut document and says so; nothing else to do here.
			return
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	err := srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Fetch reads the document from the socket at path. Its errors say which step failed
// (connect, HTTP, decode, version), for list's and explain's error line.
func Fetch(ctx context.Context, path string) (*Document, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://kube-ipvs"+Path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("state socket %s unreachable (is `kube-ipvs run` running with --state-socket %s?): %w", path, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("state socket %s answered %s", path, resp.Status)
	}
	var doc Document
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return nil, fmt.Errorf("state socket %s sent a malformed document: %w", path, err)
	}
	if doc.Version != Version {
		return nil, fmt.Errorf("state socket %s sent a document of version %q, this kube-ipvs reads %q", path, doc.Version, Version)
	}
	return &doc, nil
}
