package oplog

import (
	"slices"
	"testing"
)

func TestTakeOpsReturnsRecordedLinesInOrderAndClears(t *testing.T) {
	var l Log
	l.Record("add a")
	l.Record("del b", "  detail")
	if got, want := l.TakeOps(), []string{"add a", "del b", "  detail"}; !slices.Equal(got, want) {
		t.Fatalf("TakeOps = %q, want %q", got, want)
	}
	if got := l.TakeOps(); len(got) != 0 {
		t.Fatalf("second TakeOps = %q, want empty", got)
	}
}
