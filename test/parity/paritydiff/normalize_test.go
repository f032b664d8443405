package main

import (
	"reflect"
	"strings"
	"testing"
)

func TestReadIPVSKeepsServersAndRealServers(t *testing.T) {
	s := state{}
	in := "-A -t 10.96.0.10:80 -s rr -p 300\n-a -t 10.96.0.10:80 -r 10.244.1.11:8080 -m -w 1\n\n" +
		"-A --sctp-service [fd00::1]:9000 -s rr\n"
	if err := readIPVS(strings.NewReader(in), s); err != nil {
		t.Fatal(err)
	}
	want := state{
		"ipvs -t 10.96.0.10:80 -s rr -p 300":                true,
		"ipvs -t 10.96.0.10:80 -r 10.244.1.11:8080 -m -w 1": true,
		"ipvs --sctp-service [fd00::1]:9000 -s rr":          true,
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("got %v, want %v", s, want)
	}
}

func TestReadAddrsBothFamilies(t *testing.T) {
	s := state{}
	in := "3: kube-ipvs0    inet 10.96.0.21/32 scope global kube-ipvs0\\       valid_lft forever\n" +
		"3: kube-ipvs0    inet6 fd00:10:96::70/128 scope global \\       valid_lft forever\n"
	if err := readAddrs(strings.NewReader(in), s); err != nil {
		t.Fatal(err)
	}
	want := state{"addr 10.96.0.21/32": true, "addr fd00:10:96::70/128": true}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("got %v, want %v", s, want)
	}
}

// The two proxies' sets that mean the same thing must come out under one name with one
// entry format; a set without a counterpart keeps a name that cannot match.
func TestSetEntryNormalisesBothNamings(t *testing.T) {
	cases := []struct{ set, entry, name, out string }{
		{"KUBE-CLUSTER-IP", "10.96.0.10,tcp:80", "CLUSTER-IP", "10.96.0.10,tcp:80"},
		{"KIPVS-CLUSTER-IP", "10.96.0.10,tcp:80", "CLUSTER-IP", "10.96.0.10,tcp:80"},
		{"KUBE-6-CLUSTER-IP", "fd00::1,tcp:80", "CLUSTER-IP-6", "fd00::1,tcp:80"},
		{"KIPVS-CLUSTER-IP-6", "fd00::1,tcp:80", "CLUSTER-IP-6", "fd00::1,tcp:80"},
		{"KUBE-NODE-PORT-TCP", "30080", "NODE-PORT", "tcp:30080"},
		{"KUBE-NODE-PORT-LOCAL-UDP", "30053", "NODE-PORT-LOCAL", "udp:30053"},
		{"KUBE-NODE-PORT-SCTP-HASH", "192.0.2.10,sctp:30090", "NODE-PORT", "sctp:30090"},
		{"KUBE-6-NODE-PORT-TCP", "30070", "NODE-PORT-6", "tcp:30070"},
		{"KIPVS-NODE-PORT", "192.0.2.10,tcp:30080", "NODE-PORT", "tcp:30080"},
		{"KIPVS-NODE-PORT-6", "2001:db8::10,tcp:30070", "NODE-PORT-6", "tcp:30070"},
		{"KUBE-LOAD-BALANCER-SOURCE-CIDR", "198.51.100.10,tcp:80,203.0.113.0/24", "LB-SOURCE-CIDR", "198.51.100.10,tcp:80,203.0.113.0/24"},
		{"KUBE-IPVS-IPS", "10.96.0.10", "VIPS", "10.96.0.10"},
		{"KUBE-SOMETHING-NEW", "x", "KUBE:SOMETHING-NEW", "x"},
	}
	for _, c := range cases {
		name, out, ok := setEntry(c.set, c.entry)
		if !ok || name != c.name || out != c.out {
			t.Errorf("setEntry(%s, %s) = %s %s %v, want %s %s", c.set, c.entry, name, out, ok, c.name, c.out)
		}
	}
	if _, _, ok := setEntry("OTHER", "1.2.3.4"); ok {
		t.Error("a set of neither proxy was kept")
	}
}

func TestReadSetsSkipsHeaders(t *testing.T) {
	s := state{}
	in := "create KUBE-NODE-PORT-TCP bitmap:port range 0-65535\nadd KUBE-NODE-PORT-TCP 30080\n"
	if err := readSets(strings.NewReader(in), s); err != nil {
		t.Fatal(err)
	}
	if want := (state{"set NODE-PORT tcp:30080": true}); !reflect.DeepEqual(s, want) {
		t.Errorf("got %v, want %v", s, want)
	}
}

func TestDisjointLocalDropsOnlyEntriesOfTheTwin(t *testing.T) {
	s := state{
		"set NODE-PORT tcp:30080": true, "set NODE-PORT tcp:30081": true,
		"set NODE-PORT-LOCAL tcp:30081":      true,
		"set LOAD-BALANCER-6 fd00::5,tcp:80": true, "set LOAD-BALANCER-LOCAL-6 fd00::5,tcp:80": true,
	}
	disjointLocal(s)
	want := state{
		"set NODE-PORT tcp:30080": true, "set NODE-PORT-LOCAL tcp:30081": true,
		"set LOAD-BALANCER-LOCAL-6 fd00::5,tcp:80": true,
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("got %v, want %v", s, want)
	}
}

func TestDiffSignsAndOrder(t *testing.T) {
	kp := state{"ipvs -t 10.96.0.20:80 -s rr -p 300": true, "addr 10.96.0.10/32": true, "set X b": true}
	ki := state{"ipvs -t 10.96.0.20:80 -s sh": true, "addr 10.96.0.10/32": true, "set X a": true}
	got := diff(kp, ki)
	want := []string{
		"- ipvs -t 10.96.0.20:80 -s rr -p 300",
		"+ ipvs -t 10.96.0.20:80 -s sh",
		"+ set X a",
		"- set X b",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if d := diff(kp, kp); len(d) != 0 {
		t.Errorf("a state differs from itself: %q", d)
	}
}
