//go:build guest

package ipvs

import (
	"fmt"
	"io"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/test/guestutil"
)

// The kernel answers the contract as the fake does (contract_test.go): each case on an
// empty IPVS table of a network namespace of its own.
func TestGuestKernelContract(t *testing.T) {
	guestutil.RequireGuest(t)
	n := 0
	kernelContract(t, func(t *testing.T) Kernel {
		n++
		pod := guestutil.NewPod(t, fmt.Sprintf("kc%d", n))
		k, err := NewKernelAt(pod.NS)
		if err != nil {
			t.Fatalf("NewKernelAt: %v", err)
		}
		t.Cleanup(func() { _ = k.(io.Closer).Close() })
		return k
	})
}
