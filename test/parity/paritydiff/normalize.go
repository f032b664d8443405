package main

import (
	"bufio"
	"io"
	"sort"
	"strings"
)

// kubeProxySets maps the base name of each kube-proxy IPVS-mode ipset (without "KUBE-" or
// "KUBE-6-") to the kube-ipvs base name (without "KIPVS-" and "-6") of the set that means the
// same thing. Sets missing here have no counterpart and keep their own name, prefixed "KUBE:",
// so they show as differences.
var kubeProxySets = map[string]string{
	"LOOP-BACK":                 "LOOP-BACK",
	"CLUSTER-IP":                "CLUSTER-IP",
	"EXTERNAL-IP":               "EXTERNAL-IP",
	"EXTERNAL-IP-LOCAL":         "EXTERNAL-IP-LOCAL",
	"LOAD-BALANCER":             "LOAD-BALANCER",
	"LOAD-BALANCER-LOCAL":       "LOAD-BALANCER-LOCAL",
	"LOAD-BALANCER-FW":          "LOAD-BALANCER-FW",
	"LOAD-BALANCER-SOURCE-IP":   "LB-SOURCE-IP",
	"LOAD-BALANCER-SOURCE-CIDR": "LB-SOURCE-CIDR",
	"NODE-PORT-TCP":             "NODE-PORT",
	"NODE-PORT-UDP":             "NODE-PORT",
	"NODE-PORT-SCTP-HASH":       "NODE-PORT",
	"NODE-PORT-LOCAL-TCP":       "NODE-PORT-LOCAL",
	"NODE-PORT-LOCAL-UDP":       "NODE-PORT-LOCAL",
	"NODE-PORT-LOCAL-SCTP-HASH": "NODE-PORT-LOCAL",
	"HEALTH-CHECK-NODE-PORT":    "HEALTH-CHECK-NODE-PORT",
	"IPVS-IPS":                  "VIPS",
}

// nodePortProto is the protocol of kube-proxy's per-protocol bitmap:port NodePort sets, whose
// entries are bare ports.
var nodePortProto = map[string]string{
	"NODE-PORT-TCP": "tcp", "NODE-PORT-UDP": "udp",
	"NODE-PORT-LOCAL-TCP": "tcp", "NODE-PORT-LOCAL-UDP": "udp",
}

// state is one proxy's kernel state as normalised lines: "ipvs ...", "addr ..." and
// "set NAME ENTRY", comparable across the two proxies.
type state map[string]bool

// readIPVS takes `ipvsadm -Sn`: "-A -t VIP:PORT -s rr" becomes "ipvs -t VIP:PORT -s rr" and
// "-a -t VIP:PORT -r RIP:PORT -m -w 1" becomes "ipvs -t VIP:PORT -r RIP:PORT -m -w 1", so a
// virtual server and its real servers sort together.
func readIPVS(r io.Reader, into state) error {
	return eachLine(r, func(f []string) {
		if len(f) > 1 && (f[0] == "-A" || f[0] == "-a") {
			into["ipvs "+strings.Join(f[1:], " ")] = true
		}
	})
}

// readAddrs takes `ip -o addr show dev kube-ipvs0`: one "addr IP/LEN" per address.
func readAddrs(r io.Reader, into state) error {
	return eachLine(r, func(f []string) {
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "inet" || f[i] == "inet6" {
				into["addr "+f[i+1]] = true
			}
		}
	})
}

// readSets takes `ipset save`: the entries of every KUBE-* and KIPVS-* set under its
// normalised name (see setName). Set headers (types, sizes) are not compared: the two
// proxies size and type some sets differently by design, and the entries say what matters.
func readSets(r io.Reader, into state) error {
	return eachLine(r, func(f []string) {
		if len(f) < 3 || f[0] != "add" {
			return
		}
		if name, entry, ok := setEntry(f[1], f[2]); ok {
			into["set "+name+" "+entry] = true
		}
	})
}

// setEntry normalises one entry. kube-proxy's NodePort sets hold bare ports (bitmap:port) per
// protocol, kube-ipvs's hold nodeIP,proto:port for all protocols: both become "proto:port"
// (which node IPs serve a NodePort shows in the IPVS table instead).
func setEntry(set, entry string) (name, out string, ok bool) {
	base, v6, ok := setBase(set)
	if !ok {
		return "", "", false
	}
	name = base
	if mapped, known := kubeProxySets[base]; known && strings.HasPrefix(set, "KUBE-") {
		name = mapped
		if proto, bare := nodePortProto[base]; bare {
			entry = proto + ":" + entry
		}
	} else if strings.HasPrefix(set, "KUBE-") {
		name = "KUBE:" + base
	}
	if name == "NODE-PORT" || name == "NODE-PORT-LOCAL" {
		if i := strings.LastIndex(entry, ","); i >= 0 {
			entry = entry[i+1:]
		}
	}
	if v6 {
		name += "-6"
	}
	return name, entry, true
}

// setBase splits a set name into its base and family: KUBE-X, KUBE-6-X, KIPVS-X, KIPVS-X-6.
func setBase(set string) (base string, v6, ok bool) {
	switch {
	case strings.HasPrefix(set, "KUBE-6-"):
		return strings.TrimPrefix(set, "KUBE-6-"), true, true
	case strings.HasPrefix(set, "KUBE-"):
		return strings.TrimPrefix(set, "KUBE-"), false, true
	case strings.HasPrefix(set, "KIPVS-"):
		base = strings.TrimPrefix(set, "KIPVS-")
		if strings.HasSuffix(base, "-6") {
			return strings.TrimSuffix(base, "-6"), true, true
		}
		return base, false, true
	}
	return "", false, false
}

func eachLine(r io.Reader, fn func(fields []string)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 {
			fn(f)
		}
	}
	return sc.Err()
}

// localSubsets pairs each set with its externalTrafficPolicy Local twin. kube-proxy puts a
// Local load balancer or NodePort in both (the twin only marks "do not masquerade"), kube-ipvs
// puts it in the twin alone; its external IPs are in the twin alone with both proxies.
var localSubsets = map[string]string{
	"LOAD-BALANCER": "LOAD-BALANCER-LOCAL", "NODE-PORT": "NODE-PORT-LOCAL",
	"LOAD-BALANCER-6": "LOAD-BALANCER-LOCAL-6", "NODE-PORT-6": "NODE-PORT-LOCAL-6",
}

// disjointLocal removes from each set of localSubsets the entries its Local twin holds, so
// both proxies' sets read as "Cluster" and "Local", which is what their rules make of them.
func disjointLocal(s state) {
	for l := range s {
		f := strings.SplitN(l, " ", 3)
		if len(f) != 3 || f[0] != "set" {
			continue
		}
		if twin, ok := localSubsets[f[1]]; ok && s["set "+twin+" "+f[2]] {
			delete(s, l)
		}
	}
}

// diff lists what only kube-proxy has ("- line") and what only kube-ipvs has ("+ line"),
// sorted by the line and then the sign, so the two sides of one difference sit together.
func diff(kubeProxy, kubeIPVS state) []string {
	type row struct{ line, sign string }
	var rows []row
	for l := range kubeProxy {
		if !kubeIPVS[l] {
			rows = append(rows, row{l, "-"})
		}
	}
	for l := range kubeIPVS {
		if !kubeProxy[l] {
			rows = append(rows, row{l, "+"})
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].line != rows[j].line {
			return rows[i].line < rows[j].line
		}
		return rows[i].sign < rows[j].sign
	})
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.sign + " " + r.line
	}
	return out
}
