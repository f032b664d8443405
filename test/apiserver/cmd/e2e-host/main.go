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
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
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

	"github.com/kube-ipvs/kube-ipvs/test/apiserver/controlplane"
)

const (
	// guestAPI is where the guest reaches the API server (a QEMU guestfwd), and guestCtl the
	// host's control listener. The serving certificate names 10.0.2.100.
	guestAPI = controlplane.GuestAPI
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
	dir, err := os.MkdirTemp("", "kipvs-e2e.")
	if err != nil {
		logf("%v", err)
		return 1
	}
	h := &host{Plane: &controlplane.Plane{Bin: *bin, Dir: dir, Logf: logf}, repo: *repo, stage: *stage}
	// The processes this program started are stopped by their PIDs; the temp folder goes.
	defer func() {
		h.StopAll()
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
		h.DumpLogs()
		return 1
	}
	if rc != 0 {
		h.DumpLogs()
	}
	return rc
}

type host struct {
	*controlplane.Plane
	repo, stage string
}

func (h *host) main(ctx context.Context) (int, error) {
	t0 := time.Now()
	if err := h.Certs(); err != nil {
		return 0, fmt.Errorf("certificates: %w", err)
	}
	ports, err := controlplane.FreePorts(4)
	if err != nil {
		return 0, err
	}
	etcdPort, peerPort, ctlPort := ports[0], ports[1], ports[3]
	h.APIPort = ports[2]
	if err := h.StartEtcd(etcdPort, peerPort); err != nil {
		return 0, err
	}
	h.APIArgs = h.APIServerArgs(etcdPort)
	if err := h.StartAPIServer(ctx); err != nil {
		return 0, err
	}
	logf("etcd and kube-apiserver ready on 127.0.0.1 in %s", time.Since(t0).Round(time.Millisecond))

	admin := h.AdminConfig()
	cs := kubernetes.NewForConfigOrDie(admin)
	if err := controlplane.WaitBootstrap(ctx, cs); err != nil {
		return 0, err
	}
	if err := h.dryRunDeploy(ctx, admin); err != nil {
		return 0, fmt.Errorf("server-side dry-run of deploy/: %w", err)
	}
	if err := h.apply(ctx, admin, "rbac.yaml"); err != nil {
		return 0, fmt.Errorf("apply deploy/rbac.yaml: %w", err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "kube-ipvs", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: controlplane.Ptr(int64(3600))},
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

	apiFwd, err := h.FwdScript("fwd-api", h.APIPort)
	if err != nil {
		return 0, err
	}
	ctlFwd, err := h.FwdScript("fwd-ctl", ctlPort)
	if err != nil {
		return 0, err
	}
	gnet := fmt.Sprintf("-netdev user,id=n0,restrict=on,guestfwd=tcp:%s-cmd:%s,guestfwd=tcp:%s-cmd:%s -device virtio-net-pci,netdev=n0,romfile=",
		guestAPI, apiFwd, guestCtl, ctlFwd)
	logf("booting the guest (network: restrict=on, forwards %s -> 127.0.0.1:%d, %s -> 127.0.0.1:%d)", guestAPI, h.APIPort, guestCtl, ctlPort)
	g := exec.Command(filepath.Join(h.repo, "hack/guest/boot.sh"), h.stage)
	g.Env = append(os.Environ(), "GUEST_NET="+gnet, "GUEST_TIMEOUT="+controlplane.EnvOr("GUEST_TIMEOUT", "600"))
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
				err = h.StopAPIServer()
			case "start-apiserver":
				err = h.StartAPIServer(ctx)
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
	ca, err := os.ReadFile(h.Path("ca.crt"))
	if err != nil {
		return err
	}
	cert, err := os.ReadFile(h.Path("admin.crt"))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(h.Path("admin.key"))
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
