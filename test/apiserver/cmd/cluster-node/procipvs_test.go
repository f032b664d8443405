package main

import "testing"

func TestForwardAndProtocolNames(t *testing.T) {
	for flags, want := range map[uint32]string{0: "Masq", 1: "Local", 2: "Tunnel", 3: "Route", 0x100 | 2: "Tunnel"} {
		if got := forwardName(flags); got != want {
			t.Errorf("forwardName(%#x) = %s, want %s", flags, got, want)
		}
	}
	for p, want := range map[uint16]string{6: "TCP", 17: "UDP", 132: "SCTP"} {
		if got := protoName(p); got != want {
			t.Errorf("protoName(%d) = %s, want %s", p, got, want)
		}
	}
}

func TestConnsAsIpvsadm(t *testing.T) {
	in := `Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData
TCP 0AF40006 E052 0A60906C 2328 0AF40005 2328 TIME_WAIT       119
UDP 0AF40006 9F56 0A60000A 0035 0AF40002 0035 UDP             300
`
	want := `pro expire state source virtual destination
TCP 01:59 TIME_WAIT 10.244.0.6:57426 10.96.144.108:9000 10.244.0.5:9000
UDP 05:00 UDP 10.244.0.6:40790 10.96.0.10:53 10.244.0.2:53
`
	if got := connsAsIpvsadm(in); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}
