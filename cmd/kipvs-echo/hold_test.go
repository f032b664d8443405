package main

import (
	"bytes"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/test/echoserver"
)

func TestHoldKeepsOneConnectionUntilStdinEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int32
	go func() { _ = echoserver.ServeTCP(ln, echoserver.Name("b1"), func() { conns.Add(1) }) }()

	stdinR, stdinW := io.Pipe()
	var out, errOut bytes.Buffer
	rc := make(chan int, 1)
	go func() { rc <- hold([]string{"--every", "20ms", ln.Addr().String()}, stdinR, &out, &errOut) }()
	time.Sleep(200 * time.Millisecond)
	stdinW.Close()
	if got := <-rc; got != 0 {
		t.Fatalf("hold exited %d, stderr %q", got, errOut.String())
	}
	if !strings.HasPrefix(out.String(), "connected to b1") || !strings.Contains(out.String(), "all from b1") {
		t.Fatalf("output %q", out.String())
	}
	if conns.Load() != 1 {
		t.Fatalf("the server saw %d connections, want 1", conns.Load())
	}
}

func TestHoldFailsWhenTheConnectionBreaks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write([]byte("b1\n"))
		time.Sleep(50 * time.Millisecond)
		c.Close() // a proxy that drops the established connection
	}()
	stdinR, _ := io.Pipe()
	var out, errOut bytes.Buffer
	if got := hold([]string{"--every", "20ms", "--timeout", "1s", ln.Addr().String()}, stdinR, &out, &errOut); got != 1 {
		t.Fatalf("hold exited %d on a broken connection, want 1 (stdout %q)", got, out.String())
	}
	if !strings.Contains(errOut.String(), "after") {
		t.Fatalf("stderr %q does not say when it broke", errOut.String())
	}
}
