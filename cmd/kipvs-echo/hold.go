package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// hold opens one TCP connection to the address and, every interval, sends a line and reads
// the answer until stdin ends (the caller closes it when it has seen enough). Every answer
// must come on that connection from the server that answered first: a proxy that breaks or
// moves established connections makes it fail. It prints "connected to NAME" once the
// connection is up and a summary at the end; it exits 1 at the first failure.
func hold(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("hold", pflag.ContinueOnError)
	every := fs.Duration("every", time.Second, "time between two requests on the connection")
	timeout := fs.Duration("timeout", 5*time.Second, "time limit of the connect and of each answer")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: kipvs-echo hold [--every D] [--timeout D] HOST:PORT (ends when stdin ends)")
		return 2
	}
	addr := fs.Arg(0)
	c, err := net.DialTimeout("tcp", addr, *timeout)
	if err != nil {
		fmt.Fprintf(stderr, "hold %s: %v\n", addr, err)
		return 1
	}
	defer c.Close()
	r := bufio.NewReader(c)
	read := func() (string, error) {
		_ = c.SetReadDeadline(time.Now().Add(*timeout))
		line, err := r.ReadString('\n')
		return strings.TrimSpace(line), err
	}
	first, err := read()
	if err != nil {
		fmt.Fprintf(stderr, "hold %s: first answer: %v\n", addr, err)
		return 1
	}
	fmt.Fprintf(stdout, "connected to %s from %s\n", first, c.LocalAddr())
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, stdin); close(done) }()
	start, answers := time.Now(), 0
	tick := time.NewTicker(*every)
	defer tick.Stop()
	for {
		select {
		case <-done:
			fmt.Fprintf(stdout, "held the connection to %s for %s: %d answers, all from %s\n",
				addr, time.Since(start).Round(time.Second), answers, first)
			return 0
		case <-tick.C:
		}
		if _, err := c.Write([]byte("who\n")); err != nil {
			fmt.Fprintf(stderr, "hold %s: after %d answers in %s: %v\n", addr, answers, time.Since(start).Round(time.Second), err)
			return 1
		}
		got, err := read()
		if err != nil || got != first {
			fmt.Fprintf(stderr, "hold %s: after %d answers in %s: got %q (%v), want %q\n",
				addr, answers, time.Since(start).Round(time.Second), got, err, first)
			return 1
		}
		answers++
	}
}
