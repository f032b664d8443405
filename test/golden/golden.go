// Package golden compares what a test rendered with a reviewed file under the package's
// testdata/ folder, and rewrites the file instead when the test runs with -update:
//
//	go test ./firewall -update   # then review the diff of firewall/testdata before committing
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// Check fails the test when got differs from testdata/name (or when the file is missing),
// printing got; with -update it writes got to the file instead.
func Check(t testing.TB, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update in this package creates it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update in this package rewrites it, after review):\n--- got ---\n%s", path, got)
	}
}
