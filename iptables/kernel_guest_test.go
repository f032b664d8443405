//go:build guest

package iptables

import (
	"testing"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// RenderRules output restores on both backends of Debian's iptables, on Debian's kernel.

func TestGuestRenderedRulesLegacy(t *testing.T) {
	guestutil.RequireGuest(t)
	testBackendOnKernel(t, Legacy)
}

func TestGuestRenderedRulesNFT(t *testing.T) {
	guestutil.RequireGuest(t)
	testBackendOnKernel(t, NFT)
}

func TestGuestDetectBackend(t *testing.T) {
	guestutil.RequireGuest(t)
	testDetectOnKernel(t)
}
