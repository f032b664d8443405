package iptables

import (
	"strings"
	"testing"
)

// RemoveChains deletes the selected chains and every rule that targets one, from built-in
// and foreign chains alike, and leaves every other chain and rule as it was.
func TestRemoveChainsTakesOnlyTheSelectedChainsAndTheirJumps(t *testing.T) {
	f := NewFakeExec()
	state := `*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:FOREIGN - [0:0]
:KIPVS-SERVICES - [0:0]
:KIPVS-MARK-MASQ - [0:0]
-A PREROUTING -j FOREIGN
-A PREROUTING -m comment --comment "kube-ipvs: services" -j KIPVS-SERVICES
-A OUTPUT -j KIPVS-SERVICES
-A FOREIGN -d 192.0.2.1/32 -j ACCEPT
-A FOREIGN -g KIPVS-MARK-MASQ
-A KIPVS-SERVICES -j KIPVS-MARK-MASQ
-A KIPVS-MARK-MASQ -j MARK --or-mark 0x4000
COMMIT
*filter
:INPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
-A INPUT -j KUBE-FIREWALL
-A KUBE-FIREWALL -j DROP
COMMIT
`
	if err := f.Load("iptables-nft", state); err != nil {
		t.Fatal(err)
	}
	tools := NewTools(f, Config{Backend: NFT})
	have, err := tools.SaveOn(NFT, V4)
	if err != nil {
		t.Fatal(err)
	}
	tx := RemoveChains(have, IsOurs)
	want := `*nat
-D PREROUTING -m comment --comment "kube-ipvs: services" -j KIPVS-SERVICES
-D OUTPUT -j KIPVS-SERVICES
-D FOREIGN -g KIPVS-MARK-MASQ
-F KIPVS-MARK-MASQ
-F KIPVS-SERVICES
-X KIPVS-MARK-MASQ
-X KIPVS-SERVICES
COMMIT
`
	diffText(t, "removal", tx.String(), want)
	if n := len(tx.Ops()); n != 7 {
		t.Errorf("Ops: %d, want 7", n)
	}
	if err := tools.RestoreOn(NFT, V4, tx); err != nil {
		t.Fatalf("the fake tool refuses the removal: %v", err)
	}
	after := f.Save("iptables-nft")
	if strings.Contains(after, "KIPVS-") {
		t.Errorf("KIPVS- left:\n%s", after)
	}
	for _, keep := range []string{"-A PREROUTING -j FOREIGN", "-A FOREIGN -d 192.0.2.1/32 -j ACCEPT", "-A INPUT -j KUBE-FIREWALL", "-A KUBE-FIREWALL -j DROP"} {
		if !strings.Contains(after, keep) {
			t.Errorf("foreign rule %q gone:\n%s", keep, after)
		}
	}
	have, _ = tools.SaveOn(NFT, V4)
	if tx := RemoveChains(have, IsOurs); !tx.Empty() {
		t.Errorf("second removal is not empty:\n%s", tx)
	}
}
