// Package e2etest pins the Kubernetes end-to-end suite (k8s.io/kubernetes/test/e2e) that
// hack/conformance/build.sh compiles into e2e.test, names the images it builds after the
// suite's image manifest, and tests that the archives carry those names and the tools the
// specs run. A module of its own, so that neither the product's go.mod nor the cluster's
// test/apiserver holds the suite's dependencies.
package e2etest
