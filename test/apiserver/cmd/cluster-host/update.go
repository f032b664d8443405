package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/kube-ipvs/kube-ipvs/test/apiserver/controlplane"
)

// holder is `kipvs-echo hold` running in the client Pod through kubectl exec: one TCP
// connection through the echo ClusterIP, asked every second until its stdin closes.
type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   syncBuf
	first string
	done  chan error
}

func (c *checker) hold(ctx context.Context, pod, target string) (*holder, error) {
	h := &holder{done: make(chan error, 1)}
	h.cmd = exec.CommandContext(ctx, filepath.Join(c.h.Bin, "kubectl"), "--kubeconfig="+c.h.adminKC,
		"exec", "-i", pod, "--", "kipvs-echo", "hold", "--every", "1s", target)
	var err error
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	h.cmd.Stderr = &h.out
	if err := h.cmd.Start(); err != nil {
		return nil, err
	}
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case first <- sc.Text():
			default:
			}
			h.out.WriteString(sc.Text() + "\n")
		}
		h.done <- h.cmd.Wait()
	}()
	select {
	case h.first = <-first:
		if !strings.HasPrefix(h.first, "connected to ") {
			return nil, fmt.Errorf("hold %s: %q", target, h.first)
		}
		return h, nil
	case err := <-h.done:
		return nil, fmt.Errorf("hold %s ended at once: %v: %s", target, err, h.out.String())
	case <-time.After(time.Minute):
		_ = h.cmd.Process.Kill()
		return nil, fmt.Errorf("hold %s: no connection within a minute", target)
	}
}

// end closes the holder's stdin and returns its verdict.
func (h *holder) end() (string, error) {
	_ = h.stdin.Close()
	select {
	case err := <-h.done:
		if err != nil {
			return "", fmt.Errorf("the held connection failed: %v: %s", err, h.out.String())
		}
	case <-time.After(time.Minute):
		_ = h.cmd.Process.Kill()
		return "", fmt.Errorf("hold did not end: %s", h.out.String())
	}
	return strings.TrimSpace(h.out.String()), nil
}

// updateAndRecreate holds a connection through the echo ClusterIP from a client on every
// node while the DaemonSet rolls to kube-ipvs:cluster-next across the nodes (maxUnavailable
// as deploy/ ships it) and while the first node's Pod is then deleted and re-created by the
// DaemonSet controller; every held connection keeps answering from the same backend, and
// each new Pod's first sync must write nothing.
func (c *checker) updateAndRecreate(ctx context.Context) (string, error) {
	clients, err := c.nodeClients(ctx)
	if err != nil {
		return "", err
	}
	var held []*holder
	defer func() {
		for _, h := range held {
			_ = h.cmd.Process.Kill()
		}
	}()
	for _, node := range c.h.nodes {
		h, err := c.hold(ctx, clients[node.name], c.echoIP+":9000")
		if err != nil {
			return "", fmt.Errorf("from %s: %w", node.name, err)
		}
		held = append(held, h)
	}
	olds, err := c.waitProxyPods(ctx, "kube-ipvs:cluster")
	if err != nil {
		return "", err
	}
	for _, p := range olds {
		c.keepLog(ctx, p.Name)
	}
	t := time.Now()
	if _, _, err := c.h.kubectl(ctx, "-n", "kube-system", "set", "image", "ds/kube-ipvs",
		"kube-ipvs=kube-ipvs:cluster-next", "init=kube-ipvs:cluster-next"); err != nil {
		return "", err
	}
	var firsts []string
	var updated []string
	for i, node := range c.h.nodes {
		p, err := c.waitProxyPod(ctx, node.name, olds[i].Name, "kube-ipvs:cluster-next")
		if err != nil {
			return "", err
		}
		first, err := c.firstSync(ctx, p.Name)
		if err != nil {
			return "", err
		}
		firsts = append(firsts, node.name+": "+first)
		updated = append(updated, p.Name)
		c.keepLog(ctx, p.Name)
	}
	dUpdate := time.Since(t)
	t = time.Now()
	if _, _, err := c.h.kubectl(ctx, "-n", "kube-system", "delete", "pod", updated[0], "--wait=false"); err != nil {
		return "", err
	}
	recreated, err := c.waitProxyPod(ctx, c.h.nodes[0].name, updated[0], "kube-ipvs:cluster-next")
	if err != nil {
		return "", err
	}
	dRecreate := time.Since(t)
	first, err := c.firstSync(ctx, recreated.Name)
	if err != nil {
		return "", err
	}
	var verdicts []string
	for i, h := range held {
		verdict, err := h.end()
		if err != nil {
			return "", fmt.Errorf("the connection held from %s: %w", c.h.nodes[i].name, err)
		}
		verdicts = append(verdicts, c.h.nodes[i].name+": "+lastLine(verdict))
	}
	held = nil
	return fmt.Sprintf("rolled %d node(s) to cluster-next in %s (first syncs: %s); %s's Pod re-created in %s (Pod %s, first sync %s); held connections: %s",
		len(c.h.nodes), dUpdate.Round(time.Second), strings.Join(firsts, "; "), c.h.nodes[0].name,
		dRecreate.Round(time.Second), recreated.Name, first, strings.Join(verdicts, "; ")), nil
}

var firstSyncRE = regexp.MustCompile(`msg="sync done" full=true services=(\d+) (ipvs_writes=\d+ addr_writes=\d+ ipset_writes=\d+ iptables_restores=\d+ errors=\d+)`)

// firstSync waits for the Pod's first sync in its log and checks that it wrote nothing.
func (c *checker) firstSync(ctx context.Context, pod string) (string, error) {
	var m []string
	var log string
	err := controlplane.Poll(2*time.Minute, "the first sync of "+pod, func() bool {
		log, _, _ = c.h.kubectl(ctx, "-n", "kube-system", "logs", pod, "-c", "kube-ipvs")
		m = firstSyncRE.FindStringSubmatch(log)
		return m != nil
	})
	if err != nil {
		return "", fmt.Errorf("%w:\n%s", err, log)
	}
	if m[2] != "ipvs_writes=0 addr_writes=0 ipset_writes=0 iptables_restores=0 errors=0" {
		return "", fmt.Errorf("the first sync of %s: %s, want every count 0", pod, m[0])
	}
	return fmt.Sprintf("%s services, %s", m[1], m[2]), nil
}

// keepLog saves a kube-ipvs Pod's log (both containers) for logsClean before the Pod goes.
func (c *checker) keepLog(ctx context.Context, pod string) {
	for _, ctr := range []string{"init", "kube-ipvs"} {
		log, _, err := c.h.kubectl(ctx, "-n", "kube-system", "logs", pod, "-c", ctr)
		if err != nil {
			log = "kubectl logs failed: " + err.Error()
		}
		c.proxyLog = append(c.proxyLog, fmt.Sprintf("=== %s/%s\n%s", pod, ctr, log))
	}
}

// logsClean checks every kube-ipvs log seen (the Pods gone by and the current ones): no
// error-level line.
func (c *checker) logsClean(ctx context.Context) (string, error) {
	pods, err := c.waitProxyPods(ctx, "")
	if err != nil {
		return "", err
	}
	for _, p := range pods {
		c.keepLog(ctx, p.Name)
	}
	var errs []string
	warns, lines := 0, 0
	for _, log := range c.proxyLog {
		for _, line := range strings.Split(log, "\n") {
			lines++
			switch {
			case strings.Contains(line, "level=ERROR"), strings.HasPrefix(line, "kubectl logs failed"):
				errs = append(errs, line)
			case strings.Contains(line, "level=WARN"):
				warns++
				logf("  warning in a kube-ipvs log: %s", line)
			}
		}
	}
	if len(errs) > 0 {
		return "", fmt.Errorf("%d error lines:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	return fmt.Sprintf("%d logs, %d lines, 0 errors, %d warnings", len(c.proxyLog), lines, warns), nil
}

func lastLine(s string) string {
	if i := strings.LastIndex(s, "\n"); i >= 0 {
		return s[i+1:]
	}
	return s
}

// syncBuf is a strings.Builder that two goroutines may write (the command's stdout reader and
// its stderr copier).
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) WriteString(p string) {
	_, _ = s.Write([]byte(p))
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
