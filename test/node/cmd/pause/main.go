// Command pause is the program of the pause container, the one that holds a Pod's namespaces.
//
// Upstream's is C (kubernetes build/pause/linux/pause.c) and is built with a C toolchain inside
// an image build. This is the same behaviour in Go, so that it builds here like every other
// binary of the cluster, statically and without a C cross toolchain or an image builder:
//   - "-v" prints the version and exits 0;
//   - it warns when it is not PID 1;
//   - SIGINT and SIGTERM make it say so and exit 0;
//   - SIGCHLD makes it reap every exited child (it is the Pod's init when PID namespaces are
//     shared);
//   - otherwise it sleeps forever.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const version = "kube-ipvs-pause-1"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Printf("pause.go %s\n", version)
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "Shutting down, got signal: %s\n", sig)
		os.Exit(0)
	}
}

// reap collects every child that has exited, without blocking: signals coalesce, so one
// SIGCHLD may stand for several children.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
