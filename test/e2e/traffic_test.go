//go:build guest

package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// Every Service type carries traffic; round robin spreads exactly evenly; UDP carries
// datagrams; SCTP virtual servers are programmed.
func TestServiceTypesCarryTraffic(t *testing.T) {
	dir := setupNode(t)
	backs := backends(t, "st", 1, 3)
	cli := client(t, "stc", "10.244.9.1")
	all := eps("10.244.1.11", "10.244.1.12", "10.244.1.13")
	writeManifests(t, dir, "svc.yaml",
		serviceYAML(svcOpts{name: "cip", clusterIP: "10.96.10.1", port: 80, targetPort: 8080}),
		sliceYAML("cip", "cip-1", "TCP", 8080, "", all...),
		serviceYAML(svcOpts{name: "np", typ: "NodePort", clusterIP: "10.96.10.2", port: 80, targetPort: 8080, nodePort: 30080}),
		sliceYAML("np", "np-1", "TCP", 8080, "", all...),
		serviceYAML(svcOpts{name: "ext", clusterIP: "10.96.10.3", port: 80, targetPort: 8080, externalIPs: []string{"198.51.100.11"}}),
		sliceYAML("ext", "ext-1", "TCP", 8080, "", all...),
		serviceYAML(svcOpts{name: "lb", typ: "LoadBalancer", clusterIP: "10.96.10.4", port: 80, targetPort: 8080, nodePort: 30081, lbIP: "198.51.100.12"}),
		sliceYAML("lb", "lb-1", "TCP", 8080, "", all...),
		serviceYAML(svcOpts{name: "udp", clusterIP: "10.96.10.5", proto: "UDP", port: 53, targetPort: 5353}),
		sliceYAML("udp", "udp-1", "UDP", 5353, "", all...),
		serviceYAML(svcOpts{name: "sctp", clusterIP: "10.96.10.6", proto: "SCTP", port: 9999, targetPort: 9999}),
		sliceYAML("sctp", "sctp-1", "SCTP", 9999, "", all...),
	)
	startProxy(t, dir)
	eventually(t, firstSync, "the SCTP virtual server", func() bool {
		return realServers(vsBlock(t, "SCTP", "10.96.10.6:9999")) == 3
	})

	for _, target := range []string{"10.96.10.1:80", nodeIP + ":30080", "198.51.100.11:80", "198.51.100.12:80", "10.96.10.4:80", nodeIP + ":30081"} {
		got := ask(t, cli, target, 9)
		for _, b := range backs {
			if got[b.Name] != 3 {
				t.Errorf("%s: round robin over 3 backends answered %v, want 3 each", target, got)
				break
			}
		}
	}
	got := askUDP(t, cli, "10.96.10.5:53", 9)
	for _, b := range backs {
		if got[b.Name] != 3 {
			t.Errorf("UDP: answers %v, want 3 from each backend", got)
			break
		}
	}
	// Addresses bound: ClusterIPs, the external IP and the LB IP, not the node IP.
	addrs := dummyAddrs(t)
	for _, a := range []string{"10.96.10.1", "10.96.10.2", "198.51.100.11", "198.51.100.12", "10.96.10.5", "10.96.10.6"} {
		if !addrs[a] {
			t.Errorf("kube-ipvs0 lacks %s: %v", a, addrs)
		}
	}
	if addrs[nodeIP] {
		t.Errorf("the node IP was bound to kube-ipvs0")
	}
}

// Schedulers per Service: sh and ClientIP affinity keep a client on one backend while
// clients spread; every other scheduler is programmed with its flags.
func TestSchedulersPerService(t *testing.T) {
	dir := setupNode(t)
	backends(t, "sc", 2, 3)
	all := eps("10.244.2.11", "10.244.2.12", "10.244.2.13")
	docs := []string{
		serviceYAML(svcOpts{name: "sh", clusterIP: "10.96.20.1", port: 80, targetPort: 8080,
			annotations: map[string]string{"kube-ipvs.io/scheduler": "sh", "kube-ipvs.io/scheduler-flags": "sh-fallback"}}),
		sliceYAML("sh", "sh-1", "TCP", 8080, "", all...),
		serviceYAML(svcOpts{name: "aff", clusterIP: "10.96.20.2", port: 80, targetPort: 8080, affinity: true}),
		sliceYAML("aff", "aff-1", "TCP", 8080, "", all...),
	}
	scheds := map[string]string{"wrr": "10.96.20.10", "lc": "10.96.20.11", "wlc": "10.96.20.12", "sed": "10.96.20.13",
		"nq": "10.96.20.14", "dh": "10.96.20.15", "mh": "10.96.20.16"}
	for s, ip := range scheds {
		ann := map[string]string{"kube-ipvs.io/scheduler": s}
		if s == "mh" {
			ann["kube-ipvs.io/scheduler-flags"] = "mh-fallback,mh-port"
		}
		docs = append(docs, serviceYAML(svcOpts{name: "s-" + s, clusterIP: ip, port: 80, targetPort: 8080, annotations: ann}),
			sliceYAML("s-"+s, "s-"+s+"-1", "TCP", 8080, "", all...))
	}
	writeManifests(t, dir, "svc.yaml", docs...)
	startProxy(t, dir)
	eventually(t, firstSync, "every virtual server", func() bool {
		return realServers(vsBlock(t, "TCP", "10.96.20.16:80")) == 3 && realServers(vsBlock(t, "TCP", "10.96.20.2:80")) == 3
	})

	for s, ip := range scheds {
		block := vsBlock(t, "TCP", ip+":80")
		want := "TCP  " + ip + ":80 " + s
		if s == "mh" {
			want += " (mh-fallback,mh-port)"
		}
		if !strings.HasPrefix(block, want) {
			t.Errorf("scheduler %s: ipvsadm shows %q, want prefix %q", s, firstLine(block), want)
		}
	}
	if b := vsBlock(t, "TCP", "10.96.20.1:80"); !strings.HasPrefix(b, "TCP  10.96.20.1:80 sh (sh-fallback)") {
		t.Errorf("sh service: %q", firstLine(b))
	}
	if b := vsBlock(t, "TCP", "10.96.20.2:80"); !strings.HasPrefix(b, "TCP  10.96.20.2:80 rr persistent 300") {
		t.Errorf("affinity service: %q", firstLine(b))
	}

	// Six clients, five requests each, to the sh and to the affinity Service.
	for ti, target := range []string{"10.96.20.1:80", "10.96.20.2:80"} {
		seen := map[string]bool{}
		for i := 1; i <= 6; i++ {
			c := client(t, fmt.Sprintf("c%d%d", ti, i), fmt.Sprintf("10.244.%d.%d", 12+ti, i))
			got := ask(t, c, target, 5)
			if len(got) != 1 {
				t.Errorf("%s: client %s was spread over %v; it must stick to one backend", target, c.Name, got)
			}
			for n := range got {
				seen[n] = true
			}
		}
		if len(seen) < 2 {
			t.Errorf("%s: all six clients went to %v; different clients must spread", target, seen)
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
