// Package adapters connects the kernel reconcilers (packages ipvs, dummyif, ipset and
// iptables, with the pure package firewall) to the controller's interfaces, so that the
// kernel packages stay independent of the controller and of each other.
//
// cmd/kube-ipvs builds its reconcilers with these constructors, and so does the scale bench
// (package bench): both run exactly the same code between the controller and the kernel.
package adapters
