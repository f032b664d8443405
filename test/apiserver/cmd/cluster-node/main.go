// Command cluster-node is the guest side's helper of `make cluster` (hack/cluster/node.sh),
// with no Kubernetes library so it stays small:
//
//	cluster-node connect-proxy --listen ADDR
//	cluster-node pod-cidr --server URL --ca FILE --cert FILE --key FILE --node NAME [--timeout D]
//	cluster-node agent --listen ADDR
//
// connect-proxy is an HTTP CONNECT proxy: the API server on the host reaches the kubelet and
// the pods through it (its egress selector sends "cluster" traffic to a Unix socket that
// cluster-host forwards to a QEMU hostfwd of ADDR). pod-cidr waits until the Node object
// has a podCIDR (the controller manager allocates it after the kubelet registers) and prints
// it, reading the Node with the kubelet's own credential. agent runs the operator checks'
// node-side commands for cluster-host (agent.go).
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: cluster-node connect-proxy|pod-cidr|agent [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "connect-proxy":
		err = connectProxy(os.Args[2:])
	case "pod-cidr":
		err = podCIDR(os.Args[2:])
	case "agent":
		err = agent(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster-node:", err)
		os.Exit(1)
	}
}

func connectProxy(args []string) error {
	fs := flag.NewFlagSet("connect-proxy", flag.ExitOnError)
	listen := fs.String("listen", ":8132", "address to serve on")
	fs.Parse(args)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go tunnel(c)
	}
}

// tunnel answers one CONNECT request on c and then copies bytes both ways.
func tunnel(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect {
		fmt.Fprintf(c, "HTTP/1.1 405 Method Not Allowed\r\n\r\n")
		return
	}
	up, err := net.DialTimeout("tcp", req.Host, 10*time.Second)
	if err != nil {
		fmt.Fprintf(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		fmt.Fprintf(os.Stderr, "connect-proxy: %s: %v\n", req.Host, err)
		return
	}
	defer up.Close()
	fmt.Fprintf(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	done := make(chan struct{}, 2)
	go func() {
		// What the client sent after its request is in br's buffer.
		_, _ = io.Copy(up, br)
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(c, up)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}()
	<-done
	<-done
}

func podCIDR(args []string) error {
	fs := flag.NewFlagSet("pod-cidr", flag.ExitOnError)
	server := fs.String("server", "", "the API server's URL")
	caFile := fs.String("ca", "", "the cluster CA")
	certFile := fs.String("cert", "", "client certificate")
	keyFile := fs.String("key", "", "client key")
	node := fs.String("node", "", "the Node's name")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long to wait")
	fs.Parse(args)
	ca, err := os.ReadFile(*caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("%s: no certificate", *caFile)
	}
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	url := *server + "/api/v1/nodes/" + *node
	var last string
	for {
		cidr, status, err := get(ctx, client, url)
		if err == nil && cidr != "" {
			fmt.Println(cidr)
			return nil
		}
		if now := fmt.Sprint(status, err); now != last {
			fmt.Fprintf(os.Stderr, "pod-cidr: %s: %s (waiting)\n", *node, now)
			last = now
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no podCIDR on Node %s after %s", *node, *timeout)
		case <-time.After(time.Second):
		}
	}
}

func get(ctx context.Context, client *http.Client, url string) (string, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", resp.Status, nil
	}
	var n struct {
		Spec struct {
			PodCIDR string `json:"podCIDR"`
		} `json:"spec"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&n); err != nil {
		return "", "", err
	}
	return n.Spec.PodCIDR, "no podCIDR yet", nil
}
