// Package e2e runs the real kube-ipvs binary inside the test guest on static manifests and
// checks, with real packets, where traffic lands. Its tests carry the build tag "guest".
package e2e
