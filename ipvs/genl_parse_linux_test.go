package ipvs

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/nlcodec"
)

// A repair cycle parses every real server of every virtual server it reads back (700,000
// at 50,000 Services): parsing one must allocate nothing, or the collector runs while
// changes wait (each attribute read allocated once, 120 MB per two cycles at 50,000).
func TestParseDestAllocatesNothing(t *testing.T) {
	// What the kernel lists: the attributes written, then the family and the connection
	// counts, each in a nest of its own (parseDest walks every nest of attrCmdDest).
	nest := func(b []byte, add func([]byte) []byte) []byte {
		b, n := nlcodec.BeginNest(b, attrCmdDest)
		return nlcodec.EndNest(add(b), n)
	}
	attrs := appendDest(nil, rs("10.244.1.7:8080"), 3, true)
	attrs = nest(attrs, func(b []byte) []byte { return nlcodec.AppendU16(b, attrDestAF, unix.AF_INET) })
	attrs = nest(attrs, func(b []byte) []byte { return nlcodec.AppendU32(b, attrDestActive, 4) })
	attrs = nest(attrs, func(b []byte) []byte { return nlcodec.AppendU32(b, attrDestInactive, 5) })

	var d listedDest
	var err error
	allocs := testing.AllocsPerRun(100, func() { d, err = parseDest(attrs, unix.AF_INET) })
	if err != nil {
		t.Fatal(err)
	}
	if d.rs != rs("10.244.1.7:8080") || d.weight != 3 || d.conns != 9 {
		t.Fatalf("parsed %+v, want 10.244.1.7:8080 weight 3, 9 connections", d)
	}
	if allocs != 0 {
		t.Errorf("%v allocations per real server parsed, want 0", allocs)
	}
}
