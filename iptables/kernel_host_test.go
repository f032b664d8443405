//go:build !guest

package iptables

import "testing"

// On the host these run in a network namespace each test creates (netnstest.EnterNew); the host's
// own rules are never read or written. The guest runs the same tests (kernel_guest_test.go).

func TestHostRenderedRulesLegacy(t *testing.T) { testBackendOnKernel(t, Legacy) }
func TestHostRenderedRulesNFT(t *testing.T)    { testBackendOnKernel(t, NFT) }
func TestHostDetectBackend(t *testing.T)       { testDetectOnKernel(t) }
