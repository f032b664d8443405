package model

import "testing"

// Every Service port of the node port range gets its own mark, of our layout, never with
// the masquerade (0x4000) or kube-proxy's drop (0x8000) bit; ports without a number or
// beyond the layout get none.
func TestInClusterMark(t *testing.T) {
	seen := map[uint32]string{}
	add := func(what string, m uint32) {
		t.Helper()
		if m == 0 || !IsInClusterMark(m) || m&0xc000 != 0 {
			t.Fatalf("%s: mark %#x is not an in-cluster mark", what, m)
		}
		if other, dup := seen[m]; dup {
			t.Fatalf("%s and %s share mark %#x", what, other, m)
		}
		seen[m] = what
	}
	for port := uint16(30000); port < 30100; port++ {
		for _, p := range []Protocol{TCP, UDP, SCTP} {
			add(p.String()+" nodePort", InClusterMark(port, p, -1))
			for i := 0; i < 4; i++ {
				add(p.String()+" healthCheckNodePort, port index", InClusterMark(port, p, i))
			}
		}
	}
	if m := InClusterMark(65535, SCTP, inClusterIndexes-1); !IsInClusterMark(m) {
		t.Errorf("highest port and index: %#x", m)
	}
	for _, m := range []uint32{InClusterMark(0, TCP, -1), InClusterMark(30000, 0, -1), InClusterMark(30000, TCP, inClusterIndexes)} {
		if m != 0 {
			t.Errorf("mark %#x for a port that cannot have one", m)
		}
	}
	if got := InClusterMark(30101, TCP, -1); got != 30101<<16|0x2001 {
		t.Errorf("TCP nodePort 30101: %#x", got)
	}
}
