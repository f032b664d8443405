package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// --logging-format=json writes kube-proxy's JSON lines: ts in milliseconds, caller, msg, v
// on info lines (4 on debug ones), none on errors, whose err comes last.
func TestJSONLogLinesAreKubeProxys(t *testing.T) {
	var buf bytes.Buffer
	h := newKlogJSON(&buf, slog.LevelDebug)
	h.now = func() time.Time { return time.UnixMilli(1765000000123).Add(456 * time.Microsecond) }
	log := slog.New(h).With("node", "n1")
	log.Info("sync done", "took", 1500*time.Millisecond, "writes", 3)
	log.Debug("detail", "vs", "10.0.0.1:80 <tcp>")
	log.Error("sync failed", "err", errors.New("boom"), "service", "a/b")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	want := []string{
		`{"ts":1765000000123.456,"caller":"kube-ipvs/logjson_test.go:20","msg":"sync done","v":0,"node":"n1","took":"1.5s","writes":3}`,
		`{"ts":1765000000123.456,"caller":"kube-ipvs/logjson_test.go:21","msg":"detail","v":4,"node":"n1","vs":"10.0.0.1:80 <tcp>"}`,
		`{"ts":1765000000123.456,"caller":"kube-ipvs/logjson_test.go:22","msg":"sync failed","node":"n1","service":"a/b","err":"boom"}`,
	}
	for i, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("line %d is not JSON: %v\n%s", i, err, l)
		}
		if l != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, l, want[i])
		}
	}

	buf.Reset()
	slog.New(newKlogJSON(&buf, slog.LevelInfo)).Debug("hidden")
	if buf.Len() != 0 {
		t.Errorf("a debug line at info level: %s", buf.String())
	}
}
