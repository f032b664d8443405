package ipvs

import (
	"bufio"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/model"
)

// A table as Debian's 6.1 kernel prints it: IPv4 in hex, IPv6 in full, a firewall-mark
// service and a persistent one, and a virtual server with no real servers.
const sampleProcTable = `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  0A610001:0050 wrr 
  -> 0AF41401:1F90      Masq    1      0          0         
  -> 0AF41402:1F90      Masq    3      2          1         
UDP  0A610001:0035 rr 
FWM  00000007 rr 
  -> 0AF41403:0050      Masq    1      0          0         
TCP  [fd00:0097:0000:0000:0000:0000:0000:0001]:01BB sh persistent 600 00000080
  -> [fd00:0244:0020:0000:0000:0000:0000:0001]:20FB      Masq    65535  0          0         
SCTP  0A610002:2328 lc 
  -> 0AF41403:2328      Masq    0      0          0         
`

func TestParseProcTable(t *testing.T) {
	got := map[model.VSKey]map[model.RSKey]uint32{}
	var order []model.VSKey
	var cur model.VSKey
	err := parseProcTable(bufio.NewReader(strings.NewReader(sampleProcTable)),
		func(k model.VSKey) error {
			cur = k
			order = append(order, k)
			got[k] = map[model.RSKey]uint32{}
			return nil
		},
		func(rs model.RSKey, w uint32) { got[cur][rs] = w })
	if err != nil {
		t.Fatal(err)
	}
	rsk := func(s string) model.RSKey {
		ap := netip.MustParseAddrPort(s)
		return model.RSKey{Addr: ap.Addr(), Port: ap.Port()}
	}
	want := map[model.VSKey]map[model.RSKey]uint32{
		key("10.97.0.1:80", model.TCP):     {rsk("10.244.20.1:8080"): 1, rsk("10.244.20.2:8080"): 3},
		key("10.97.0.1:53", model.UDP):     {},
		key("[fd00:97::1]:443", model.TCP): {rsk("[fd00:244:20::1]:8443"): 65535},
		key("10.97.0.2:9000", model.SCTP):  {rsk("10.244.20.3:9000"): 0},
	}
	if len(order) != len(want) {
		t.Fatalf("virtual servers %v, want the four of %v (the firewall-mark one skipped)", order, want)
	}
	for k, reals := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s missing", k)
			continue
		}
		if len(g) != len(reals) {
			t.Errorf("%s: real servers %v, want %v", k, g, reals)
		}
		for rs, w := range reals {
			if gw, ok := g[rs]; !ok || gw != w {
				t.Errorf("%s: real server %s weight %d (%v), want %d", k, rs, gw, ok, w)
			}
		}
	}
}

// Anything unexpected is an error marked errProcTable (the caller then lists over netlink),
// and an error from the caller stops the parse as it is.
func TestParseProcTableRejects(t *testing.T) {
	head := "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n"
	for name, body := range map[string]string{
		"short address":     "TCP  0A6101:0050 rr \n",
		"bad port":          "TCP  0A610001:00ZZ rr \n",
		"bad real server":   "TCP  0A610001:0050 rr \n  -> 0AF4:1F90      Masq    1      0          0\n",
		"bad weight":        "TCP  0A610001:0050 rr \n  -> 0AF41401:1F90      Masq    -1      0          0\n",
		"truncated service": "TCP  0A610001:0050\n",
		"truncated real":    "TCP  0A610001:0050 rr \n  -> 0AF41401:1F90 Masq\n",
		"ipv4 in brackets":  "TCP  [10.97.0.1]:0050 rr \n",
	} {
		err := parseProcTable(bufio.NewReader(strings.NewReader(head+body)), func(model.VSKey) error { return nil }, func(model.RSKey, uint32) {})
		if !errors.Is(err, errProcTable) {
			t.Errorf("%s: %v, want errProcTable", name, err)
		}
	}
	stop := errors.New("stop")
	err := parseProcTable(bufio.NewReader(strings.NewReader(sampleProcTable)), func(model.VSKey) error { return stop }, func(model.RSKey, uint32) {})
	if !errors.Is(err, stop) || errors.Is(err, errProcTable) {
		t.Errorf("the caller's error came back as %v", err)
	}
}
