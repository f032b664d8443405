package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
)

// checker runs the checks of make cluster (the smoke set) or make cluster-test (all of them)
// against the running cluster, as the admin, and counts what passed.
type checker struct {
	h    *host
	cs   kubernetes.Interface
	boot time.Time    // QEMU's start
	conf *conformance // make conformance: the suite's run instead of the checks
	sli  *sliRun      // make sli: its load and measurement instead of the checks

	passed, failed int

	// Learned along the way.
	echoIP string // the echo Service's ClusterIP
	// The address of the node the client Pod runs on: whose IPVS table its requests meet.
	clientNode string
	echoPods   map[string]string // the echo Deployment's Pods: name -> IP
	proxyLog   []string          // logs of kube-ipvs Pods gone by (checked at the end)
}

// step is one check. A gate that fails stops the run: what follows needs it.
type step struct {
	name string
	gate bool
	run  func(ctx context.Context) (string, error)
}

func (c *checker) steps(all bool) []step {
	if c.sli != nil {
		return c.sliSteps()
	}
	if c.conf != nil {
		return []step{
			{"every Node is Ready", true, c.nodeReady},
			c.deployStep(),
			{"CoreDNS is Ready behind the kube-dns Service", true, c.deployDNS},
			{"the conformance images are on every node", true, c.conformanceImages},
			{"Kubernetes' e2e suite passes", false, c.suite},
			// Reported beside the specs, never failing the run: its result is the specs'.
			{"the proxy's sync times", false, func(ctx context.Context) (string, error) {
				d, err := c.syncTimes(ctx)
				if err != nil {
					return "not read: " + err.Error(), nil
				}
				return d, nil
			}},
		}
	}
	// With kube-proxy in place of kube-ipvs (the reference for what the traffic and scaling
	// checks see from a proxy the field trusts), the checks of kube-ipvs' own tools, metrics
	// and logs, and the rolling update (whose new Pods must write nothing, which kube-proxy
	// does not claim), are left out.
	ours := c.h.proxy == "kube-ipvs"
	s := []step{
		{"every Node is Ready", true, c.nodeReady},
		c.deployStep(),
		{"CoreDNS is Ready behind the kube-dns Service", true, c.deployDNS},
		{"three echo Pods and the clients run", true, c.deployWorkload},
		{"pod proxy and kubectl logs reach an echo Pod", false, c.podProxyAndLogs},
		{"a client Pod reaches all three through the ClusterIP", false, c.clusterIP},
		{"a client Pod reaches all three by the Service's DNS names", false, c.dnsName},
		{"the NodePort answers on the node", false, c.nodePortFromNode},
		{"every node's NodePort answers from outside the cluster", false, c.nodePortFromOutside},
	}
	multi := len(c.h.nodes) > 1
	if multi {
		s = append(s,
			step{"a Pod on each other node behind the far Service, one behind the Local policies", false, c.deployCrossNode},
			step{"a client Pod reaches the far Service's Pods on the other nodes by ClusterIP and DNS names", false, c.crossNodeService})
	}
	if multi && all {
		s = append(s, step{"externalTrafficPolicy and internalTrafficPolicy Local across nodes behave as kube-proxy's", false, c.trafficPolicyLocal})
	}
	if ours {
		s = append(s,
			step{"kube-ipvs list and ipvsadm -Ln in the kube-ipvs Pod show the Services", false, c.proxyTools},
			step{"/healthz and /metrics of kube-ipvs answer on every node", false, c.healthAndMetrics})
	}
	if all && ours {
		s = append(s,
			step{"connections held through every node survive a rolling update and a re-created Pod, which write nothing", false, c.updateAndRecreate},
			step{"traffic through a node goes on while its kube-ipvs is SIGKILLed, and the restarted one writes nothing", false, c.killProxy})
	}
	if all {
		s = append(s, step{"the IPVS table follows a scale to 10 and back to 3, with no failed request", false, c.scale})
	}
	if all && multi {
		s = append(s, step{"kubectl drain of a node with backends fails no request from another node", false, c.drain})
	}
	s = append(s, step{c.h.proxy + "'s sync times", false, c.syncTimes},
		step{"what each node costs the guest", false, c.nodeCost})
	if ours {
		s = append(s, step{"the kube-ipvs logs show no error", false, c.logsClean})
	}
	return s
}

// deployStep deploys the proxy the run is for: kube-ipvs from deploy/, or kube-proxy in IPVS
// mode from hack/cluster/kube-proxy.
func (c *checker) deployStep() step {
	if c.h.proxy == "kube-proxy" {
		return step{"kube-proxy (IPVS mode) deployed from hack/cluster/kube-proxy is Ready", true, c.deployKubeProxy}
	}
	return step{"kube-ipvs deployed from deploy/ is Ready", true, c.deployProxy}
}

// runAll runs the steps in order and prints each result and, last, "N passed, M failed".
func (c *checker) runAll(ctx context.Context, all bool) error {
	steps := c.steps(all)
	for i, s := range steps {
		t := time.Now()
		detail, err := s.run(ctx)
		d := time.Since(t).Round(100 * time.Millisecond)
		if err == nil {
			c.passed++
			logf("PASS %s (%s): %s", s.name, d, detail)
			continue
		}
		c.failed++
		logf("FAIL %s (%s): %v", s.name, d, err)
		if s.gate || ctx.Err() != nil {
			for _, rest := range steps[i+1:] {
				c.failed++
				logf("FAIL %s: not run", rest.name)
			}
			break
		}
	}
	if c.failed > 0 {
		return errors.New("some checks failed")
	}
	return nil
}

func (c *checker) summary() string {
	if c.conf != nil {
		// make conformance counts the specs; a run that never reached them failed once.
		if !c.conf.ran {
			return "0 passed, 1 failed (the suite did not run)"
		}
		return fmt.Sprintf("%d passed, %d failed", c.conf.passed, c.conf.fail)
	}
	return fmt.Sprintf("%d passed, %d failed", c.passed, c.failed)
}

// note prints a progress line when it differs from the last one.
type noter struct {
	boot time.Time
	last string
}

func (n *noter) note(s string) {
	if s != n.last {
		logf("  %s: %s", time.Since(n.boot).Round(time.Second), s)
		n.last = s
	}
}
