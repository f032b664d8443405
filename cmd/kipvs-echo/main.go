// Command kipvs-echo is the test backend and client of the guest bench and the demo: a server
// that answers every TCP connection and UDP datagram with its name, and a client that sends
// requests to an address and counts which names answered. It is not part of the proxy.
//
//	kipvs-echo serve --name NAME [--tcp PORT] [--udp PORT] [--http PORT] [--who]
//	kipvs-echo ask [--udp [--source-port P]] [--count N] [--summary] HOST:PORT
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
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
	fmt.Fprintln(stderr, <-errc)
	return 1
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

func ask(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("ask", pflag.ContinueOnError)
	udp := fs.Bool("udp", false, "send a UDP datagram instead of connecting over TCP")
	count := fs.Int("count", 1, "how many requests (each a new connection or source port)")
	summary := fs.Bool("summary", false, "print how many answers each name gave instead of every answer")
	timeout := fs.Duration("timeout", 3*time.Second, "time limit of each request")
	sport := fs.Uint16("source-port", 0, "send from this local port (UDP only): every request, and every run, is then one flow to conntrack")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 || (*sport != 0 && !*udp) {
		fmt.Fprintln(stderr, "usage: kipvs-echo ask [--udp [--source-port P]] [--count N] [--summary] HOST:PORT")
		return 2
	}
	addr := fs.Arg(0)
	counts := map[string]int{}
	failed := 0
	for i := 0; i < *count; i++ {
		name, err := once(addr, *udp, *sport, *timeout)
		if err != nil {
			failed++
			fmt.Fprintf(stderr, "request %d to %s: %v\n", i+1, addr, err)
			continue
		}
		counts[name]++
		if !*summary {
			fmt.Fprintln(stdout, name)
		}
	}
	if *summary {
		names := make([]string, 0, len(counts))
		for n := range counts {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(stdout, "%-12s %d\n", n, counts[n])
		}
		if failed > 0 {
			fmt.Fprintf(stdout, "%-12s %d\n", "(failed)", failed)
		}
	}
	if failed > 0 {
		return 1
	}
	return 0
}

func once(addr string, udp bool, sport uint16, timeout time.Duration) (string, error) {
	network := "tcp"
	if udp {
		network = "udp"
	}
	d := net.Dialer{Timeout: timeout}
	if sport != 0 {
		d.LocalAddr = &net.UDPAddr{Port: int(sport)}
	}
	c, err := d.Dial(network, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if udp {
		if _, err := c.Write([]byte("who\n")); err != nil {
			return "", err
		}
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && !(errors.Is(err, io.EOF) && line != "") {
		return "", err
	}
	return strings.TrimSpace(line), nil
}
