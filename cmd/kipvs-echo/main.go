// Command kipvs-echo is the test backend and client of the guest bench, the demo and the
// cluster's pods: a server that answers every TCP connection and UDP datagram with its name,
// and clients that send requests to an address and count which names answered, or hold one
// connection open and check that it keeps answering. It is not part of the proxy.
//
//	kipvs-echo serve --name NAME [--tcp PORT] [--udp PORT] [--http PORT] [--who] [--drain D]
//	kipvs-echo ask [--udp [--source-port P]] [--count N] [--interval D] [--summary] [--stalls] HOST:PORT
//	kipvs-echo hold [--every D] HOST:PORT
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/kube-ipvs/kube-ipvs/test/echoserver"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: kipvs-echo serve|ask [flags]")
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "ask":
		return ask(args[1:], stdout, stderr)
	case "hold":
		return hold(args[1:], os.Stdin, stdout, stderr)
	}
	fmt.Fprintf(stderr, "kipvs-echo: unknown command %q\n", args[0])
	return 2
}

func serve(args []string, stderr io.Writer) int {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	name := fs.String("name", "", "the name to answer with")
	tcp := fs.Int("tcp", 0, "TCP port to listen on (all addresses)")
	udp := fs.Int("udp", 0, "UDP port to listen on (all addresses)")
	httpPort := fs.Int("http", 0, "HTTP port to listen on (all addresses): every request gets the answer as its body (the cluster's pod proxy reads it)")
	who := fs.Bool("who", false, "answer \"NAME CLIENT-IP\", so a client can see whether its address was masqueraded")
	drain := fs.Duration("drain", 0, "on SIGTERM keep serving this long, then exit 0, as a server behind a Service does while the proxies stop sending it new connections (0: SIGTERM ends it at once)")
	if err := fs.Parse(args); err != nil || *name == "" || (*tcp == 0 && *udp == 0 && *httpPort == 0) {
		fmt.Fprintln(stderr, "usage: kipvs-echo serve --name NAME [--tcp PORT] [--udp PORT] [--http PORT]")
		return 2
	}
	reply := echoserver.Name(*name)
	if *who {
		reply = echoserver.NameAndClient(*name)
	}
	errc := make(chan error, 3)
	var err error
	if *tcp != 0 {
		err = listenAndServe(net.Listen, "tcp", *tcp, errc,
			func(ln net.Listener) error { return echoserver.ServeTCP(ln, reply, nil) })
	}
	if err == nil && *udp != 0 {
		err = listenAndServe(net.ListenPacket, "udp", *udp, errc,
			func(pc net.PacketConn) error { return echoserver.ServeUDP(pc, reply, nil) })
	}
	if err == nil && *httpPort != 0 {
		err = listenAndServe(net.Listen, "tcp", *httpPort, errc, func(ln net.Listener) error {
			return http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				addr, _ := net.ResolveTCPAddr("tcp", r.RemoteAddr)
				fmt.Fprintln(w, reply(addr))
			}))
		})
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	// In a container the server is PID 1, which the kernel sends no default-handled signal:
	// without this handler SIGTERM would be ignored until the kubelet's SIGKILL.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	select {
	case err := <-errc:
		fmt.Fprintln(stderr, err)
		return 1
	case sig := <-term:
		fmt.Fprintf(stderr, "%s: serving %s more, then exiting\n", sig, *drain)
		time.Sleep(*drain)
		return 0
	}
}

// listenAndServe listens on port (all addresses) and serves there in the background; the
// error that ends serving goes to errc.
func listenAndServe[L any](listen func(network, addr string) (L, error), network string, port int,
	errc chan<- error, serve func(L) error) error {
	l, err := listen(network, fmt.Sprintf(":%d", port))
	if err != nil {
		return err
	}
	go func() { errc <- serve(l) }()
	return nil
}
