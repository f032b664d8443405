package guestutil

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/test/echoserver"
)

// NameServer answers every TCP connection or UDP datagram with its name and a newline, and
// counts what it answered, so a test can tell which backend a request reached.
type NameServer struct {
	Name   string
	served atomic.Int64
}

// Served returns how many requests this server answered.
func (s *NameServer) Served() int64 { return s.served.Load() }

// ServeTCP starts a NameServer on TCP port (all addresses of the pod): it sends its name
// when a client connects and again for each line the client sends. It stops when the test
// ends.
func (p *Pod) ServeTCP(t testing.TB, port int, name string) *NameServer {
	t.Helper()
	s := &NameServer{Name: name}
	ln := p.listenTCP(t, port)
	go func() { _ = echoserver.ServeTCP(ln, echoserver.Name(name), func() { s.served.Add(1) }) }()
	return s
}

// ServeTCPWho starts a server that answers each connection with "NAME SOURCE-IP": a test
// can tell whether the client's address reached the backend or was masqueraded.
func (p *Pod) ServeTCPWho(t testing.TB, port int, name string) {
	t.Helper()
	ln := p.listenTCP(t, port)
	go func() { _ = echoserver.ServeTCP(ln, echoserver.NameAndClient(name), nil) }()
}

// listenTCP listens on TCP port on all addresses of the pod until the test ends.
func (p *Pod) listenTCP(t testing.TB, port int) net.Listener {
	t.Helper()
	var ln net.Listener
	err := p.Do(func() (err error) {
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		t.Fatalf("pod %s: listen tcp/%d: %v", p.Name, port, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// ServeNode answers name on network ("tcp", "tcp4", "tcp6") and addr from the node itself
// (the current namespace), as sshd or the kubelet would, until the test ends.
func ServeNode(t testing.TB, network, addr, name string) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatalf("node: listen %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { _ = echoserver.ServeTCP(ln, echoserver.Name(name), nil) }()
}

// ServeUDP starts a NameServer on UDP port (all addresses of the pod).
func (p *Pod) ServeUDP(t testing.TB, port int, name string) *NameServer {
	t.Helper()
	s := &NameServer{Name: name}
	var pc net.PacketConn
	err := p.Do(func() (err error) {
		pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		t.Fatalf("pod %s: listen udp/%d: %v", p.Name, port, err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() { _ = echoserver.ServeUDP(pc, echoserver.Name(name), func() { s.served.Add(1) }) }()
	return s
}

// AskTCP connects from the pod to addr, returns the first line the server sent.
func (p *Pod) AskTCP(addr netip.AddrPort) (string, error) {
	return askIn(p.NS, "tcp", addr)
}

// AskUDP sends one datagram from the pod to addr and returns the first line of the answer.
func (p *Pod) AskUDP(addr netip.AddrPort) (string, error) {
	return askIn(p.NS, "udp", addr)
}

// AskTCP connects from the current (node) namespace.
func AskTCP(addr netip.AddrPort) (string, error) {
	return ask("tcp", addr)
}

// askTimeout bounds one request; under emulation a round trip takes milliseconds.
const askTimeout = 5 * time.Second

func askIn(ns netns.NsHandle, network string, addr netip.AddrPort) (reply string, err error) {
	var c net.Conn
	err = InNamespace(ns, func() (err error) {
		c, err = net.DialTimeout(network, addr.String(), askTimeout)
		return err
	})
	if err != nil {
		return "", err
	}
	return exchange(c)
}

func ask(network string, addr netip.AddrPort) (string, error) {
	c, err := net.DialTimeout(network, addr.String(), askTimeout)
	if err != nil {
		return "", err
	}
	return exchange(c)
}

func exchange(c net.Conn) (string, error) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(askTimeout))
	if _, ok := c.(*net.UDPConn); ok {
		if _, err := c.Write([]byte("who\n")); err != nil {
			return "", err
		}
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading the answer from %s: %w", c.RemoteAddr(), err)
	}
	return strings.TrimSpace(line), nil
}

// Conn is a long-lived TCP connection through which a test asks the same server again.
type Conn struct {
	c net.Conn
	r *bufio.Reader
	// First is the name the server sent when the connection opened.
	First string
}

// DialTCP opens a connection from the pod to addr and reads the server's greeting.
func (p *Pod) DialTCP(addr netip.AddrPort) (*Conn, error) {
	return p.DialTCPFrom(0, addr)
}

// DialTCPFrom is DialTCP from a fixed local port (0: any), as a client that reuses its
// source port does.
func (p *Pod) DialTCPFrom(localPort int, addr netip.AddrPort) (*Conn, error) {
	var c net.Conn
	err := p.Do(func() (err error) {
		d := net.Dialer{Timeout: askTimeout}
		if localPort != 0 {
			d.LocalAddr = &net.TCPAddr{Port: localPort}
		}
		c, err = d.Dial("tcp", addr.String())
		return err
	})
	if err != nil {
		return nil, err
	}
	conn := &Conn{c: c, r: bufio.NewReader(c)}
	_ = c.SetReadDeadline(time.Now().Add(askTimeout))
	line, err := conn.r.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, err
	}
	conn.First = strings.TrimSpace(line)
	return conn, nil
}

// Ask sends a line and returns the server's answer.
func (c *Conn) Ask() (string, error) {
	_ = c.c.SetDeadline(time.Now().Add(askTimeout))
	if _, err := c.c.Write([]byte("again\n")); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(line), nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Retransmits is how many segments the client has sent again on this connection (the
// kernel's tcpi_total_retrans), the handshake's SYN included: a SYN that was dropped
// counts.
func (c *Conn) Retransmits() (uint32, error) {
	tc, ok := c.c.(*net.TCPConn)
	if !ok {
		return 0, fmt.Errorf("not a TCP connection")
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var info *unix.TCPInfo
	var serr error
	if err := raw.Control(func(fd uintptr) {
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, serr
	}
	return info.Total_retrans, nil
}

// Reset closes the connection with a TCP RST instead of a FIN (SO_LINGER 0), so it leaves no
// TIME_WAIT state behind.
func (c *Conn) Reset() error {
	if tc, ok := c.c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	return c.c.Close()
}

// UDPSocket is one client UDP socket: every datagram has the same source port, as a
// long-lived UDP client's would.
type UDPSocket struct {
	c *net.UDPConn
}

// DialUDP opens a UDP socket in the pod, connected to addr.
func (p *Pod) DialUDP(addr netip.AddrPort) (*UDPSocket, error) {
	var c *net.UDPConn
	err := p.Do(func() (err error) {
		c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
		return err
	})
	if err != nil {
		return nil, err
	}
	return &UDPSocket{c: c}, nil
}

// Ask sends one datagram and returns the first line of the answer.
func (s *UDPSocket) Ask() (string, error) {
	_ = s.c.SetDeadline(time.Now().Add(askTimeout))
	if _, err := s.c.Write([]byte("who\n")); err != nil {
		return "", err
	}
	buf := make([]byte, 1500)
	n, err := s.c.Read(buf)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// Close closes the socket.
func (s *UDPSocket) Close() error { return s.c.Close() }
