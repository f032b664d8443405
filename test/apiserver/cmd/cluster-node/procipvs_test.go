package main

import "testing"

func TestTableAsIpvsadm(t *testing.T) {
	in := `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  0A60906C:2328 rr  
  -> 0AF40005:2328      Masq    1      0          67        
  -> 0AF40003:2328      Masq    0      2          0         
UDP  0A60000A:0035 rr  
  -> 0AF40002:0035      Masq    1      0          0         
`
	want := `Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP 10.96.144.108:9000 rr
  -> 10.244.0.5:9000 Masq 1 0 67
  -> 10.244.0.3:9000 Masq 0 2 0
UDP 10.96.0.10:53 rr
  -> 10.244.0.2:53 Masq 1 0 0
`
	if got := tableAsIpvsadm(in); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
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
