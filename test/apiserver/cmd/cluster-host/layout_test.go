package main

import (
	"strings"
	"testing"
)

func TestParseNodes(t *testing.T) {
	for _, tc := range []struct {
		in      string
		max     int
		want    int
		wantErr string
	}{
		{"", 4096, 1, ""},
		{"1", 4096, 1, ""},
		{"3", 8192, 3, ""},
		{"0", 8192, 0, "want a number of nodes, 1 or more"},
		{"-2", 8192, 0, "want a number of nodes, 1 or more"},
		{"three", 8192, 0, "want a number of nodes, 1 or more"},
		{"3", 8191, 0, "NODES=3 needs 8192 MiB of guest memory (2048 MiB + 2048 MiB a node); this machine allows 8191 MiB"},
		{"101", 1 << 30, 0, "room for 100 nodes"},
	} {
		got, err := parseNodes(tc.in, 2048, tc.max)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseNodes(%q, %d) = %d, %v; want an error with %q", tc.in, tc.max, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseNodes(%q, %d) = %d, %v; want %d", tc.in, tc.max, got, err, tc.want)
		}
	}
}

func TestLayoutNamesAddressesAndZones(t *testing.T) {
	nodes := layout(4)
	want := []clusterNode{
		{name: "kipvs-node-1", ip: "172.18.0.11", zone: "zone-a"},
		{name: "kipvs-node-2", ip: "172.18.0.12", zone: "zone-b"},
		{name: "kipvs-node-3", ip: "172.18.0.13", zone: "zone-c"},
		{name: "kipvs-node-4", ip: "172.18.0.14", zone: "zone-a"},
	}
	for i := range want {
		if nodes[i].name != want[i].name || nodes[i].ip != want[i].ip || nodes[i].zone != want[i].zone {
			t.Errorf("node %d: %+v, want %+v", i, nodes[i], want[i])
		}
	}
}

// make conformance's default NODE_MEM: 4096 MiB a node where the guest's limit allows it, less
// for six nodes on a 24 GiB machine (17961 MiB for the guest), never less than 2048.
func TestNodeMemFor(t *testing.T) {
	for _, tc := range []struct {
		n, max  int
		want    int
		wantErr string
	}{
		{1, 17961, 4096, ""},
		{3, 17961, 4096, ""},
		{6, 17961, 2560, ""}, // 2048 + 6*2560 = 17408; 6*2816 would be 18944
		{6, 2048 + 6*2304, 2304, ""},
		{6, 2048 + 6*2304 - 1, 2048, ""},
		{6, 2048 + 6*2048, 2048, ""},
		{6, 2048 + 6*2048 - 1, 0, "NODES=6 needs 14336 MiB of guest memory"},
		{1, 1 << 20, 4096, ""},
	} {
		got, err := nodeMemFor(tc.n, conformanceNodeMemMiB, tc.max)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("nodeMemFor(%d, %d) = %d, %v; want an error with %q", tc.n, tc.max, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("nodeMemFor(%d, %d) = %d, %v; want %d", tc.n, tc.max, got, err, tc.want)
		}
		if err == nil && (got%256 != 0 || guestMemMiB(tc.n, got) > tc.max) {
			t.Errorf("nodeMemFor(%d, %d) = %d: not a multiple of 256, or over the limit", tc.n, tc.max, got)
		}
	}
}
