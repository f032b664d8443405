// Command gendoc writes docs/kubeproxyconfiguration.md from package config's field table:
// `go generate ./config`.
package main

import (
	"fmt"
	"os"

	"github.com/kube-ipvs/kube-ipvs/config"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gendoc FILE")
		os.Exit(2)
	}
	if err := os.WriteFile(os.Args[1], []byte(config.KubeProxyFieldTable()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
