# kube-ipvs. `make help` lists the targets.
SHELL := /usr/bin/env bash
export PATH := $(PATH):/usr/local/go/bin:/usr/sbin:/sbin

GO      ?= go
HOSTSTATE := $(CURDIR)/.cache/host-state
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

.PHONY: help demo build test unit guest-test guest-run bench lint clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

demo: ## boot the guest and show kube-ipvs balancing real traffic (examples/)
	hack/guest/run.sh examples/demo.sh

build: ## build bin/kube-ipvs (static)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/kube-ipvs ./cmd/kube-ipvs

# What make test runs on the supported kernels other than the default one (5.10 and 6.12):
# the end-to-end traffic suites, test/e2e and the scenarios (hack/guest/kernel-matrix.sh).
# make e2e stays on the default kernel: what it adds to test/e2e is the API server's watch,
# which no kernel changes. Of test/e2e, the tests whose kernel side other tests there already
# cover are left out, since they prove the proxy's own logic (manifest errors, the HTTP
# endpoints, address conflicts, drain timing and restart; the list/explain formatting, the
# health checker's fail-open and HTTP verdicts, the repair cycle's log, and the scheduler
# measurements of docs/schedulers.md other than sh/mh churn, whose weight-0 and rr/lc/wrr
# kernel side the remaining tests exercise; the detectLocalMode, nodePortAddresses and
# no-local-endpoints matrices of both modes, whose iptables matches and IPVS answers the
# remaining firewall tests use too). `make kernel-matrix` alone runs everything.
TEST_KERNEL_SUITES ?= e2e-pkg scenarios
TEST_KERNEL_E2E_SKIP ?= ^(TestOnceAndMalformedManifests|TestHealthAndMetricsEndpoints|TestServiceHealthNodePortFlips|TestLoadBalancerConflictLoserWritesNothing|TestServiceCannotTakeTheNodeAddresses|TestRestartMidDrainKeepsDraining|TestDrainEndsAtTheTimeout|TestEndpointBackWhileDrainingGetsWeightBack|TestListAndExplain|TestHealthCheckAllDownFailsOpen|TestHTTPHealthCheck500CountsAsFailed|TestRepairCyclesAreLoggedAndMeasured|TestSchedulerLeastConnectionBalancesHeldConnections|TestSchedulerPerNodeLeastConnection|TestSchedulerWeightedEqualAndZeroWeights|TestInitOnlyThenLeastPrivilege|TestKubeProxyMetricNamesOnAScrape|TestManifestReloadOfThousandsOnBusyCPUs|TestDetectLocalModes|TestNodePortAddressesCombinations|TestTrafficPolicyLocalWithoutLocalEndpoints)$$

test: ## host unit tests, the guest (real-kernel) suite, then the traffic suites on 5.10 and 6.12; fails if the host's network changed
	@hack/deps.sh
	@mkdir -p .cache && hack/host-state.sh >$(HOSTSTATE).before
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory unit
	$(MAKE) --no-print-directory guest-test
	$(MAKE) --no-print-directory guest-scenarios
	$(MAKE) --no-print-directory e2e
	KERNEL_MATRIX_SUITES="$(TEST_KERNEL_SUITES)" KERNEL_MATRIX_E2E_SKIP='$(TEST_KERNEL_E2E_SKIP)' \
	  $(MAKE) --no-print-directory kernel-matrix
	@hack/host-state.sh >$(HOSTSTATE).after; \
	if ! diff -u $(HOSTSTATE).before $(HOSTSTATE).after; then \
	  echo "make test: the host's own network state changed during the tests (diff above)" >&2; exit 1; \
	fi; rm -f $(HOSTSTATE).before $(HOSTSTATE).after; \
	echo "make test: host network namespace, routes, firewall and ipsets unchanged"

unit: ## host unit tests (pure logic; nothing touches the host's kernel state)
	$(GO) test -count=1 ./...
	cd hack/image && GOWORK=off $(GO) test -count=1 ./...
	cd test/kustomize && GOWORK=off $(GO) test -count=1 ./...
	cd test/apiserver && GOWORK=off $(GO) test -count=1 ./cmd/conformance-report ./cmd/cluster-host

guest-test: ## build the guest-tagged tests and run them inside the QEMU guest
	hack/guest/test.sh

.PHONY: guest-scenarios
guest-scenarios: ## run every test/scenarios/*.sh in a guest of its own (SCENARIOS=name to pick)
	hack/guest/scenarios.sh

.PHONY: e2e
e2e: ## kube-ipvs in the guest against a real kube-apiserver + etcd on the host's loopback (docs/e2e.md)
	hack/e2e/run.sh

.PHONY: cluster
cluster: ## one-node cluster (control plane on the host, kubelet + containerd in the guest), kube-ipvs from deploy/, CoreDNS, traffic checks (PROXY=kube-proxy; docs/cluster.md); not part of test
	hack/cluster/run.sh smoke

.PHONY: cluster-test
cluster-test: ## make cluster plus the operator checks: rolling update, re-created Pod, scaling (PROXY=kube-proxy; docs/cluster.md); not part of test
	hack/cluster/run.sh all

.PHONY: conformance
conformance: ## Kubernetes' e2e [sig-network] Services [Conformance] specs on make cluster's cluster (SELECTION=sig-network for the wide one, FOCUS, SKIP, PROXY=kube-proxy, PROCS; docs/conformance.md); not part of test
	hack/conformance/run.sh

.PHONY: sli
sli: ## the network programming latency SLI through make cluster's API server under a CL2-style load on kwok's fake nodes (SERVICES, REPLICAS, FAKE_NODES, CHURN, PROXY=kube-proxy; docs/sli.md); not part of test
	hack/sli/run.sh

.PHONY: parity
parity: ## kube-proxy v1.37's IPVS proxier beside kube-ipvs in one guest: IPVS, kube-ipvs0 and ipsets diffed (docs/differences-from-kube-proxy.md); PARITY_SHOW=1 prints both states
	GUEST_APPEND="$(GUEST_APPEND) $(if $(PARITY_SHOW),parity.show=1)" hack/guest/run.sh test/parity/parity.sh

.PHONY: migration
migration: ## kube-proxy v1.37 (IPVS) -> kube-ipvs -> kube-proxy (iptables) on one guest node with held connections (docs/migration.md)
	hack/guest/run.sh test/migration/migration.sh
	hack/guest/run.sh test/migration/conntrack-gap.sh

.PHONY: image
image: ## build the DaemonSet's OCI image (linux/amd64 + arm64) into _output/image; no container engine needed
	VERSION=$(VERSION) hack/image/build.sh

.PHONY: kernel-matrix
kernel-matrix: ## test/e2e, the scenarios and e2e on the other kernels (KERNEL_MATRIX="5.10 6.12", KERNEL_MATRIX_SUITES; GUEST_KERNEL picks one for any target)
	hack/guest/kernel-matrix.sh

guest-run: ## run SCRIPT=path/to/script.sh inside the guest, with kube-ipvs on PATH
	@test -n "$(SCRIPT)" || { echo "usage: make guest-run SCRIPT=path/to/script.sh" >&2; exit 2; }
	hack/guest/run.sh "$(SCRIPT)"

# make guest-run exits with the script's own status (make alone can only exit 0 or 2): with
# the kipvs-exit plugin loaded, the scenario runs while make parses, its output going straight
# to make's stdout and stderr, and make leaves with its status. Without a C compiler the
# recipe above runs instead, and a failing script makes make exit 2.
EXIT_PLUGIN := .cache/kipvs_exit.so
ifeq ($(MAKECMDGOALS),guest-run)
ifneq ($(SCRIPT),)
-load $(EXIT_PLUGIN)
$(EXIT_PLUGIN): hack/guest/kipvs_exit.c
	@mkdir -p $(@D) && cc -shared -fPIC -O2 -o $@ $< 2>/dev/null || true
ifneq ($(filter %kipvs_exit.so,$(.LOADED)),)
$(kipvs-exit $(shell hack/guest/run.sh '$(SCRIPT)' >>/proc/$$PPID/fd/1 2>>/proc/$$PPID/fd/2; echo $$?))
endif
endif
endif

bench: ## scale bench in the guest (1k/10k/50k Services), writes BENCHMARKS.md and docs/bench.png; not part of test
	hack/bench.sh

lint: ## gofmt and go vet (host and guest build tags)
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags guest ./...
	cd hack/image && GOWORK=off $(GO) vet ./...

clean: ## remove build output (keeps the guest download cache; rm -rf .cache to drop it)
	rm -rf bin
