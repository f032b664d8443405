package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// kubectl runs kubectl as the admin, as a user would, and returns its combined output and how
// long it took.
func (h *host) kubectl(ctx context.Context, args ...string) (string, time.Duration, error) {
	t := time.Now()
	out, err := exec.CommandContext(ctx, filepath.Join(h.Bin, "kubectl"),
		append([]string{"--kubeconfig=" + h.adminKC, "--request-timeout=60s"}, args...)...).CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		return s, time.Since(t), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, s)
	}
	return s, time.Since(t), nil
}

// agentReply is cluster-node agent's answer (test/apiserver/cmd/cluster-node/agent.go).
type agentReply struct {
	Exit   int       `json:"exit"`
	Output string    `json:"output"`
	Error  string    `json:"error"`
	End    time.Time `json:"end"` // the node's clock when the command ended
}

// onNode runs argv on the node whose address is addr (or, at routerIP, on the network,
// where the "outside" namespace is) through cluster-node's agent there, reached like the
// kubelet: through the guest's CONNECT proxy, on the host's loopback.
func (h *host) onNode(ctx context.Context, addr string, timeout time.Duration, argv ...string) (agentReply, error) {
	body, _ := json.Marshal(map[string]any{"argv": argv, "timeout": timeout.String()})
	rep, err := h.agent(ctx, addr, timeout, http.MethodPost, "/run", body)
	if err == nil && rep.Error != "" {
		err = fmt.Errorf("on %s: %s: %s", addr, strings.Join(argv, " "), rep.Error)
	}
	return rep, err
}

// ipvsOnNode reads the node's IPVS table and connections, as ipvsadm -Ln and -Lnc print
// them with "==" between, from /proc without running a process on the node (the agent's
// GET /ipvs): cheap enough to poll every 100 ms on an emulated node under load.
func (h *host) ipvsOnNode(ctx context.Context, addr string) (agentReply, error) {
	rep, err := h.agent(ctx, addr, 5*time.Second, http.MethodGet, "/ipvs", nil)
	if err == nil && rep.Error != "" {
		err = fmt.Errorf("on the node: reading the IPVS tables: %s", rep.Error)
	}
	return rep, err
}

// agent makes one request to cluster-node's agent.
func (h *host) agent(ctx context.Context, addr string, timeout time.Duration, method, path string, body []byte) (agentReply, error) {
	var rep agentReply
	err := h.agentJSON(ctx, addr, timeout, method, path, body, &rep)
	return rep, err
}

// agentJSON makes one request to cluster-node's agent and decodes its JSON answer into out.
func (h *host) agentJSON(ctx context.Context, addr string, timeout time.Duration, method, path string, body []byte, out any) error {
	client := &http.Client{Timeout: timeout + 10*time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return h.connect(ctx, addr)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("http://%s:%d%s", addr, agentPort, path), bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("node agent: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("node agent: %s", resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// connect opens a tunnel to addr in the guest through its CONNECT proxy (QEMU's hostfwd).
func (h *host) connect(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", h.fwdPort))
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		conn.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		conn.Close()
		return nil, fmt.Errorf("CONNECT %s: %s", addr, resp.Status)
	}
	if br.Buffered() > 0 {
		conn.Close()
		return nil, fmt.Errorf("CONNECT %s: unexpected bytes after the answer", addr)
	}
	return conn, nil
}
