//go:build !guest

package ipset

import "testing"

// On the host these run in a network namespace each test creates (netnstest.EnterNew); the
// host's own namespace is never touched. The same tests run in the guest (kernel_guest_test.go).

func TestHostKernelEverySetType(t *testing.T)           { testKernelEverySetType(t) }
func TestHostKernelErrors(t *testing.T)                 { testKernelErrors(t) }
func TestHostReconcilerOnKernel(t *testing.T)           { testReconcilerOnKernel(t) }
func TestHostKernelRebuildBySwap(t *testing.T)          { testRebuildBySwap(t) }
func TestHostLargeSetBeyondDefaultMaxElem(t *testing.T) { testLargeSetBeyondDefaultMaxElem(t) }
func TestHostBackgroundListingParks(t *testing.T)       { testBackgroundListingParks(t) }
