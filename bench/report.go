package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// ReadResults reads results from a file: result lines (ResultPrefix + JSON) anywhere in it,
// such as the guest's console log, or a JSON array as Report writes it.
func ReadResults(path string) ([]*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*Result
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '[' {
		if err := json.Unmarshal(t, &out); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return out, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		_, js, ok := strings.Cut(line, ResultPrefix)
		if !ok {
			continue
		}
		var r Result
		if err := json.Unmarshal([]byte(js), &r); err != nil {
			return nil, fmt.Errorf("%s: a result line: %w", path, err)
		}
		out = append(out, &r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no results", path)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].N != out[j].N {
			return out[i].N < out[j].N
		}
		return out[i].BindingOf() < out[j].BindingOf()
	})
	return out, nil
}

// Report reads results and writes the markdown report, the chart and the results as JSON.
func Report(in, md, pngPath, js string) error {
	rs, err := ReadResults(in)
	if err != nil {
		return err
	}
	for _, p := range []string{md, pngPath, js} {
		if dir := filepath.Dir(p); dir != "." {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
	}
	b, err := json.MarshalIndent(rs, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(js, append(b, '\n'), 0o644); err != nil {
		return err
	}
	var img bytes.Buffer
	if err := WriteChart(&img, rs); err != nil {
		return err
	}
	if err := os.WriteFile(pngPath, img.Bytes(), 0o644); err != nil {
		return err
	}
	kp, err := ReadKubeProxy(in)
	if err != nil {
		return err
	}
	var doc bytes.Buffer
	if err := WriteMarkdown(&doc, rs, Env{Date: time.Now().UTC(), HostCPU: hostCPU(), HostCores: runtime.NumCPU(),
		Chart: relTo(md, pngPath), Data: relTo(md, js), KubeProxy: kp}); err != nil {
		return err
	}
	return os.WriteFile(md, doc.Bytes(), 0o644)
}

func relTo(from, to string) string {
	if r, err := filepath.Rel(filepath.Dir(from), to); err == nil {
		return filepath.ToSlash(r)
	}
	return to
}

// Env is what the report says about where it was made.
type Env struct {
	Date      time.Time
	HostCPU   string
	HostCores int
	Chart     string // the chart's path relative to the report
	Data      string // the JSON's path relative to the report
	// KubeProxy is kube-proxy's IPVS proxier measured in the same run (none: the
	// comparison quotes kube-proxy's issues instead).
	KubeProxy []*KubeProxyResult
}

func hostCPU() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// kindNames are the table labels of the single changes.
var kindNames = map[string]string{
	KindEndpointAdd:    "one endpoint added",
	KindEndpointRemove: "one endpoint removed (drained)",
	KindNoop:           "sync with nothing to change",
	KindServiceAdd:     "one Service added (10 endpoints)",
	KindServiceDelete:  "one Service deleted",
	KindFullResync:     "full resync (every Service, kernel dump)",
}

func ms(s float64) string {
	switch {
	case math.IsNaN(s):
		return "-"
	case s >= 10:
		return fmt.Sprintf("%.1f s", s)
	case s >= 1:
		return fmt.Sprintf("%.2f s", s)
	}
	return fmt.Sprintf("%.0f ms", 1000*s)
}

func spread(xs []float64) string {
	s := Summarize(xs)
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%s–%s)", ms(s.Median), ms(s.Min), ms(s.Max))
}

func mibs(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func writesBy(w map[string]int) string {
	var parts []string
	for _, s := range Subsystems {
		if w[s] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, w[s]))
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}

// medianWrites is the writes of the sample with the median total, by subsystem.
func medianWrites(samples []Sample) (total string, by string) {
	if len(samples) == 0 {
		return "-", "-"
	}
	s := append([]Sample(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i].TotalWrites() < s[j].TotalWrites() })
	lo, hi := s[0].TotalWrites(), s[len(s)-1].TotalWrites()
	m := s[len(s)/2]
	total = fmt.Sprint(m.TotalWrites())
	if lo != hi {
		total += fmt.Sprintf(" (%d–%d)", lo, hi)
	}
	return total, writesBy(m.Writes)
}

func sinceField(xs []Sample, f func(Sample) float64) []float64 {
	out := make([]float64, 0, len(xs))
	for _, s := range xs {
		out = append(out, f(s))
	}
	return out
}

func commas(n int) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func label(n int) string {
	if n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// WriteMarkdown writes BENCHMARKS.md.
func WriteMarkdown(w io.Writer, rs []*Result, env Env) error {
	if len(rs) == 0 {
		return errors.New("no results")
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	first, last := rs[0], rs[len(rs)-1]
	primary := primaryResults(rs)

	p("# Benchmarks\n\n")
	p("Scale of kube-ipvs from %s to %s Services (x %d endpoints), on a real kernel. Measured %s\n",
		commas(first.N), commas(last.N), EndpointsPerService, env.Date.Format("2006-01-02"))
	p("with `make bench`; the raw results are in [%s](%s).\n\n", env.Data, env.Data)
	p("![per-change latency and cold start against the number of Services](%s)\n\n", env.Chart)

	p("## Machine\n\n")
	p("- Guest: QEMU **software emulation (TCG)**, %d vCPUs, %s MiB, Debian kernel `%s`. Emulation is\n",
		last.CPUs, commas(last.MemTotalMiB), last.Kernel)
	p("  roughly ten times slower than native, and system calls far more: compare ratios, not\n")
	p("  absolute times.\n")
	p("- Host: %s, %d cores, which emulate the guest's vCPUs; emulated times are noisy, so\n", env.HostCPU, env.HostCores)
	p("  medians and spreads are given.\n")
	p("- %s; kube-ipvs at the working tree of the report.\n\n", last.GoVersion)

	p("## What runs\n\n")
	p("For each N and each `--vip-binding` (address, the default, and route), `kipvs-bench run`\n")
	p("in a fresh network namespace of the guest (its own IPVS table, `kube-ipvs0`, ipsets and\n")
	p("iptables, and a node address on a dummy `eth0`):\n\n")
	p("- client-go's plain **fake clientset** (as `--manifests` uses) holding N Services and N\n")
	p("  EndpointSlices (%d ready endpoints each): every Service a ClusterIP with port 80, 10%%\n", EndpointsPerService)
	p("  also 443, 20%% NodePort (half of those with both ports), as if the API server had them\n")
	p("  when the proxy starts;\n")
	p("- the informers, `controller.New`, and the real IPVS, `kube-ipvs0`, ipset and iptables\n")
	p("  dataplane built by `dataplane/ipvsmode.New`, the code `cmd/kube-ipvs` builds it\n")
	p("  with; the production observers (metrics, health); `--min-sync-period=0`, so that each\n")
	p("  change is applied alone (the default 1 s only adds coalescing delay), and no periodic\n")
	p("  resync during the single changes (it is measured on its own, triggered by a Node change);\n")
	p("- **latency** runs from the clientset call to the kernel showing the change, read through\n")
	p("  a separate IPVS netlink socket every 2 ms (the controller's word is used only for the\n")
	p("  no-op sync and the full resync, which change nothing the kernel could show); it includes\n")
	p("  the fake clientset's own work (listed as *api*) and the informer's delivery. The probe\n")
	p("  builds its requests from the kernel's uapi, not from package ipvs, and reads into one\n")
	p("  buffer (it runs in the proxy's process, and its garbage would be the proxy's collector's);\n")
	p("  its reads take the kernel's IPVS mutex, as `ipvsadm` does;\n")
	p("- **writes** are the controller's `kube_ipvs_netlink_writes_total` by subsystem: IPVS and\n")
	p("  address netlink requests, ipset requests (one per batch of up to 500 entries), iptables\n")
	p("  restore runs;\n")
	p("- one endpoint change adds a ready endpoint to a one-port ClusterIP Service and then\n")
	p("  removes it (its real server drains at weight 0 and is deleted once it has no\n")
	p("  connection, a second later; that delete is counted); a Service is added as a Service\n")
	p("  then its EndpointSlice, and deleted as the Service then, once the kernel dropped it,\n")
	p("  the slice;\n")
	p("- after the cold start the kernel is read back in full and compared with what N Services\n")
	p("  must give (virtual and real servers, VIPs, set entries);\n")
	p("- after the single changes the controller is stopped and a new one started onto the\n")
	p("  kernel state (a restart), with `--sync-period`'s default, and endpoint changes stream in\n")
	p("  through two of its repair cycles (Churn).\n")
	p("%s\n", rateEstimationText(rs))

	writeColdStart(w, rs)

	p("## One change\n\n")
	p("Median (min–max) over the repetitions; the last column is the controller's own sync time\n")
	p("(median), without the API call and the informer delivery.\n\n")
	p("| change | Services | repetitions | latency | of which api | writes | by subsystem | sync |\n")
	p("|---|---:|---:|---:|---:|---:|---|---:|\n")
	for _, k := range Kinds {
		for _, r := range primary {
			ss := r.Changes[k]
			total, by := medianWrites(ss)
			p("| %s | %s | %d | %s | %s | %s | %s | %s |\n", kindNames[k], commas(r.N), len(ss),
				spread(r.Latencies(k)), ms(Summarize(sinceField(ss, func(s Sample) float64 { return s.APISeconds })).Median),
				total, by, ms(Summarize(sinceField(ss, func(s Sample) float64 { return s.SyncSeconds })).Median))
		}
	}
	p("\n")

	writeChurn(w, rs)
	writeMemory(w, rs)
	writeTargets(w, rs)
	if len(env.KubeProxy) > 0 {
		writeKubeProxy(w, primary, env.KubeProxy)
	} else {
		writeComparison(w, primary)
	}
	writeFindings(w, rs)

	p("## Reproduce\n\n")
	p("```sh\n")
	p("make bench                                   # hours: 1k, 5k, 10k, 50k in both bindings, kube-proxy at 1k and 5k\n")
	p("BENCH_PLAN=\"1000:9:1 10000:7:1:route\" make bench   # N:repetitions:full-repair repetitions[:binding]\n")
	p("BENCH_REPORT_ONLY=1 make bench                # the report again from .cache/bench/console.log\n")
	p("BENCH_KUBEPROXY_PLAN=\"1000\" make bench       # kube-proxy's IPVS proxier beside it at these N (\"\": none)\n")
	p("BENCH_ARGS=\"-cpuprofile -heapprofile\" make bench  # profiles on the console (base64)\n")
	p("```\n\n")
	p("`hack/bench.sh` builds `bench/cmd/kipvs-bench` (static), boots the guest through\n")
	p("`hack/guest/run.sh` with `GUEST_MEM=6144` and `GUEST_TIMEOUT=10800`, runs one process per N and binding\n")
	p("in its own network namespace, then renders this file, the chart and the JSON with\n")
	p("`kipvs-bench report`. It is not part of `make test`. The limits found are tested on every\n")
	p("`make test`: `controller/scale_test.go`, `firewall/packed_test.go`, `ipvs/batch_test.go`,\n")
	p("`ipvs/share_test.go`, `dataplane/ipvsmode/ipvsmode_test.go`, and in the guest\n")
	p("`ipvs/scale_guest_test.go` and `dummyif/scale_guest_test.go`.\n")
	return nil
}

func result(rs []*Result, n int) *Result {
	for _, r := range rs {
		if r.N == n {
			return r
		}
	}
	return nil
}

func passFail(ok bool) string {
	if ok {
		return "pass"
	}
	return "**miss**"
}

func writeComparison(w io.Writer, rs []*Result) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	last := rs[len(rs)-1]
	vs := last.Found.VirtualServers
	p("## Compared with kube-proxy's IPVS mode\n\n")
	p("Figures from kube-proxy's issues (see the project's reference notes); kube-proxy was not run\n")
	p("here.\n\n")
	p("| | kube-proxy IPVS mode | kube-ipvs, this bench at %s Services |\n|---|---|---|\n", commas(last.N))
	addW, _ := medianWrites(last.Changes[KindEndpointAdd])
	p("| work per endpoint change | a full sync: about 3 netlink round trips per virtual server plus about 55 process execs, so about %s round trips for %s virtual servers | %s writes (the real server and its hairpin entry), no reads, no process |\n",
		commas(3*vs), commas(vs), addW)
	p("| time per update | about 20 s at 4,000 endpoints (#73382); 12 s syncs at 1,500 externalIP Services (#84906) | %s median at %s endpoints, under emulation |\n",
		ms(Summarize(last.Latencies(KindEndpointAdd)).Median), commas(last.N*EndpointsPerService))
	p("| idle cost | 2,000 Services keep 65%% of a core busy (#88212): a full sync every 30 s and after every change | a change-free sync writes nothing; the periodic repair (full resync) took %s at %s Services, every --sync-period (30 s by default) |\n",
		ms(Summarize(last.Latencies(KindFullResync)).Median), commas(last.N))
	p("| ipset size | maxelem fixed at 65,536 (#129389); filled one exec per entry (#133773) | sets sized to their content: %s hairpin entries in a set of maxelem %s, filled %d entries per netlink request |\n\n",
		commas(last.Found.SetEntries["KIPVS-LOOP-BACK"]), commas(last.Found.LoopBackMaxElem), 500)
}

func writeFindings(w io.Writer, all []*Result) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	rs := primaryResults(all)
	last := rs[len(rs)-1]
	p("## What broke at scale, and what was done\n\n")
	p("- **O(N) work in every sync.** Each incremental sync copied every virtual server and\n")
	p("  address (`allVSes`, `allBinds`, for retries that are almost always empty), counted real\n")
	p("  servers over a copy of every virtual server for a metric, and walked every Service for\n")
	p("  the health-check servers. Now the desired state keeps a real-server count and an index of\n")
	p("  health-checked Services, and retries are looked up per key: an endpoint change allocates\n")
	p("  the same with 5,000 Services as with 100 (`TestIncrementalSyncCostDoesNotGrowWithServices`).\n")
	p("- **One netlink round trip per IPVS write.** moby/ipvs sends each request with its own\n")
	p("  acknowledgement, socket-name lookup, deadline and 64 KiB receive buffer; under emulation\n")
	p("  that was about 1 ms per write, most of a cold start. IPVS writes now go through the\n")
	p("  project's own generic netlink encoding and are batched within one Apply: up to 400\n")
	p("  messages per send, only failures and the last message answered (about 40 µs per write in\n")
	p("  the guest, `TestGuestLargeBatchAndLargeDumps`). Per-write errors still reach their virtual\n")
	p("  server, and a missing scheduler is still recognised.\n")
	p("- **ENOBUFS.** With batching, more failures than the socket's receive buffer holds make the\n")
	p("  kernel drop answers. The receive buffer is raised to 4 MiB, answers are small\n")
	p("  (`NETLINK_CAP_ACK`), and when the kernel reports ENOBUFS the writes whose answers are\n")
	p("  missing are reported as of unknown outcome and their virtual servers re-read, so the cache\n")
	p("  stays true (`TestGuestReceiveBufferOverrun`, `TestBatchedUnknownOutcomesAreReRead`).\n")
	p("- **Memory.** At 10,000 Services the proxy's live heap was 210 MiB before these changes. Set\n")
	p("  entries are now kept packed (38 bytes, no pointers; the firewall Tracker and the ipset\n")
	p("  cache held them as nested maps of 88-byte keys), ipset listings stream into the cache,\n")
	p("  a full resync reads the Tracker instead of copying it, the IPVS cache shares the\n")
	p("  controller's virtual servers when the kernel holds them exactly (copy on write), batch\n")
	p("  bookkeeping keeps failures only, and informers drop `managedFields`. A heap profile\n")
	p("  after a cold start at 50,000 Services (`BENCH_ARGS=-heapprofile`) then showed every\n")
	p("  virtual server with its own copy of its port's real servers, made while building, and\n")
	p("  the IPVS cache building a copy of every new virtual server during the cold start's apply,\n")
	p("  shared only at its end. The virtual servers of a port with the same family and traffic\n")
	p("  policy now share one read-only map, and a new\n")
	p("  virtual server is cached as the controller's object at once (a failed write still makes\n")
	p("  it re-read from the kernel): peak RSS at 50,000 went from 1,028 MiB to under 1 GiB.\n")
	p("- **Addresses held IPVS up.** The full sync bound `kube-ipvs0`'s addresses, which the\n")
	p("  kernel makes slow (below), and only then repaired IPVS. The two are independent kernel\n")
	p("  tables and are now repaired at the same time; the virtual servers the repair may delete\n")
	p("  are those on addresses the proxy binds or that were on `kube-ipvs0` when it began\n")
	p("  (`TestFullSyncRepairsAddressesAndIPVSAtOnce`,\n")
	p("  `TestFullSyncRemovesWhatServicesDeletedWhileDownLeft`).\n")
	p("- **Not a fix: `/proc/net/ip_vs`.** It lists every real server in one text, which looked\n")
	p("  like a way around IPVS's one netlink round trip per virtual server in a full repair. But\n")
	p("  seq_file hands it out at most a page per read and walks the service table from its start\n")
	p("  on every read: reading 70,000 virtual servers back took 245 s that way against 59 s over\n")
	p("  netlink, so the repair stays on netlink.\n")
	p("- **Reading back handed the CPU around.** Each read request waited in the runtime's\n")
	p("  system-call wrapper, and a dump request runs for 0.2-0.7 ms in the kernel under\n")
	p("  emulation, so the scheduler handed the goroutine's P to another thread on most of them:\n")
	p("  14,000 virtual servers read through two sockets took 6.4 s, and as long again in thread\n")
	p("  hand-offs as in reading. Read requests and receives (non-blocking) now go through raw\n")
	p("  system calls, and a listing reads through two sockets per CPU (up to 4): 2.7 s (a probe\n")
	p("  of 2026-12-02, not kept). Per virtual server the kernel still costs more as the table\n")
	p("  grows (its service lookup walks a hash chain of 256 buckets): 70,000 read in about 52 s.\n")
	p("- **A restart read back what its predecessor had just written.** A clean stop now leaves\n")
	p("  a handover (`--handover-file`), and the next start's first sync reads back only the\n")
	p("  virtual servers the handover does not hold as listed (see Cold start and restart, and\n")
	p("  the README for what it trusts). After a crash there is none, and it reads everything.\n")
	p("- **Address writes opened a socket each.** `kube-ipvs0` addresses were written with\n")
	p("  vishvananda/netlink's package functions, which open and close a socket per request; the\n")
	p("  reconciler now keeps one handle.\n")
	p("- **Initial events after the first sync.** The informers' `HasSynced` does not wait for\n")
	p("  the handlers, so marks for the initial objects could arrive after the first full sync and\n")
	p("  make a second one recompute up to every Service; the handlers' own `HasSynced` is now\n")
	p("  awaited too.\n")
	p("- **ipset sizes** were already right (sized to content, rebuilt by swap to grow): the\n")
	p("  hairpin set holds %s entries at %s Services, far past kube-proxy's 65,536.\n\n",
		commas(last.Found.SetEntries["KIPVS-LOOP-BACK"]), commas(last.N))

	p("## Limits that remain\n\n")
	p("- **Binding a VIP is O(addresses) in the kernel.** The kernel walks the device's address\n")
	p("  list on every IPv4 add and delete (`__inet_insert_ifa`, and `find_matching_ifa` before\n")
	p("  it), so binding N ClusterIPs to one device is O(N²); under emulation every node walked\n")
	p("  is a soft-TLB lookup, and the cost per address climbs from 0.45 ms (first 5,000) to\n")
	p("  4.3 ms (15,000 to 20,000). It is not the system calls: 20,000 addresses took 39.3 s\n")
	p("  one request each and 37.4 s sent 400 per request (a probe of 2026-11-30, not kept). It\n")
	p("  adds about a millisecond per Service add or delete at 50,000, and kube-proxy binds the\n")
	p("  same addresses the same way.%s\n", addressText(ofBinding(all, "address")))
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

// addressText says how much of the largest N's cold start binding the addresses took, and
// what the rest of the first sync took, or "" without phases.
func addressText(rs []*Result) string {
	first, last := rs[0], rs[len(rs)-1]
	ph := last.ColdStart.PhaseSeconds
	if len(ph) == 0 || first.ColdStart.Seconds == 0 {
		return ""
	}
	rest := ph["build"] + ph["firewall"] + ph["ipvs"]
	if last.ColdStart.Seconds/first.ColdStart.Seconds <= 60 || ph["addresses"] <= rest {
		return fmt.Sprintf(" At %s, binding the addresses took %s of the %s cold start.", label(last.N), ms(ph["addresses"]), ms(last.ColdStart.Seconds))
	}
	return fmt.Sprintf(" **It is what misses the cold-start target:** at %s, binding the\n"+
		"  addresses took %s of the %s cold start (%.0fx the whole %s cold start on its own), while\n"+
		"  recomputing every Service, the ipsets and iptables and all of IPVS took %s together (%.0fx).\n"+
		"  Meeting the target at this size would need the VIPs made local some other way. Local\n"+
		"  routes through the dummy link would do: `hack/probes/vip-binding.sh` (2026-11-30) made 20,000 VIPs\n"+
		"  local in 2.0 s that way against 40.1 s as addresses, and IPVS served such a VIP from a\n"+
		"  pod namespace and from the node. But addresses on `kube-ipvs0` are how kube-proxy's IPVS\n"+
		"  mode and this project's design bind VIPs, and what users of `ip addr show kube-ipvs0`\n"+
		"  rely on, so that change is left to a decision.",
		label(last.N), ms(ph["addresses"]), ms(last.ColdStart.Seconds), ph["addresses"]/first.ColdStart.Seconds, label(first.N),
		ms(rest), rest/first.ColdStart.Seconds)
}

// phaseText is ", of which build x, firewall y, ..." for the last full resync sample of r
// that has phases, or "" without one.
func phaseText(r *Result) string {
	samples := r.Changes[KindFullResync]
	for i := len(samples) - 1; i >= 0; i-- {
		ph := samples[i].PhaseSeconds
		if len(ph) == 0 {
			continue
		}
		return fmt.Sprintf(" (the last one: recomputing every Service %s, ipsets and iptables %s, then at once `kube-ipvs0` %s and IPVS %s)",
			ms(ph["build"]), ms(ph["firewall"]), ms(ph["addresses"]), ms(ph["ipvs"]))
	}
	return ""
}

// rateEstimationText is the bullet that says which runs set --ipvs-rate-estimation, if any.
func rateEstimationText(rs []*Result) string {
	by := map[string][]string{}
	var order []string
	for _, r := range rs {
		v := r.RateEstimation
		if v == "" {
			v = "kernel"
		}
		if by[v] == nil {
			order = append(order, v)
		}
		by[v] = append(by[v], fmt.Sprintf("%s %s", label(r.N), r.BindingOf()))
	}
	if len(order) == 1 && order[0] == "kernel" {
		return ""
	}
	var parts []string
	for _, v := range order {
		parts = append(parts, fmt.Sprintf("`--ipvs-rate-estimation=%s` at %s", v, strings.Join(by[v], ", ")))
	}
	return "- kube-ipvs ran with " + strings.Join(parts, "; ") + " (off is what the README advises at tens\n" +
		"  of thousands of Services on kernels before 6.2; kube-proxy ran with the kernel's own, on).\n"
}
