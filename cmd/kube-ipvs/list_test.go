package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestListAndExplainUsage: usage errors exit 2 before touching the kernel, and explain
// without a proxy exits 3 naming the socket.
func TestListAndExplainUsage(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	cases := []struct {
		args     []string
		wantCode int
		wantErr  string
	}{
		{[]string{"list", "-o", "yaml"}, 2, `-o "yaml"`},
		{[]string{"list", "--stats", "--rate"}, 2, "choose one"},
		{[]string{"list", "--vip", "10.0.0"}, 2, "not an IP address"},
		{[]string{"list", "extra"}, 2, "unexpected arguments"},
		{[]string{"explain"}, 2, "NAMESPACE/NAME"},
		{[]string{"explain", "web"}, 2, "NAMESPACE/NAME"},
		{[]string{"explain", "demo/web", "--state-socket", sock}, 3, sock},
	}
	for _, tc := range cases {
		var out, errb bytes.Buffer
		if code := dispatch(tc.args, &out, &errb); code != tc.wantCode || !strings.Contains(errb.String(), tc.wantErr) {
			t.Errorf("%q: exit %d stderr %q, want %d and %q", tc.args, code, errb.String(), tc.wantCode, tc.wantErr)
		}
	}
}
