package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

func ask(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("ask", pflag.ContinueOnError)
	udp := fs.Bool("udp", false, "send a UDP datagram instead of connecting over TCP")
	count := fs.Int("count", 1, "how many requests (each a new connection or source port)")
	interval := fs.Duration("interval", 0, "time from the start of one request to the start of the next")
	summary := fs.Bool("summary", false, "print how many answers each name gave instead of every answer")
	timeout := fs.Duration("timeout", 3*time.Second, "time limit of each request")
	stalls := fs.Bool("stalls", false, "watch for times the client was not running, and report them with each failure and at the end (on stderr)")
	sport := fs.Uint16("source-port", 0, "send from this local port (UDP only): every request, and every run, is then one flow to conntrack")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 || (*sport != 0 && !*udp) {
		fmt.Fprintln(stderr, "usage: kipvs-echo ask [--udp [--source-port P]] [--count N] [--interval D] [--summary] [--stalls] HOST:PORT")
		return 2
	}
	addr := fs.Arg(0)
	counts := map[string]int{}
	failed := 0
	var watch *stallWatch
	if *stalls {
		stop := make(chan struct{})
		defer close(stop)
		watch = watchStalls(10*time.Millisecond, 100*time.Millisecond, stop)
	}
	next := time.Now()
	for i := 0; i < *count; i++ {
		time.Sleep(time.Until(next))
		next = next.Add(*interval)
		start := time.Now()
		name, err := once(addr, *udp, *sport, *timeout)
		if err != nil {
			failed++
			// The clock times place the failure among the node's other records.
			stalled := ""
			if watch != nil {
				end := time.Now()
				stalled = fmt.Sprintf(" (took %s, the client stalled %s of it)",
					end.Sub(start).Round(time.Millisecond), watch.during(start, end).Round(time.Millisecond))
			}
			fmt.Fprintf(stderr, "request %d at %s to %s%s: %v\n", i+1, start.UTC().Format("15:04:05.000"), addr, stalled, err)
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
	if watch != nil {
		fmt.Fprintln(stderr, watch.report())
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
