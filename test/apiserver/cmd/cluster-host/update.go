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

func (c *checker) hold(ctx context.Context, target string) (*holder, error) {
	h := &holder{done: make(chan error, 1)}
	h.cmd = exec.CommandContext(ctx, filepath.Join(c.h.Bin, "kubectl"), "--kubeconfig="+c.h.adminKC,
		"exec", "-i", "client", "--", "kipvs-echo", "hold", "--every", "1s", target)
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

// updateAndRecreate holds a connection through the echo ClusterIP while the DaemonSet rolls to
// kube-ipvs:cluster-next and while its Pod is then deleted and re-created; each new Pod's first
// sync must write nothing.
func (c *checker) updateAndRecreate(ctx context.Context) (string, error) {
	held, err := c.hold(ctx, c.echoIP+":9000")
	if err != nil {
		return "", err
	}
	defer func() { _ = held.cmd.Process.Kill() }()
	old, err := c.waitProxyPod(ctx, "", "kube-ipvs:cluster")
	if err != nil {
		return "", err
	}
	c.keepLog(ctx, old.Name)
	t := time.Now()
	if _, _, err := c.h.kubectl(ctx, "-n", "kube-system", "set", "image", "ds/kube-ipvs",
		"kube-ipvs=kube-ipvs:cluster-next", "init=kube-ipvs:cluster-next"); err != nil {
		return "", err
	}
	updated, err := c.waitProxyPod(ctx, old.Name, "kube-ipvs:cluster-next")
	if err != nil {
		return "", err
	}
	dUpdate := time.Since(t)
	first1, err := c.firstSync(ctx, updated.Name)
	if err != nil {
		return "", err
	}
	c.keepLog(ctx, updated.Name)
	t = time.Now()
	if _, _, err := c.h.kubectl(ctx, "-n", "kube-system", "delete", "pod", updated.Name, "--wait=false"); err != nil {
		return "", err
	}
	recreated, err := c.waitProxyPod(ctx, updated.Name, "kube-ipvs:cluster-next")
	if err != nil {
		return "", err
	}
	dRecreate := time.Since(t)
	first2, err := c.firstSync(ctx, recreated.Name)
	if err != nil {
		return "", err
	}
	verdict, err := held.end()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("rolled to cluster-next in %s (Pod %s), re-created in %s (Pod %s); first syncs: %s / %s; %s",
		dUpdate.Round(time.Second), updated.Name, dRecreate.Round(time.Second), recreated.Name, first1, first2,
		lastLine(verdict)), nil
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

// logsClean checks every kube-ipvs log seen (the Pods gone by and the current one): no
// error-level line.
func (c *checker) logsClean(ctx context.Context) (string, error) {
	pod, err := c.waitProxyPod(ctx, "", "")
	if err != nil {
		return "", err
	}
	c.keepLog(ctx, pod.Name)
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
