package echoserver

import (
	"bufio"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestServeTCPAnswersOnConnectAndEveryLine(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int64
	done := make(chan error, 1)
	go func() { done <- ServeTCP(ln, NameAndClient("a"), func() { served.Add(1) }) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	for i, send := range []string{"", "again\n", "again\n"} {
		if send != "" {
			if _, err := c.Write([]byte(send)); err != nil {
				t.Fatal(err)
			}
		}
		line, err := r.ReadString('\n')
		if err != nil || line != "a 127.0.0.1\n" {
			t.Fatalf("answer %d = %q, %v; want \"a 127.0.0.1\\n\"", i, line, err)
		}
	}
	if n := served.Load(); n != 1 {
		t.Errorf("served = %d for one connection, want 1", n)
	}
	ln.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("ServeTCP returned nil after its listener closed, want the Accept error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeTCP did not return after its listener closed")
	}
}

func TestServeUDPAnswersEveryDatagram(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() { _ = ServeUDP(pc, Name("u"), nil) }()
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	for i := 0; i < 2; i++ {
		if _, err := c.Write([]byte("who\n")); err != nil {
			t.Fatal(err)
		}
		n, err := c.Read(buf)
		if err != nil || strings.TrimSpace(string(buf[:n])) != "u" {
			t.Fatalf("datagram %d answered %q, %v; want u", i, buf[:n], err)
		}
	}
}
