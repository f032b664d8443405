package golden

import (
	"os"
	"path/filepath"
	"testing"
)

// recorder is a testing.TB that notes failures instead of failing the real test.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true; panic(r) }
func (r *recorder) Fatal(...any)          { r.failed = true; panic(r) }
func (r *recorder) check(name, got string) bool {
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
	}()
	Check(r, name, got)
	return !r.failed
}

func TestCheckComparesWithTestdataAndUpdateRewrites(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "testdata"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	if (&recorder{TB: t}).check("x.txt", "a\n") {
		t.Fatal("a missing golden file passed")
	}
	*update = true
	if !(&recorder{TB: t}).check("x.txt", "a\n") {
		t.Fatal("-update failed to write the file")
	}
	*update = false
	if !(&recorder{TB: t}).check("x.txt", "a\n") {
		t.Fatal("the same text failed against the file -update wrote")
	}
	if (&recorder{TB: t}).check("x.txt", "b\n") {
		t.Fatal("different text passed")
	}
}
