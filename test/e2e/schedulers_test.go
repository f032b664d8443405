//go:build guest

package e2e

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// loadMix opens conns connections in turn from cli to vip:80, holding every period-th one
// (the first included) and closing the others at once, and waits after each for IPVS's
// counters to show it, so every decision sees the connections before it.
func loadMix(t *testing.T, cli *guestutil.Pod, vip string, held *heldSet, conns, period int) {
	t.Helper()
	for i := 0; i < conns; i++ {
		if i%period == 0 {
			held.hold(t, cli, vip)
		} else if _, err := cli.AskTCP(netip.MustParseAddrPort(vip + ":80")); err != nil {
			t.Fatalf("short connection %d to %s: %v", i, vip, err)
		}
		waitActive(t, vip, len(held.conns))
	}
}

// lc against rr when some connections are long-lived (docs/schedulers.md): one client
// opens 30 connections to each Service and holds every third, so under rr every held one
// lands on the same backend while lc keeps them within one of each other; then a fourth
// backend is added and 8 more are held: rr gives it its quarter (2), lc fills it first.
func TestSchedulerLeastConnectionBalancesHeldConnections(t *testing.T) {
	dir := setupNode(t)
	pods := backends(t, "lc", 40, 4)
	cli := client(t, "lcc", "10.244.49.1")
	const rrVIP, lcVIP = "10.96.140.1", "10.96.140.2"
	set := func(n int) {
		ips := podIPs(pods[:n])
		writeManifests(t, dir, "svc.yaml",
			schedService("rr", rrVIP, "rr", ""), sliceYAML("rr", "rr-1", "TCP", 8080, "", eps(ips...)...),
			schedService("lc", lcVIP, "lc", ""), sliceYAML("lc", "lc-1", "TCP", 8080, "", eps(ips...)...))
	}
	set(3)
	p := startProxy(t, dir)
	eventually(t, schedStart, "both virtual servers with 3 real servers", func() bool {
		return realServers(vsBlock(t, "TCP", rrVIP+":80")) == 3 && realServers(vsBlock(t, "TCP", lcVIP+":80")) == 3
	})

	three, four := podNames(pods[:3]), podNames(pods)
	rr, lc := newHeldSet(t), newHeldSet(t)
	loadMix(t, cli, rrVIP, rr, 30, 3)
	loadMix(t, cli, lcVIP, lc, 30, 3)
	t.Logf("30 connections, every third held, 3 backends: held per backend rr %v (spread %d), lc %v (spread %d)",
		rr.byName, spread(rr.byName, three), lc.byName, spread(lc.byName, three))
	if s := spread(rr.byName, three); s != 10 {
		t.Errorf("rr: held connections per backend %v, spread %d; want all 10 on one backend", rr.byName, s)
	}
	if s := spread(lc.byName, three); s > 1 {
		t.Errorf("lc: held connections per backend %v, spread %d; want at most 1", lc.byName, s)
	}

	set(4)
	p.reload()
	eventually(t, firstSync, "both virtual servers with 4 real servers", func() bool {
		return realServers(vsBlock(t, "TCP", rrVIP+":80")) == 4 && realServers(vsBlock(t, "TCP", lcVIP+":80")) == 4
	})
	newName := pods[3].Name
	loadMix(t, cli, rrVIP, rr, 8, 1)
	loadMix(t, cli, lcVIP, lc, 8, 1)
	t.Logf("a 4th backend, 8 more held: rr %v (spread %d), lc %v (spread %d)",
		rr.byName, spread(rr.byName, four), lc.byName, spread(lc.byName, four))
	if rr.byName[newName] != 2 || spread(rr.byName, four) != 10 {
		t.Errorf("rr after scale-up: %v; want 2 of the 8 on %s and the spread still 10", rr.byName, newName)
	}
	if lc.byName[newName] < 4 || spread(lc.byName, four) > 1 {
		t.Errorf("lc after scale-up: %v; want at least 4 of the 8 on %s and a spread of at most 1", lc.byName, newName)
	}
	// The counters lc decided on agree with the backends' answers.
	for i, pod := range pods {
		if got := ipvsConns(t, lcVIP)[pod.IP(4).String()+":8080"].active; got != lc.byName[four[i]] {
			t.Errorf("lc: IPVS counts %d active connections on %s, the backend answered %d", got, four[i], lc.byName[four[i]])
		}
	}
}

// What per-node scheduling gives and does not (docs/schedulers.md). Every node runs its
// own IPVS, whose counters hold only that node's connections; here each "node" is an lc
// virtual server of its own over the same three backends (IPVS keeps a real server's
// counters per virtual server, exactly as it keeps them per node), next to one lc virtual
// server that sees every connection. Each node's lc is balanced within one on its own, but
// the nodes break ties alike, so 4 held connections per node for 4 nodes pile up as
// 8/4/4, while one scheduler seeing all 16 gives 6/5/5.
func TestSchedulerPerNodeLeastConnection(t *testing.T) {
	dir := setupNode(t)
	pods := backends(t, "pn", 41, 3)
	cli := client(t, "pnc", "10.244.49.2")
	ips, names := podIPs(pods), podNames(pods)
	const nodes, perNode = 4, 4
	var docs []string
	vipOf := func(i int) string { return fmt.Sprintf("10.96.141.%d", i+1) }
	for i := 0; i <= nodes; i++ { // the last one is the scheduler that sees everything
		name := fmt.Sprintf("node%d", i)
		docs = append(docs, schedService(name, vipOf(i), "lc", ""), sliceYAML(name, name+"-1", "TCP", 8080, "", eps(ips...)...))
	}
	writeManifests(t, dir, "svc.yaml", docs...)
	startProxy(t, dir)
	eventually(t, schedStart, "every virtual server", func() bool {
		for i := 0; i <= nodes; i++ {
			if realServers(vsBlock(t, "TCP", vipOf(i)+":80")) != 3 {
				return false
			}
		}
		return true
	})

	total, whole := map[string]int{}, newHeldSet(t)
	firsts := map[string]int{}
	for i := 0; i < nodes; i++ {
		node := newHeldSet(t)
		for k := 0; k < perNode; k++ {
			c := node.hold(t, cli, vipOf(i))
			waitActive(t, vipOf(i), k+1)
			if k == 0 {
				firsts[c.First]++
			}
		}
		if s := spread(node.byName, names); s > 1 {
			t.Errorf("node %d: its own held connections %v, spread %d; want at most 1", i, node.byName, s)
		}
		for n, c := range node.byName {
			total[n] += c
		}
		// This node's counters know nothing of the connections other nodes sent.
		for j, pod := range pods {
			if got := ipvsConns(t, vipOf(i))[pod.IP(4).String()+":8080"].active; got != node.byName[names[j]] {
				t.Errorf("node %d counts %d connections on %s, it sent %d", i, got, names[j], node.byName[names[j]])
			}
		}
	}
	for k := 0; k < nodes*perNode; k++ {
		whole.hold(t, cli, vipOf(nodes))
		waitActive(t, vipOf(nodes), k+1)
	}
	t.Logf("%d nodes x %d held: first connections %v, total per backend %v (spread %d); one scheduler for all %d: %v (spread %d)",
		nodes, perNode, firsts, total, spread(total, names), nodes*perNode, whole.byName, spread(whole.byName, names))
	if len(firsts) != 1 {
		t.Errorf("the first connection of each node went to %v; with idle counters every node picks the same backend", firsts)
	}
	if s := spread(total, names); s != nodes {
		t.Errorf("total over %d nodes %v, spread %d; want %d (each node's extra on the same backend)", nodes, total, s, nodes)
	}
	if s := spread(whole.byName, names); s > 1 {
		t.Errorf("one scheduler for all: %v, spread %d; want at most 1", whole.byName, s)
	}
}
