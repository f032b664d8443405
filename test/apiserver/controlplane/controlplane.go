// Package controlplane runs a Kubernetes control plane on the host's loopback for the tests
// that boot the QEMU guest: etcd and kube-apiserver (make e2e, cmd/e2e-host), and for the
// real cluster also kube-controller-manager and kube-scheduler (make cluster,
// cmd/cluster-host). It makes the certificates (one CA signs the API server's serving
// certificate, every client certificate and nothing else), starts the processes with their
// logs in one folder, and stops exactly the processes it started, by their PIDs.
package controlplane

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// GuestAPI is where the guest reaches the API server (a QEMU guestfwd); the serving
// certificate names its address.
const GuestAPI = "10.0.2.100:6443"

// Plane is the control plane's processes and files. Bin holds the binaries, Dir the
// certificates, data and logs.
type Plane struct {
	Bin, Dir string
	// Logf reports progress; the commands prefix their name.
	Logf func(format string, a ...any)

	caKey  *rsa.PrivateKey
	ca     *x509.Certificate
	serial int64

	mu        sync.Mutex
	etcd      *exec.Cmd
	apiserver *exec.Cmd
	// apiserverExited is closed when the running API server's process has been reaped.
	apiserverExited chan struct{}
	// others are the processes started by Start (controller manager, scheduler), by name.
	others map[string]*exec.Cmd
	// APIArgs are kube-apiserver's arguments (StartAPIServer uses them each time), APIPort
	// its secure port on 127.0.0.1.
	APIArgs []string
	APIPort int
}

// Path is the file name in the plane's folder.
func (p *Plane) Path(name string) string { return filepath.Join(p.Dir, name) }

// EnvOr is the environment variable k, or def when it is empty.
func EnvOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// Ptr is a pointer to a copy of v.
func Ptr[T any](v T) *T { return &v }

// FreePorts reserves n distinct free loopback ports (the kernel picks them).
func FreePorts(n int) ([]int, error) {
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

// Certs makes the CA (ca.crt), the API server's serving certificate (serving.crt/.key), the
// test's admin client certificate in system:masters (admin.crt/.key) and the
// service-account signing key pair (sa.key, sa.pub).
func (p *Plane) Certs() error {
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
	p.ca, _ = x509.ParseCertificate(caDER)
	p.caKey, p.serial = caKey, 1
	if err := WritePEM(p.Path("ca.crt"), "CERTIFICATE", caDER); err != nil {
		return err
	}
	// The API server's serving certificate: the host reaches it on 127.0.0.1, the guest on
	// 10.0.2.100 (the forward).
	if err := p.Leaf("serving", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.2.100"), net.ParseIP("10.96.0.1")},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}); err != nil {
		return err
	}
	// The test's own admin credential.
	if err := p.ClientCert("admin", "e2e-admin", "system:masters"); err != nil {
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
	if err := WritePEM(p.Path("sa.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)); err != nil {
		return err
	}
	return WritePEM(p.Path("sa.pub"), "PUBLIC KEY", pub)
}

// ClientCert writes NAME.crt and NAME.key: a client certificate for user cn in the groups
// given, signed by the CA.
func (p *Plane) ClientCert(name, cn string, groups ...string) error {
	return p.Leaf(name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// Leaf writes NAME.crt and NAME.key: a certificate of tmpl (its subject, usages and names)
// signed by the CA, valid for a day.
func (p *Plane) Leaf(name string, tmpl *x509.Certificate) error {
	if p.ca == nil {
		return errors.New("no CA: call Certs first")
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.serial++
	tmpl.SerialNumber = big.NewInt(p.serial)
	p.mu.Unlock()
	now := time.Now()
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		return err
	}
	if err := WritePEM(p.Path(name+".crt"), "CERTIFICATE", der); err != nil {
		return err
	}
	return WritePEM(p.Path(name+".key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
}

// WritePEM writes one PEM block, readable by the owner only.
func WritePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// --- processes ----------------------------------------------------------------------------

// StartEtcd starts etcd on the loopback ports given and waits for its /health.
func (p *Plane) StartEtcd(port, peer int) error {
	client := fmt.Sprintf("http://127.0.0.1:%d", port)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	cmd := exec.Command(filepath.Join(p.Bin, "etcd"),
		"--name=e2e", "--data-dir="+p.Path("etcd-data"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL, "--log-level=warn")
	if err := StartLogged(cmd, p.Path("etcd.log")); err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	p.mu.Lock()
	p.etcd = cmd
	p.mu.Unlock()
	return Poll(60*time.Second, "etcd /health", func() bool {
		r, err := http.Get(client + "/health")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	})
}

// APIServerArgs are make e2e's kube-apiserver arguments for etcd on etcdPort, serving on
// APIPort; the cluster appends its own (a later flag wins).
func (p *Plane) APIServerArgs(etcdPort int) []string {
	return []string{
		"--etcd-servers=http://127.0.0.1:" + fmt.Sprint(etcdPort),
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", p.APIPort),
		"--advertise-address=127.0.0.1",
		"--cert-dir=" + filepath.Join(p.Dir, "apiserver-certs"),
		"--tls-cert-file=" + p.Path("serving.crt"), "--tls-private-key-file=" + p.Path("serving.key"),
		"--client-ca-file=" + p.Path("ca.crt"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.Path("sa.pub"),
		"--service-account-signing-key-file=" + p.Path("sa.key"),
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/16",
		// No kubelet or controller manager: nothing maintains the kubernetes Service's
		// endpoints, and a loopback address is not a valid endpoint anyway.
		"--endpoint-reconciler-type=none",
		// deploy/daemonset.yaml runs privileged, as kube-proxy does.
		"--allow-privileged=true",
		"--profiling=false",
	}
}

// StartLogged starts cmd with its output appended to logPath.
func StartLogged(cmd *exec.Cmd, logPath string) error {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Start()
	f.Close()
	return err
}

// StartAPIServer starts kube-apiserver with APIArgs and waits for its /readyz.
func (p *Plane) StartAPIServer(ctx context.Context) error {
	p.mu.Lock()
	if p.apiserver != nil {
		p.mu.Unlock()
		return errors.New("kube-apiserver is already running")
	}
	cmd := exec.Command(filepath.Join(p.Bin, "kube-apiserver"), p.APIArgs...)
	err := StartLogged(cmd, p.Path("apiserver.log"))
	if err == nil {
		p.apiserver = cmd
	}
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
	cfg := p.AdminConfig()
	cfg.Timeout = 5 * time.Second
	cs := kubernetes.NewForConfigOrDie(cfg)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.mu.Lock()
	p.apiserverExited = exited
	p.mu.Unlock()
	dead := false
	err = Poll(180*time.Second, "kube-apiserver /readyz", func() bool {
		select {
		case <-exited:
			dead = true
			return true
		default:
		}
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && strings.TrimSpace(string(body)) == "ok"
	})
	if dead {
		return errors.New("kube-apiserver exited (apiserver.log says why)")
	}
	return err
}

// StopAPIServer ends the API server this program started (SIGTERM to its PID, SIGKILL after
// 30 s) and waits for it to exit.
func (p *Plane) StopAPIServer() error {
	p.mu.Lock()
	cmd, exited := p.apiserver, p.apiserverExited
	p.apiserver = nil
	p.mu.Unlock()
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

// Start starts another control-plane binary of Bin (kube-controller-manager,
// kube-scheduler) with its output in NAME.log; StopAll ends it.
func (p *Plane) Start(name string, args ...string) error {
	return p.StartAt(name, filepath.Join(p.Bin, name), args...)
}

// StartAt is Start for a binary outside Bin (make sli's kwok): name names its log.
func (p *Plane) StartAt(name, path string, args ...string) error {
	cmd := exec.Command(path, args...)
	if err := StartLogged(cmd, p.Path(name+".log")); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	p.mu.Lock()
	if p.others == nil {
		p.others = map[string]*exec.Cmd{}
	}
	p.others[name] = cmd
	p.mu.Unlock()
	return nil
}

// StopAll ends every process this plane started: the others, the API server, then etcd.
func (p *Plane) StopAll() {
	p.mu.Lock()
	others := p.others
	p.others = nil
	p.mu.Unlock()
	for _, cmd := range others {
		stop(cmd, 15*time.Second)
	}
	p.mu.Lock()
	running := p.apiserver != nil
	p.mu.Unlock()
	if running {
		_ = p.StopAPIServer()
	}
	p.mu.Lock()
	etcd := p.etcd
	p.etcd = nil
	p.mu.Unlock()
	if etcd != nil {
		stop(etcd, 15*time.Second)
	}
}

// stop sends SIGTERM to cmd's process, SIGKILL after grace, and reaps it.
func stop(cmd *exec.Cmd, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// DumpLogs reports the last 40 lines of each log named (etcd.log and apiserver.log when
// none is).
func (p *Plane) DumpLogs(names ...string) {
	if len(names) == 0 {
		names = []string{"etcd.log", "apiserver.log"}
	}
	for _, name := range names {
		b, err := os.ReadFile(p.Path(name))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		p.Logf("last lines of %s:\n%s", name, strings.Join(lines, "\n"))
	}
}

// Poll calls cond every 100 ms until it holds, or fails after limit.
func Poll(limit time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// --- the cluster --------------------------------------------------------------------------

// AdminConfig is the admin's client configuration for the API server on the loopback.
func (p *Plane) AdminConfig() *rest.Config {
	return &rest.Config{
		Host: fmt.Sprintf("https://127.0.0.1:%d", p.APIPort),
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: p.Path("ca.crt"), CertFile: p.Path("admin.crt"), KeyFile: p.Path("admin.key"),
		},
		QPS: 50, Burst: 100,
	}
}

// WaitBootstrap waits for what the API server creates itself: the kube-system and default
// namespaces and the system priority classes the DaemonSet names.
func WaitBootstrap(ctx context.Context, cs kubernetes.Interface) error {
	return Poll(60*time.Second, "the API server's bootstrap objects", func() bool {
		for _, ns := range []string{"kube-system", "default"} {
			if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
				return false
			}
		}
		_, err := cs.SchedulingV1().PriorityClasses().Get(ctx, "system-node-critical", metav1.GetOptions{})
		return err == nil
	})
}

// FwdScript writes NAME.sh, the command of a QEMU guestfwd to 127.0.0.1:PORT. QEMU runs a
// guestfwd command through the shell and boot.sh splits GUEST_NET at blanks, so each forward
// is a script whose path has none.
func (p *Plane) FwdScript(name string, port int) (string, error) {
	path := p.Path(name + ".sh")
	script := fmt.Sprintf("#!/bin/sh\nexec busybox nc 127.0.0.1 %d\n", port)
	return path, os.WriteFile(path, []byte(script), 0o700)
}
