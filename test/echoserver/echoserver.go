// Package echoserver is the name-answering backend that the guest tests (through package
// guestutil), the guest bench and the demo (through cmd/kipvs-echo) share: a client learns
// from the answer which backend, or the node, its request reached, and optionally with which
// source address.
//
// It imports no testing package, so a command can use it.
package echoserver

import (
	"bufio"
	"net"
)

// Reply returns what to send a client, by its address.
type Reply func(client net.Addr) string

// Name answers every client with name.
func Name(name string) Reply {
	return func(net.Addr) string { return name }
}

// NameAndClient answers "NAME CLIENT-IP": a client can see whether its own address reached
// the backend or was masqueraded.
func NameAndClient(name string) Reply {
	return func(client net.Addr) string {
		host, _, _ := net.SplitHostPort(client.String())
		return name + " " + host
	}
}

// ServeTCP accepts connections on ln until Accept fails, and returns that error (closing ln
// stops it). Each connection gets the reply and a newline when it opens and again for every
// line the client sends, so a client can hold a connection open and check that it still
// reaches the same server. served, when not nil, is called once per connection.
func ServeTCP(ln net.Listener, reply Reply, served func()) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		if served != nil {
			served()
		}
		go answerLines(c, reply(c.RemoteAddr()))
	}
}

func answerLines(c net.Conn, answer string) {
	defer c.Close()
	if _, err := c.Write([]byte(answer + "\n")); err != nil {
		return
	}
	r := bufio.NewReader(c)
	for {
		if _, err := r.ReadString('\n'); err != nil {
			return
		}
		if _, err := c.Write([]byte(answer + "\n")); err != nil {
			return
		}
	}
}

// ServeUDP answers every datagram on pc with the reply and a newline until reading fails,
// and returns that error (closing pc stops it). served, when not nil, is called once per
// datagram.
func ServeUDP(pc net.PacketConn, reply Reply, served func()) error {
	buf := make([]byte, 1500)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		if served != nil {
			served()
		}
		_, _ = pc.WriteTo([]byte(reply(from)+"\n"), from)
	}
}
