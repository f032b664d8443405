// Command kube-apiserver is upstream's kube-apiserver, built from the k8s.io/kubernetes Go
// module for the end-to-end tests (make e2e). Nothing is copied: it only calls upstream.
package main

import (
	"os"
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
