//go:build guest

package ipset

import (
	"testing"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// In the guest the same real-kernel tests run on Debian's kernel, each in its own network
// namespace.

func TestGuestKernelEverySetType(t *testing.T) {
	guestutil.RequireGuest(t)
	testKernelEverySetType(t)
}

func TestGuestKernelErrors(t *testing.T) {
	guestutil.RequireGuest(t)
	testKernelErrors(t)
}

func TestGuestReconcilerOnKernel(t *testing.T) {
	guestutil.RequireGuest(t)
	testReconcilerOnKernel(t)
}

func TestGuestKernelRebuildBySwap(t *testing.T) {
	guestutil.RequireGuest(t)
	testRebuildBySwap(t)
}

func TestGuestLargeSetBeyondDefaultMaxElem(t *testing.T) {
	guestutil.RequireGuest(t)
	testLargeSetBeyondDefaultMaxElem(t)
}

func TestGuestBackgroundListingParks(t *testing.T) {
	guestutil.RequireGuest(t)
	testBackgroundListingParks(t)
}
