// Command etcd is upstream's etcd server (go.etcd.io/etcd/server/v3/etcdmain), built for the
// end-to-end tests (make e2e).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
