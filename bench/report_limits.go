package bench

import (
	"fmt"
	"io"
)

// writeDesign says what keeps the work per change and per repair small, each point with the
// test that holds it on every make test.
func writeDesign(w io.Writer, rs []*Result) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	last := primaryResults(rs)[len(primaryResults(rs))-1]
	p("## What keeps the work small\n\n")
	p("- **Work per change does not grow with the cluster.** The desired state keeps a real-server\n")
	p("  count and an index of health-checked Services, and retries are looked up per key, so an\n")
	p("  endpoint change recomputes one Service and allocates the same with 5,000 Services as with\n")
	p("  100 (`TestIncrementalSyncCostDoesNotGrowWithServices`).\n")
	p("- **Batched IPVS netlink.** IPVS writes go through the project's own generic netlink\n")
	p("  encoding, up to 400 messages per send, only failures and the last message answered\n")
	p("  (moby/ipvs sends each request with its own acknowledgement, socket-name lookup and 64 KiB\n")
	p("  buffer). Per-write errors still reach their virtual server; when the kernel drops answers\n")
	p("  (ENOBUFS) the writes whose answers are missing are of unknown outcome and their virtual\n")
	p("  servers are read again (`TestGuestLargeBatchAndLargeDumps`, `TestGuestReceiveBufferOverrun`,\n")
	p("  `TestBatchedUnknownOutcomesAreReRead`).\n")
	p("- **Memory.** Set entries are kept packed (38 bytes, no pointers), ipset listings stream into\n")
	p("  the cache, the virtual servers of a port with the same family and traffic policy share one\n")
	p("  read-only map of real servers, the IPVS cache shares the controller's virtual servers, and\n")
	p("  the informers drop `managedFields` (`firewall/packed_test.go`, `ipvs/share_test.go`).\n")
	p("- **Addresses and IPVS are repaired at the same time.** They are independent kernel tables;\n")
	p("  the virtual servers a repair may delete are those on addresses the proxy binds or that\n")
	p("  were on `kube-ipvs0` when it began (`TestFullSyncRepairsAddressesAndIPVSAtOnce`,\n")
	p("  `TestFullSyncRemovesWhatServicesDeletedWhileDownLeft`).\n")
	p("- **Reading back.** Read requests and non-blocking receives go through raw system calls (a\n")
	p("  blocking dump request in the runtime's wrapper hands the goroutine's processor to another\n")
	p("  thread), and a listing reads through two sockets per CPU, up to four. IPVS is read over\n")
	p("  netlink, not `/proc/net/ip_vs`: seq_file hands that out a page per read and walks the\n")
	p("  service table from its start on every read.\n")
	p("- **A restart reads back only what it must.** A clean stop leaves a handover\n")
	p("  (`--handover-file`), and the next start's first sync reads back only the virtual servers\n")
	p("  the handover does not hold as listed. After a crash there is none, and it reads\n")
	p("  everything (Cold start and restart).\n")
	p("- **One socket for addresses.** `kube-ipvs0`'s addresses are written through one kept\n")
	p("  netlink handle, not a socket per request.\n")
	p("- **ipsets are sized to their content** and rebuilt by swap to grow: the hairpin set holds\n")
	p("  %s entries at %s Services, far past kube-proxy's fixed 65,536.\n\n",
		commas(last.Found.SetEntries["KIPVS-LOOP-BACK"]), commas(last.N))
}

// writeLimits says what still grows with the cluster, and why, with this run's figures.
func writeLimits(w io.Writer, all []*Result) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	rs := primaryResults(all)
	last := rs[len(rs)-1]
	p("## Limits that remain\n\n")
	p("- **Binding a VIP as an address is O(addresses) in the kernel.** The kernel walks the\n")
	p("  device's address list on every IPv4 add and delete (`__inet_insert_ifa`, and\n")
	p("  `find_matching_ifa` before it), so binding N ClusterIPs to one device is O(N²), and it is\n")
	p("  not the system calls (sending 400 addresses per request is barely faster than one each).\n")
	p("  It adds about a millisecond per Service add or delete at 50,000 under emulation, and\n")
	p("  kube-proxy binds the same addresses the same way.%s\n", addressText(ofBinding(all, "address")))
	if rt := ofBinding(all, "route"); len(rt) > 1 {
		lo, hi := rt[0], rt[len(rt)-1]
		p("  `--vip-binding=route` makes each VIP local with a local route instead, which the kernel\n")
		p("  adds in constant time: there the cold start took %s at %s and %s at %s (%.1fx for %.0fx\n",
			ms(lo.ColdStart.Seconds), label(lo.N), ms(hi.ColdStart.Seconds), label(hi.N), hi.ColdStart.Seconds/lo.ColdStart.Seconds, float64(hi.N)/float64(lo.N))
		p("  the Services), binding the VIPs %s of it.\n", ms(hi.ColdStart.PhaseSeconds["addresses"]))
	}
	p("- **A repair cycle reads everything back.** The periodic repair took %s at %s Services\n",
		ms(Summarize(last.Latencies(KindFullResync)).Median), commas(last.N))
	p("  here when asked for on an idle proxy, under emulation%s; most of it is reading back\n", phaseText(last))
	p("  every virtual server's real servers, one request each (the kernel has no bulk listing).\n")
	p("  It runs in steps between changes, the ipsets and iptables rules checked in the\n")
	p("  background, so changes do not wait for it (see Churn); it writes nothing when the kernel\n")
	p("  is right. When its busy time exceeds a fifth of `--sync-period`, cycles are spaced to\n")
	p("  five times that, so that it takes a fifth of the loop at most. kube-proxy's IPVS mode\n")
	p("  runs such a full sync on every change.\n")
	if last.GoMemLimitBytes > 0 {
		p("- **Memory against cold start.** Under the soft memory limit the garbage collector works\n")
		p("  harder when the heap nears it, which slows the cold start, when the most is built at\n")
		p("  once. What remains of the live heap is mostly the informer caches and, in this bench,\n")
		p("  the stand-in API server's store (see Memory).\n")
	}
	p("- **The guest kernel (6.1) hashes IPVS services into 256 buckets** (compile-time), shared\n")
	p("  by all network namespaces; at %s virtual servers every lookup walks a chain of about %d.\n\n",
		commas(last.Found.VirtualServers), last.Found.VirtualServers/256)
}
