// Command e2e-host is the host side of `make e2e`: it runs etcd and kube-apiserver on the
// host's loopback, prepares the cluster (a server-side dry-run of deploy/, deploy/rbac.yaml,
// a token for kube-ipvs's ServiceAccount), boots the guest with a restricted network whose
// only ways out are forwards to the API server and to a control listener, and serves that
// listener so the guest scenario can stop and start the API server. It exits with the
// guest's exit status.
//
//	e2e-host --bin DIR --repo DIR --stage DIR
//
// DIR of --bin holds kube-apiserver and etcd; --stage is the guest payload folder, already
// holding the guest binaries; this program adds the kubeconfigs and payload/entry.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"
)

const (
	// guestAPI is where the guest reaches the API server (a QEMU guestfwd), and guestCtl the
	// host's control listener. The serving certificate names 10.0.2.100.
	guestAPI = "10.0.2.100:6443"
	guestCtl = "10.0.2.100:7000"
)

func logf(format string, a ...any) { fmt.Fprintf(os.Stderr, "e2e-host: "+format+"\n", a...) }

func main() {
	os.Exit(run())
}

func run() int {
	bin := flag.String("bin", "", "folder with kube-apiserver and etcd")
	repo := flag.String("repo", "", "the repository root")
	stage := flag.String("stage", "", "the guest stage folder")
	flag.Parse()
	if *bin == "" || *repo == "" || *stage == "" {
		flag.Usage()
		return 2
	}
	h := &host{bin: *bin, repo: *repo, stage: *stage}
	dir, err := os.MkdirTemp("", "kipvs-e2e.")
	if err != nil {
		logf("%v", err)
		return 1
	}
	h.dir = dir
	// The processes this program started are stopped by their PIDs; the temp folder goes.
	defer func() {
		h.stopAll()
		if os.Getenv("E2E_KEEP") != "" {
			logf("kept %s (E2E_KEEP)", dir)
		} else {
			_ = os.RemoveAll(dir)
		}
	}()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	rc, err := h.main(ctx)
	if err != nil {
		logf("ERROR: %v", err)
		h.dumpLogs()
		return 1
	}
	if rc != 0 {
		h.dumpLogs()
	}
	return rc
}

type host struct {
	bin, repo, stage, dir string

	mu        sync.Mutex
	etcd      *exec.Cmd
	apiserver *exec.Cmd
	// apiserverExited is closed when the running API server's process has been reaped.
	apiserverExited chan struct{}
	apiArgs         []string
	apiPort         int
}

func (h *host) main(ctx context.Context) (int, error) {
	t0 := time.Now()
	if err := h.certs(); err != nil {
		return 0, fmt.Errorf("certificates: %w", err)
	}
	ports, err := freePorts(4)
	if err != nil {
		return 0, err
	}
	etcdPort, peerPort, ctlPort := ports[0], ports[1], ports[3]
	h.apiPort = ports[2]
	if err := h.startEtcd(etcdPort, peerPort); err != nil {
		return 0, err
	}
	h.apiArgs = []string{
		"--etcd-servers=http://127.0.0.1:" + fmt.Sprint(etcdPort),
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", h.apiPort),
		"--advertise-address=127.0.0.1",
		"--cert-dir=" + filepath.Join(h.dir, "apiserver-certs"),
		"--tls-cert-file=" + h.path("serving.crt"), "--tls-private-key-file=" + h.path("serving.key"),
		"--client-ca-file=" + h.path("ca.crt"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + h.path("sa.pub"),
		"--service-account-signing-key-file=" + h.path("sa.key"),
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/16",
		// No kubelet or controller manager: nothing maintains the kubernetes Service's
		// endpoints, and a loopback address is not a valid endpoint anyway.
		"--endpoint-reconciler-type=none",
		// deploy/daemonset.yaml runs privileged, as kube-proxy does.
		"--allow-privileged=true",
		"--profiling=false",
	}
	if err := h.startAPIServer(ctx); err != nil {
		return 0, err
	}
	logf("etcd and kube-apiserver ready on 127.0.0.1 in %s", time.Since(t0).Round(time.Millisecond))

	admin, err := h.adminConfig(fmt.Sprintf("https://127.0.0.1:%d", h.apiPort))
	if err != nil {
		return 0, err
	}
	cs := kubernetes.NewForConfigOrDie(admin)
	if err := waitBootstrap(ctx, cs); err != nil {
		return 0, err
	}
	if err := h.dryRunDeploy(ctx, admin); err != nil {
		return 0, fmt.Errorf("server-side dry-run of deploy/: %w", err)
	}
	if err := h.apply(ctx, admin, "rbac.yaml"); err != nil {
		return 0, fmt.Errorf("apply deploy/rbac.yaml: %w", err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "kube-ipvs", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("TokenRequest for kube-system/kube-ipvs: %w", err)
	}
	logf("TokenRequest: token for system:serviceaccount:kube-system:kube-ipvs, expires %s", tr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339))
	if err := h.writePayload(tr.Status.Token); err != nil {
		return 0, err
	}

	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", ctlPort))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	go h.serveControl(ctx, ln)

	// QEMU runs a guestfwd command through the shell; boot.sh splits GUEST_NET at blanks, so
	// each forward is a script whose path has none.
	apiFwd, err := h.fwdScript("fwd-api", h.apiPort)
	if err != nil {
		return 0, err
	}
	ctlFwd, err := h.fwdScript("fwd-ctl", ctlPort)
	if err != nil {
		return 0, err
	}
	gnet := fmt.Sprintf("-netdev user,id=n0,restrict=on,guestfwd=tcp:%s-cmd:%s,guestfwd=tcp:%s-cmd:%s -device virtio-net-pci,netdev=n0,romfile=",
		guestAPI, apiFwd, guestCtl, ctlFwd)
	logf("booting the guest (network: restrict=on, forwards %s -> 127.0.0.1:%d, %s -> 127.0.0.1:%d)", guestAPI, h.apiPort, guestCtl, ctlPort)
	g := exec.Command(filepath.Join(h.repo, "hack/guest/boot.sh"), h.stage)
	g.Env = append(os.Environ(), "GUEST_NET="+gnet, "GUEST_TIMEOUT="+envOr("GUEST_TIMEOUT", "600"))
	g.Stdout, g.Stderr = os.Stdout, os.Stderr
	g.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := g.Start(); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		// Interrupted: end the guest's process group (boot.sh, its timeout and QEMU).
		_ = syscall.Kill(-g.Process.Pid, syscall.SIGTERM)
		err = <-done
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, err
}

func (h *host) path(name string) string { return filepath.Join(h.dir, name) }

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func ptr[T any](v T) *T { return &v }

// freePorts reserves n distinct free loopback ports (the kernel picks them).
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// --- certificates -------------------------------------------------------------------------

func (h *host) certs() error {
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kube-ipvs-e2e-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, _ := x509.ParseCertificate(caDER)
	if err := writePEM(h.path("ca.crt"), "CERTIFICATE", caDER); err != nil {
		return err
	}
	leaf := func(name string, serial int64, tmpl *x509.Certificate) error {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return err
		}
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		if err := writePEM(h.path(name+".crt"), "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(h.path(name+".key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
	}
	// The API server's serving certificate: the host reaches it on 127.0.0.1, the guest on
	// 10.0.2.100 (the forward).
	if err := leaf("serving", 2, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.2.100"), net.ParseIP("10.96.0.1")},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}); err != nil {
		return err
	}
	// The test's own admin credential.
	if err := leaf("admin", 3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "e2e-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return err
	}
	// Service-account signing key pair.
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(h.path("sa.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)); err != nil {
		return err
	}
	return writePEM(h.path("sa.pub"), "PUBLIC KEY", pub)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// --- processes ----------------------------------------------------------------------------

func (h *host) startEtcd(port, peer int) error {
	client := fmt.Sprintf("http://127.0.0.1:%d", port)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	cmd := exec.Command(filepath.Join(h.bin, "etcd"),
		"--name=e2e", "--data-dir="+h.path("etcd-data"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL, "--log-level=warn")
	if err := startLogged(cmd, h.path("etcd.log")); err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	h.mu.Lock()
	h.etcd = cmd
	h.mu.Unlock()
	return poll(60*time.Second, "etcd /health", func() bool {
		r, err := http.Get(client + "/health")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	})
}

func startLogged(cmd *exec.Cmd, logPath string) error {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Start()
	f.Close()
	return err
}

func (h *host) startAPIServer(ctx context.Context) error {
	h.mu.Lock()
	if h.apiserver != nil {
		h.mu.Unlock()
		return errors.New("kube-apiserver is already running")
	}
	cmd := exec.Command(filepath.Join(h.bin, "kube-apiserver"), h.apiArgs...)
	err := startLogged(cmd, h.path("apiserver.log"))
	if err == nil {
		h.apiserver = cmd
	}
	h.mu.Unlock()
	if err != nil {
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
	cfg, err := h.adminConfig(fmt.Sprintf("https://127.0.0.1:%d", h.apiPort))
	if err != nil {
		return err
	}
	cfg.Timeout = 5 * time.Second
	cs := kubernetes.NewForConfigOrDie(cfg)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	h.mu.Lock()
	h.apiserverExited = exited
	h.mu.Unlock()
	return poll(180*time.Second, "kube-apiserver /readyz", func() bool {
		select {
		case <-exited:
			return false
		default:
		}
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && strings.TrimSpace(string(body)) == "ok"
	})
}

// stopAPIServer ends the API server this program started (SIGTERM to its PID, SIGKILL after
// 30 s) and waits for it to exit.
func (h *host) stopAPIServer() error {
	h.mu.Lock()
	cmd, exited := h.apiserver, h.apiserverExited
	h.apiserver = nil
	h.mu.Unlock()
	if cmd == nil {
		return errors.New("kube-apiserver is not running")
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	return nil
}

func (h *host) stopAll() {
	if h.apiserver != nil {
		_ = h.stopAPIServer()
	}
	h.mu.Lock()
	etcd := h.etcd
	h.etcd = nil
	h.mu.Unlock()
	if etcd != nil {
		_ = etcd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = etcd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = etcd.Process.Kill()
			<-done
		}
	}
}

func (h *host) dumpLogs() {
	for _, name := range []string{"etcd.log", "apiserver.log"} {
		b, err := os.ReadFile(h.path(name))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		logf("last lines of %s:\n%s", name, strings.Join(lines, "\n"))
	}
}

func poll(limit time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// --- the control listener -----------------------------------------------------------------

// serveControl answers one command per connection, from the guest through its forward:
// "stop-apiserver" or "start-apiserver", with "ok ..." or "error ...".
func (h *host) serveControl(ctx context.Context, ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return
			}
			cmd := strings.TrimSpace(line)
			t := time.Now()
			var reply string
			switch cmd {
			case "stop-apiserver":
				err = h.stopAPIServer()
			case "start-apiserver":
				err = h.startAPIServer(ctx)
			default:
				err = fmt.Errorf("unknown command %q", cmd)
			}
			if err != nil {
				reply = "error " + err.Error()
			} else {
				reply = fmt.Sprintf("ok %s in %s", cmd, time.Since(t).Round(time.Millisecond))
			}
			logf("control: %s", reply)
			fmt.Fprintln(c, reply)
		}()
	}
}

// --- the cluster --------------------------------------------------------------------------

func (h *host) adminConfig(server string) (*rest.Config, error) {
	return &rest.Config{
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: h.path("ca.crt"), CertFile: h.path("admin.crt"), KeyFile: h.path("admin.key"),
		},
		QPS: 50, Burst: 100,
	}, nil
}

// waitBootstrap waits for what the API server creates itself: the kube-system and default
// namespaces and the system priority classes the DaemonSet names.
func waitBootstrap(ctx context.Context, cs kubernetes.Interface) error {
	return poll(60*time.Second, "the API server's bootstrap objects", func() bool {
		for _, ns := range []string{"kube-system", "default"} {
			if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
				return false
			}
		}
		_, err := cs.SchedulingV1().PriorityClasses().Get(ctx, "system-node-critical", metav1.GetOptions{})
		return err == nil
	})
}

// kustomization is the part of deploy/kustomization.yaml this test applies itself.
type kustomization struct {
	Namespace string   `json:"namespace"`
	Resources []string `json:"resources"`
	Images    []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

// deployObjects reads the manifests deploy/kustomization.yaml lists, namespaced and with
// images set as kustomize would (namespace on every namespaced object; images by name).
func (h *host) deployObjects(only string) ([]*unstructured.Unstructured, string, error) {
	b, err := os.ReadFile(filepath.Join(h.repo, "deploy/kustomization.yaml"))
	if err != nil {
		return nil, "", err
	}
	var k kustomization
	if err := yaml.Unmarshal(b, &k); err != nil {
		return nil, "", fmt.Errorf("deploy/kustomization.yaml: %w", err)
	}
	var objs []*unstructured.Unstructured
	for _, res := range k.Resources {
		if only != "" && res != only {
			continue
		}
		data, err := os.ReadFile(filepath.Join(h.repo, "deploy", res))
		if err != nil {
			return nil, "", err
		}
		for i, doc := range strings.Split(string(data), "\n---") {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
				return nil, "", fmt.Errorf("deploy/%s document %d: %w", res, i+1, err)
			}
			if len(m) == 0 {
				continue
			}
			u := &unstructured.Unstructured{Object: m}
			for _, path := range [][]string{
				{"spec", "template", "spec", "containers"}, {"spec", "template", "spec", "initContainers"},
			} {
				cs, found, _ := unstructured.NestedSlice(u.Object, path...)
				if !found {
					continue
				}
				for _, c := range cs {
					cm := c.(map[string]any)
					for _, img := range k.Images {
						if cm["image"] == img.Name {
							cm["image"] = img.NewName + ":" + img.NewTag
						}
					}
				}
				_ = unstructured.SetNestedSlice(u.Object, cs, path...)
			}
			objs = append(objs, u)
		}
	}
	return objs, k.Namespace, nil
}

func (h *host) create(ctx context.Context, cfg *rest.Config, only string, dryRun bool) error {
	objs, ns, err := h.deployObjects(only)
	if err != nil {
		return err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))
	opts := metav1.CreateOptions{FieldManager: "kube-ipvs-e2e"}
	verb := "created"
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
		verb = "dry-run (DryRun=All) accepted"
	}
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, u.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dc.Resource(m.Resource)
		id := u.GetName()
		if m.Scope.Name() == "namespace" {
			u.SetNamespace(ns)
			ri = dc.Resource(m.Resource).Namespace(ns)
			id = ns + "/" + id
		}
		if _, err := ri.Create(ctx, u, opts); err != nil {
			if !dryRun && apierrors.IsAlreadyExists(err) {
				continue
			}
			return fmt.Errorf("%s %s: %w", gvk.Kind, id, err)
		}
		logf("%s: %s %s", verb, gvk.Kind, id)
	}
	return nil
}

func (h *host) dryRunDeploy(ctx context.Context, cfg *rest.Config) error {
	return h.create(ctx, cfg, "", true)
}

func (h *host) apply(ctx context.Context, cfg *rest.Config, file string) error {
	return h.create(ctx, cfg, file, false)
}

// --- the guest payload --------------------------------------------------------------------

func (h *host) writePayload(token string) error {
	ca, err := os.ReadFile(h.path("ca.crt"))
	if err != nil {
		return err
	}
	cert, err := os.ReadFile(h.path("admin.crt"))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(h.path("admin.key"))
	if err != nil {
		return err
	}
	kubeconfig := func(user string, auth *clientcmdapi.AuthInfo) *clientcmdapi.Config {
		c := clientcmdapi.NewConfig()
		c.Clusters["e2e"] = &clientcmdapi.Cluster{Server: "https://" + guestAPI, CertificateAuthorityData: ca}
		c.AuthInfos[user] = auth
		c.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: user}
		c.CurrentContext = "e2e"
		return c
	}
	pay := filepath.Join(h.stage, "payload")
	if err := os.MkdirAll(pay, 0o755); err != nil {
		return err
	}
	// kube-ipvs's kubeconfig holds its ServiceAccount token and nothing else.
	if err := clientcmd.WriteToFile(*kubeconfig("kube-ipvs", &clientcmdapi.AuthInfo{Token: token}), filepath.Join(pay, "kube-ipvs.kubeconfig")); err != nil {
		return err
	}
	if err := clientcmd.WriteToFile(*kubeconfig("e2e-admin", &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}), filepath.Join(pay, "admin.kubeconfig")); err != nil {
		return err
	}
	entry := `# The guest side of make e2e: the network card, then the scenario.
set -e
/usr/sbin/modprobe virtio_pci
/usr/sbin/modprobe virtio_net
for ((i = 0; i < 100; i++)); do [[ -e /sys/class/net/eth0 ]] && break; sleep 0.05; done
/usr/sbin/ip addr add 10.0.2.15/24 dev eth0
/usr/sbin/ip link set eth0 up
cd /payload
exec /payload/e2e-guest --kubeconfig /payload/admin.kubeconfig --proxy-kubeconfig /payload/kube-ipvs.kubeconfig --control ` + guestCtl + `
`
	return os.WriteFile(filepath.Join(pay, "entry"), []byte(entry), 0o755)
}

func (h *host) fwdScript(name string, port int) (string, error) {
	p := h.path(name + ".sh")
	script := fmt.Sprintf("#!/bin/sh\nexec busybox nc 127.0.0.1 %d\n", port)
	return p, os.WriteFile(p, []byte(script), 0o700)
}
