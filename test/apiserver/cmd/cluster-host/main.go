// Command cluster-host is the host side of `make cluster` (docs/cluster.md): it runs the
// control plane on the host's loopback (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, package controlplane), boots the guest as the cluster's one node
// (hack/cluster/node.sh), deploys kube-ipvs from deploy/ and CoreDNS, runs the checks as the
// admin (checks.go) and exits with their result; its last line says "N passed, M failed".
//
//	cluster-host --bin DIR --repo DIR --stage DIR [--checks smoke|all] [--proxy kube-ipvs|kube-proxy]
//	cluster-host --bin DIR --repo DIR --stage DIR --checks conformance --conformance DIR
//	      --report DIR [--proxy kube-ipvs|kube-proxy] [--focus RE] [--skip RE] [--procs N]
//	      [--timeout D]
//	cluster-host --checks validate|node-mem [--nodes N]
//	cluster-host --bin DIR --repo DIR --stage DIR --checks sli --kwok PATH --kwok-stages PATH --report DIR
//	cluster-host --checks sli-validate [--nodes N] [--services N] [--replicas N] [--fake-nodes N] [--churn D]
//
// smoke (make cluster) checks the bring-up, the deployment and the traffic through each kind
// of Service; all (make cluster-test) adds the rolling update, the re-created Pod and scaling.
// With --proxy kube-proxy (hack/cluster/kube-proxy: v1.37 in IPVS mode, the reference) they
// run with kube-proxy in place of kube-ipvs, leaving out the checks only kube-ipvs can pass
// (its tools, metrics, logs, and a rolling update that writes nothing).
// conformance (make conformance, conformance.go) deploys the proxy (kube-ipvs from deploy/,
// or kube-proxy in IPVS mode from hack/cluster/kube-proxy) and CoreDNS, waits for the suite's
// images on the node, then runs Kubernetes' e2e.test from --conformance's folder on the host
// against the cluster (ginkgo's --focus and --skip; --procs > 1 runs it through ginkgo's CLI
// in parallel; --timeout is ginkgo's suite timeout, default 6h) and writes its JUnit report,
// log and results.json into --report; its last line counts the specs, not the checks.
// validate (hack/cluster/run.sh) prints the guest memory N nodes of NODE_MEM need, or fails when
// this machine cannot give it; node-mem (hack/conformance/run.sh) prints the memory each node
// gets, NODE_MEM or, unset, the most from 2048 to 4096 MiB (in steps of 256) that N nodes fit.
// Both run before anything is built.
//
// DIR of --bin is hack/cluster/binaries.sh's folder; --stage is the guest payload folder,
// already holding the node's binaries, images and entry; this program adds /payload/node/
// (the CA and the kubelet's client certificate and kubeconfig).
//
// The guest's network is QEMU's restricted user network: the guest reaches the API server
// at 10.0.2.100:6443 and this program's control listener at 10.0.2.100:7000 (guestfwds);
// the API server reaches the kubelet and the pods through its egress selector, which sends
// "cluster" traffic as HTTP CONNECT to a Unix socket this program forwards to a QEMU
// hostfwd of the guest's CONNECT proxy (cluster-node connect-proxy on 10.0.2.15:8132).
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kube-ipvs/kube-ipvs/test/apiserver/controlplane"
)

const (
	guestCtl  = "10.0.2.100:7000"
	proxyPort = 8132 // cluster-node connect-proxy, on routerIP
	agentPort = 8133 // cluster-node agent, on routerIP and on every node's address
)

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "cluster-host: "+format+"\n", a...)
}

func main() { os.Exit(run()) }

func run() int {
	bin := flag("bin")
	repo := flag("repo")
	stage := flag("stage")
	checks := flag("checks")
	if checks == "" {
		checks = "smoke"
	}
	proxy := flag("proxy")
	if proxy == "" {
		proxy = "kube-ipvs"
	}
	maxMem, err := guestMemMax()
	if err != nil {
		logf("%v", err)
		return 2
	}
	nodeMiB, err := nodeMem()
	if err != nil {
		logf("%v", err)
		return 2
	}
	nNodes, err := parseNodes(flag("nodes"), nodeMiB, maxMem)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster-host: %v\n", err)
		return 2
	}
	if checks == "validate" {
		// run.sh asks before it builds anything: the guest memory the nodes need.
		fmt.Println(guestMemMiB(nNodes, nodeMiB))
		return 0
	}
	if checks == "node-mem" {
		// hack/conformance/run.sh asks before it builds anything: the memory each node gets,
		// NODE_MEM when set (validated above), else as much as fits up to 4096 MiB.
		if os.Getenv("NODE_MEM") == "" {
			if nodeMiB, err = nodeMemFor(nNodes, conformanceNodeMemMiB, maxMem); err != nil {
				fmt.Fprintf(os.Stderr, "cluster-host: %v\n", err)
				return 2
			}
		}
		fmt.Println(nodeMiB)
		return 0
	}
	var conf *conformance
	if checks == "conformance" {
		conf = &conformance{dir: flag("conformance"), proxy: proxy, focus: flag("focus"),
			skip: flag("skip"), report: flag("report"), timeout: flag("timeout"), procs: 1}
		if conf.focus == "" {
			conf.focus = `\[sig-network\] Services.*\[Conformance\]`
		}
		if conf.timeout == "" {
			conf.timeout = defaultSuiteTimeout
		}
		if _, err := newSelection(conf.focus, conf.skip); err != nil {
			fmt.Fprintf(os.Stderr, "cluster-host: --focus or --skip: %v\n", err)
			return 2
		}
		if _, err := time.ParseDuration(conf.timeout); err != nil {
			fmt.Fprintf(os.Stderr, "cluster-host: --timeout %q: want a Go duration such as 6h\n", conf.timeout)
			return 2
		}
		if p := flag("procs"); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 {
				fmt.Fprintf(os.Stderr, "cluster-host: --procs %q: want a number above 0\n", p)
				return 2
			}
			conf.procs = n
		}
		if conf.dir == "" || conf.report == "" {
			checks = "" // the usage below
		} else if abs, err := filepath.Abs(conf.report); err == nil {
			conf.report = abs
		}
	}
	var sli *sliRun
	if checks == "sli" || checks == "sli-validate" {
		if sli, err = parseSLI(nNodes, checks == "sli"); err != nil {
			fmt.Fprintf(os.Stderr, "cluster-host: %v\n", err)
			return 2
		}
		if checks == "sli-validate" {
			return 0 // hack/sli/run.sh asks before it builds anything
		}
	}
	if bin == "" || repo == "" || stage == "" || (checks != "smoke" && checks != "all" && checks != "conformance" && checks != "sli") ||
		(proxy != "kube-ipvs" && proxy != "kube-proxy") {
		fmt.Fprintln(os.Stderr, "usage: cluster-host --bin DIR --repo DIR --stage DIR [--checks smoke|all] [--proxy kube-ipvs|kube-proxy]")
		fmt.Fprintln(os.Stderr, "       cluster-host --bin DIR --repo DIR --stage DIR --checks conformance --conformance DIR --report DIR")
		fmt.Fprintln(os.Stderr, "            [--proxy kube-ipvs|kube-proxy] [--focus RE] [--skip RE] [--procs N] [--timeout D]")
		fmt.Fprintln(os.Stderr, "       cluster-host --bin DIR --repo DIR --stage DIR --checks sli --kwok PATH --kwok-stages PATH --report DIR")
		fmt.Fprintln(os.Stderr, "            [--proxy kube-ipvs|kube-proxy] [--services N] [--replicas N] [--fake-nodes N] [--churn D]")
		return 2
	}
	dir, err := os.MkdirTemp("", "kipvs-cluster.")
	if err != nil {
		logf("%v", err)
		return 1
	}
	h := &host{Plane: &controlplane.Plane{Bin: bin, Dir: dir, Logf: logf}, repo: repo, stage: stage, all: checks == "all",
		proxy: proxy, conf: conf, sli: sli, nodes: layout(nNodes), nodeMiB: nodeMiB}
	defer func() {
		h.StopAll()
		if os.Getenv("CLUSTER_KEEP") != "" {
			logf("kept %s (CLUSTER_KEEP)", dir)
		} else {
			_ = os.RemoveAll(dir)
		}
	}()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	rc, err := h.main(ctx)
	if err != nil {
		logf("ERROR: %v", err)
	}
	if err != nil || rc != 0 {
		h.DumpLogs("apiserver.log", "kube-controller-manager.log", "kube-scheduler.log")
		if rc == 0 {
			rc = 1
		}
	}
	// The last line: what passed, and the whole run's time (make's, from CLUSTER_T0).
	summary := "0 passed, 1 failed (the cluster did not come up)"
	if h.checker != nil {
		summary = h.checker.summary()
	}
	took := ""
	if t0, err := strconv.ParseInt(os.Getenv("CLUSTER_T0"), 10, 64); err == nil {
		took = fmt.Sprintf(" in %s", time.Since(time.Unix(t0, 0)).Round(time.Second))
	}
	if sli != nil {
		// make sli's last line is the SLI, after the checks' count.
		fmt.Printf("make sli: %s%s\n", summary, took)
		line, err := sli.writeReport(proxy, nNodes)
		if err != nil {
			logf("sli.json: %v", err)
			return max(rc, 1)
		}
		fmt.Println(line)
		return rc
	}
	target := map[bool]string{false: "make cluster", true: "make cluster-test"}[h.all]
	if conf != nil {
		target = "make conformance"
	} else if proxy != "kube-ipvs" {
		target += " PROXY=" + proxy
	}
	if conf == nil && nNodes != 1 {
		target += fmt.Sprintf(" NODES=%d", nNodes)
	}
	fmt.Printf("%s: %s%s\n", target, summary, took)
	return rc
}

// flag reads --NAME VALUE or --NAME=VALUE from the command line.
func flag(name string) string {
	args := os.Args[1:]
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

type host struct {
	*controlplane.Plane
	repo, stage string
	all         bool          // run every check, not only the smoke set
	proxy       string        // the service proxy deployed: kube-ipvs or kube-proxy
	conf        *conformance  // make conformance's run instead of the checks
	sli         *sliRun       // make sli's run instead of the checks
	nodes       []clusterNode // the nodes in the guest (layout.go), in order
	nodeMiB     int           // each node's share of the guest's memory
	adminKC     string        // the admin's kubeconfig, for kubectl
	fwdPort     int           // the host's end of the QEMU hostfwd to the guest's CONNECT proxy

	checker *checker

	mu     sync.Mutex
	result *int // the checks' exit status once it is known
}

func (h *host) main(ctx context.Context) (int, error) {
	t0 := time.Now()
	if err := h.certs(); err != nil {
		return 0, fmt.Errorf("certificates: %w", err)
	}
	ports, err := controlplane.FreePorts(7)
	if err != nil {
		return 0, err
	}
	etcdPort, peerPort, ctlPort, cmPort, schedPort := ports[0], ports[1], ports[3], ports[4], ports[5]
	h.APIPort, h.fwdPort = ports[2], ports[6]
	if err := h.StartEtcd(etcdPort, peerPort); err != nil {
		return 0, err
	}
	egress := h.Path("egress.yaml")
	sock := h.Path("egress.sock")
	if err := os.WriteFile(egress, []byte(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: `+sock+"\n"), 0o600); err != nil {
		return 0, err
	}
	args := h.APIServerArgs(etcdPort)
	for i, a := range args {
		// The kubelet's client certificate is a node's: the Node authorizer and the
		// NodeRestriction admission plugin confine it to its own Node and pods.
		if a == "--authorization-mode=RBAC" {
			args[i] = "--authorization-mode=Node,RBAC"
		}
	}
	h.APIArgs = append(args,
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-client-certificate="+h.Path("apiserver-kubelet.crt"),
		"--kubelet-client-key="+h.Path("apiserver-kubelet.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--egress-selector-config-file="+egress,
		// The `kubernetes` Service's endpoint is where the guest reaches this API server
		// (QEMU forwards 10.0.2.100:APIPort, as :6443, to it): pods use it through kube-ipvs.
		"--advertise-address="+strings.Split(controlplane.GuestAPI, ":")[0],
		"--endpoint-reconciler-type=lease",
	)
	if err := h.StartAPIServer(ctx); err != nil {
		return 0, err
	}
	kc := func(name, user string) (string, error) {
		p := h.Path(name + ".kubeconfig")
		return p, h.kubeconfig(p, fmt.Sprintf("https://127.0.0.1:%d", h.APIPort), user, false)
	}
	cmKC, err := kc("controller-manager", "controller-manager")
	if err != nil {
		return 0, err
	}
	schedKC, err := kc("scheduler", "scheduler")
	if err != nil {
		return 0, err
	}
	if h.adminKC, err = kc("admin", "admin"); err != nil {
		return 0, err
	}
	cmArgs := append([]string{
		"--kubeconfig=" + cmKC, "--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", cmPort),
		"--cert-dir=" + h.Path("cm-certs"), "--leader-elect=false",
		"--allocate-node-cidrs=true", "--cluster-cidr=10.244.0.0/16", "--node-cidr-mask-size=" + h.nodeCIDRMask(),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--service-account-private-key-file=" + h.Path("sa.key"), "--root-ca-file=" + h.Path("ca.crt"),
		"--use-service-account-credentials=true", "--controllers=*",
	}, h.sliControllerArgs()...)
	if err := h.Start("kube-controller-manager", cmArgs...); err != nil {
		return 0, err
	}
	schedArgs := append([]string{
		"--kubeconfig=" + schedKC, "--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", schedPort),
		"--cert-dir=" + h.Path("sched-certs"), "--leader-elect=false",
	}, h.sliSchedulerArgs()...)
	if err := h.Start("kube-scheduler", schedArgs...); err != nil {
		return 0, err
	}
	logf("control plane up on 127.0.0.1 in %s (etcd, kube-apiserver :%d, kube-controller-manager, kube-scheduler)",
		time.Since(t0).Round(time.Millisecond), h.APIPort)

	if err := h.writePayload(); err != nil {
		return 0, err
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", ctlPort))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	go h.serveControl(ln)
	uds, err := net.Listen("unix", sock)
	if err != nil {
		return 0, err
	}
	defer uds.Close()
	go forward(uds, fmt.Sprintf("127.0.0.1:%d", h.fwdPort))

	apiFwd, err := h.FwdScript("fwd-api", h.APIPort)
	if err != nil {
		return 0, err
	}
	ctlFwd, err := h.FwdScript("fwd-ctl", ctlPort)
	if err != nil {
		return 0, err
	}
	guestAPIHost := strings.Split(controlplane.GuestAPI, ":")[0]
	gnet := fmt.Sprintf("-netdev user,id=n0,restrict=on,guestfwd=tcp:%s-cmd:%s,guestfwd=tcp:%s:%d-cmd:%s,guestfwd=tcp:%s-cmd:%s,hostfwd=tcp:127.0.0.1:%d-%s:%d -device virtio-net-pci,netdev=n0,romfile=",
		controlplane.GuestAPI, apiFwd, guestAPIHost, h.APIPort, apiFwd, guestCtl, ctlFwd, h.fwdPort, routerIP, proxyPort)
	var names []string
	for _, n := range h.nodes {
		names = append(names, fmt.Sprintf("%s %s %s", n.name, n.ip, n.zone))
	}
	logf("booting the guest with %d node(s): %s (network: restrict=on; guest -> %s and :%d, %s; host 127.0.0.1:%d -> %s:%d)",
		len(h.nodes), strings.Join(names, ", "), controlplane.GuestAPI, h.APIPort, guestCtl, h.fwdPort, routerIP, proxyPort)
	g := exec.Command(filepath.Join(h.repo, "hack/guest/boot.sh"), h.stage)
	guestTimeout := "1500"
	if h.sli != nil {
		guestTimeout = "10800" // the load, the churn and both settling: well within 3 hours
	}
	if h.conf != nil {
		// The node lives as long as the suite may run, and an hour more for the bring-up.
		if d, err := time.ParseDuration(h.conf.timeout); err == nil {
			guestTimeout = strconv.Itoa(int((d + time.Hour).Seconds()))
		}
	}
	g.Env = append(os.Environ(), "GUEST_NET="+gnet,
		"GUEST_TIMEOUT="+controlplane.EnvOr("GUEST_TIMEOUT", guestTimeout),
		"GUEST_MEM="+controlplane.EnvOr("GUEST_MEM", strconv.Itoa(guestMemMiB(len(h.nodes), h.nodeMiB))),
		// The node runs for hours with both host cores saturated: a kernel report of a soft
		// lockup there goes to the console (and the run's log) without ending a run that
		// may well recover; the test guests panic on one instead (boot.sh).
		"GUEST_LOCKUP_PANIC="+controlplane.EnvOr("GUEST_LOCKUP_PANIC", "0"))
	g.Stdout, g.Stderr = os.Stdout, os.Stderr
	g.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := g.Start(); err != nil {
		return 0, err
	}
	bootStart := time.Now()
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()

	c := &checker{h: h, cs: kubernetes.NewForConfigOrDie(h.AdminConfig()), boot: bootStart, conf: h.conf, sli: h.sli}
	h.checker = c
	checked := make(chan error, 1)
	go func() { checked <- c.runAll(ctx, h.all) }()
	var checkErr error
	select {
	case checkErr = <-checked:
		rc := 0
		if checkErr != nil {
			rc = 1
		}
		err = h.stopGuest(rc, g, done, 120*time.Second)
	case err = <-done:
		checkErr = errors.New("the guest stopped before the checks ended")
		c.failed++
	case <-ctx.Done():
		// Interrupted: the guest asks every 2 s once it is up and stops when told; QEMU runs
		// under timeout(1) in a process group of its own, which ending boot.sh's group
		// would leave running.
		err = h.stopGuest(130, g, done, 30*time.Second)
		checkErr = ctx.Err()
	}
	var ee *exec.ExitError
	rc := 0
	if errors.As(err, &ee) {
		rc = ee.ExitCode()
	} else if err != nil {
		return 0, err
	}
	if checkErr != nil {
		return 0, checkErr
	}
	return rc, nil
}

// stopGuest tells the guest to stop with rc (it asks the control listener every 2 s) and
// waits for it; after grace it ends the guest's process group. It returns the guest's
// exit error.
func (h *host) stopGuest(rc int, g *exec.Cmd, done <-chan error, grace time.Duration) error {
	h.mu.Lock()
	h.result = &rc
	h.mu.Unlock()
	select {
	case err := <-done:
		return err
	case <-time.After(grace):
		logf("the guest did not stop within %s of being told; ending it", grace)
		_ = syscall.Kill(-g.Process.Pid, syscall.SIGTERM)
		return <-done
	}
}

func (h *host) certs() error {
	if err := h.Certs(); err != nil {
		return err
	}
	certs := []struct{ file, cn, group string }{
		{"controller-manager", "system:kube-controller-manager", ""},
		{"scheduler", "system:kube-scheduler", ""},
		// The API server's client certificate towards the kubelet (exec, logs).
		{"apiserver-kubelet", "kube-apiserver-kubelet-client", "system:masters"},
	}
	// Each kubelet has its own Node's identity: the Node authorizer and NodeRestriction
	// confine it to its Node and its Pods.
	for _, n := range h.nodes {
		certs = append(certs, struct{ file, cn, group string }{"kubelet-" + n.name, "system:node:" + n.name, "system:nodes"})
	}
	for _, c := range certs {
		var groups []string
		if c.group != "" {
			groups = []string{c.group}
		}
		if err := h.ClientCert(c.file, c.cn, groups...); err != nil {
			return err
		}
	}
	return nil
}

// kubeconfig writes a kubeconfig for the client certificate CERT.crt/.key; embed puts the
// files' contents in it (for the guest), otherwise it names them.
func (h *host) kubeconfig(path, server, cert string, embed bool) error {
	c := clientcmdapi.NewConfig()
	auth := &clientcmdapi.AuthInfo{ClientCertificate: h.Path(cert + ".crt"), ClientKey: h.Path(cert + ".key")}
	cl := &clientcmdapi.Cluster{Server: server, CertificateAuthority: h.Path("ca.crt")}
	if embed {
		ca, err := os.ReadFile(h.Path("ca.crt"))
		if err != nil {
			return err
		}
		crt, err := os.ReadFile(h.Path(cert + ".crt"))
		if err != nil {
			return err
		}
		key, err := os.ReadFile(h.Path(cert + ".key"))
		if err != nil {
			return err
		}
		auth = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
		cl = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	}
	c.Clusters["kipvs"] = cl
	c.AuthInfos[cert] = auth
	c.Contexts["kipvs"] = &clientcmdapi.Context{Cluster: "kipvs", AuthInfo: cert}
	c.CurrentContext = "kipvs"
	return clientcmd.WriteToFile(*c, path)
}

// writePayload adds /payload/nodes.txt ("NAME IP ZONE" a line) and, for each node,
// /payload/nodes/NAME/: the CA, the kubelet's certificate and its kubeconfig.
func (h *host) writePayload() error {
	var list strings.Builder
	for _, n := range h.nodes {
		fmt.Fprintf(&list, "%s %s %s\n", n.name, n.ip, n.zone)
		dst := filepath.Join(h.stage, "payload", "nodes", n.name)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		for src, name := range map[string]string{"ca.crt": "ca.crt", "kubelet-" + n.name + ".crt": "kubelet.crt", "kubelet-" + n.name + ".key": "kubelet.key"} {
			b, err := os.ReadFile(h.Path(src))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dst, name), b, 0o600); err != nil {
				return err
			}
		}
		if err := h.kubeconfig(filepath.Join(dst, "kubelet.kubeconfig"), "https://"+controlplane.GuestAPI, "kubelet-"+n.name, true); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(h.stage, "payload", "nodes.txt"), []byte(list.String()), 0o644)
}

// serveControl answers the guest's "status" with "running" until the check is over, then
// with "done N".
func (h *host) serveControl(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
				return
			}
			h.mu.Lock()
			r := h.result
			h.mu.Unlock()
			if r == nil {
				fmt.Fprintln(c, "running")
				return
			}
			fmt.Fprintf(c, "done %d\n", *r)
		}()
	}
}

// forward copies every connection accepted on ln to a new connection to addr.
func forward(ln net.Listener, addr string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := net.Dial("tcp", addr)
			if err != nil {
				logf("egress forward: %v", err)
				return
			}
			defer up.Close()
			go func() { _, _ = io.Copy(up, c); _ = up.(*net.TCPConn).CloseWrite() }()
			_, _ = io.Copy(c, up)
		}()
	}
}
