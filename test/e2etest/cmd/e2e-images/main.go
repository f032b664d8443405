// Command e2e-images prints "NAME REFERENCE" per image hack/conformance/build.sh builds, the
// reference read from the e2e suite's image manifest, so that the script names no tag itself.
package main

import (
	"fmt"
	"os"

	"github.com/kube-ipvs/kube-ipvs/test/e2etest"
)

func main() {
	for _, n := range e2etest.Names() {
		ref, err := e2etest.Ref(n)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e-images:", err)
			os.Exit(1)
		}
		fmt.Println(n, ref)
	}
}
