package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// The cluster's network (hack/cluster/node.sh): the guest's root namespace stands for the
// network. It reaches QEMU (and through it the host) as routerIP and is the nodes' gateway
// on their L2 segment, where the nodes and the "outside" host live.
const (
	routerIP  = "10.0.2.15"     // the guest on QEMU's network: CONNECT proxy and agent
	segment   = "172.18.0.0/24" // the nodes' L2 segment (the bridge kipvs-net)
	outsideIP = "172.18.0.200"  // another host on the segment, for requests from outside
)

// zones are the topology.kubernetes.io/zone labels, given to the nodes in turn.
var zones = []string{"zone-a", "zone-b", "zone-c"}

// Guest memory: what the network and each node need (MiB). A node holds its containerd's
// images (content and unpacked snapshots, on tmpfs), its daemons and its Pods; make
// conformance gives each node more (NODE_MEM) for the suite's images and Pods.
const (
	baseMemMiB        = 2048
	defaultNodeMemMiB = 2048
	// make conformance's nodes get up to this much when NODE_MEM is not set (nodeMemFor).
	conformanceNodeMemMiB = 4096
)

// clusterNode is one node: its name, its address on the segment and its zone; podCIDR once
// kube-controller-manager has given it one.
type clusterNode struct {
	name, ip, zone string
	podCIDR        *net.IPNet
}

// layout is the cluster of n nodes: kipvs-node-1..n at 172.18.0.11.., in zone-a, zone-b,
// zone-c, zone-a, ...
func layout(n int) []clusterNode {
	nodes := make([]clusterNode, n)
	for i := range nodes {
		nodes[i] = clusterNode{
			name: "kipvs-node-" + strconv.Itoa(i+1),
			ip:   fmt.Sprintf("172.18.0.%d", 11+i),
			zone: zones[i%len(zones)],
		}
	}
	return nodes
}

// parseNodes reads --nodes: a number of nodes the guest's memory can hold (maxMiB), each
// node taking nodeMiB.
func parseNodes(s string, nodeMiB, maxMiB int) (int, error) {
	if s == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("NODES=%q: want a number of nodes, 1 or more", s)
	}
	if n > 100 {
		return 0, fmt.Errorf("NODES=%d: the nodes' segment has room for 100 nodes", n)
	}
	if need := guestMemMiB(n, nodeMiB); need > maxMiB {
		return 0, fmt.Errorf("NODES=%d needs %d MiB of guest memory (%d MiB + %d MiB a node); this machine allows %d MiB (GUEST_MEM_MAX)",
			n, need, baseMemMiB, nodeMiB, maxMiB)
	}
	return n, nil
}

func guestMemMiB(n, nodeMiB int) int { return baseMemMiB + n*nodeMiB }

// nodeMemFor is the most memory each of n nodes can get (MiB), from defaultNodeMemMiB up to
// upMiB in steps of 256, with the guest within maxMiB: make conformance's default NODE_MEM, so
// that six nodes fit a machine where six nodes of 4096 MiB would not.
func nodeMemFor(n, upMiB, maxMiB int) (int, error) {
	if need := guestMemMiB(n, defaultNodeMemMiB); need > maxMiB {
		return 0, fmt.Errorf("NODES=%d needs %d MiB of guest memory (%d MiB + %d MiB a node at the least); this machine allows %d MiB (GUEST_MEM_MAX)",
			n, need, baseMemMiB, defaultNodeMemMiB, maxMiB)
	}
	mib := defaultNodeMemMiB
	for mib+256 <= upMiB && guestMemMiB(n, mib+256) <= maxMiB {
		mib += 256
	}
	return mib, nil
}

// nodeMem is what one node gets (MiB): NODE_MEM, or 2048.
func nodeMem() (int, error) {
	v := os.Getenv("NODE_MEM")
	if v == "" {
		return defaultNodeMemMiB, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 512 {
		return 0, fmt.Errorf("NODE_MEM=%q: want MiB, 512 or more", v)
	}
	return n, nil
}

// guestMemMax is the most memory the guest may have (MiB): GUEST_MEM_MAX, or what this
// machine has less 6 GiB for the control plane, e2e.test and the build caches beside it.
func guestMemMax() (int, error) {
	if v := os.Getenv("GUEST_MEM_MAX"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("GUEST_MEM_MAX=%q: want MiB", v)
		}
		return n, nil
	}
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kib, err := strconv.Atoi(f[1])
			if err != nil {
				break
			}
			return kib/1024 - 6144, nil
		}
	}
	return 0, fmt.Errorf("/proc/meminfo: no MemTotal")
}
