// Package suite only pins, in its test file, what the upstream e2e suite's own test file
// imports, so that go mod tidy keeps those modules; hack/conformance/build.sh compiles e2e.test
// with `go test -c k8s.io/kubernetes/test/e2e` in this module. A package of its own, so that
// testing the images (package e2etest) does not compile the whole suite.
package suite
