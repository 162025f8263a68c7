# Retryguard's build. The two commands a newcomer needs are `make demo` and
# `make test`; everything else is for working on the project.

GO ?= go
CONTROLLER_GEN ?= $(GO) tool controller-gen
GOFMT ?= $(shell $(GO) env GOROOT)/bin/gofmt
# Tests and the local control plane run kube-apiserver and etcd built from
# source by hack/envtest-assets.sh (cached outside the checkout).
ENVTEST_ASSETS = $(shell hack/envtest-assets.sh)
TEST_FLAGS ?= -race -count=1
TEST_PKGS ?= ./...
# The contract (what the API and the pods share, on the standard library
# alone) and the runtime are modules of their own (applications import them
# without the operator's dependencies), the runtime with nested modules for the client-go informer,
# the Kafka sink, the gRPC interceptor, the OpenTelemetry observer and the peer benchmarks; the
# conformance vectors (conformance/) run against it from a module of their own.
# make test, fmt and vet cover each.
RUNTIME_MODULES = contract runtime runtime/watch/informer runtime/events/kafka runtime/grpc runtime/otel runtime/benchmarks conformance
# runtime/benchmarks holds benchmarks only: vet compiles it, make bench runs it.
RUNTIME_TEST_MODULES = contract runtime runtime/watch/informer runtime/events/kafka runtime/grpc runtime/otel conformance
FUZZTIME ?= 60s

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ The two commands

.PHONY: demo
demo: manifests envtest ## Run the story on an embedded local control plane, then tear it down.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) run ./hack/demo

.PHONY: test
test: manifests generate fmt vet api-lint envtest chart-check image-check publish-check drill-check e2e-apps-check consumer-check otlp-check release-check ## Regenerate, check and run every test against a real API server.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test $(TEST_FLAGS) $(TEST_PKGS)
	for m in $(RUNTIME_TEST_MODULES); do KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) -C $$m test $(TEST_FLAGS) ./...; done

##@ Development

.PHONY: api-lint
api-lint: ## Run Kube API Linter over the API types (api/v1alpha1: the other api/ packages serialize nothing); exclusions and their reasons are in hack/kal.
	cd hack/kal && $(GO) build -o ../../bin/kal .
	bin/kal -test=false ./api/v1alpha1/

.PHONY: manifests
manifests: ## Generate CRDs, RBAC and webhook configuration from markers, with the bounds of contract/limits written into the CRDs and the payload schema, and the admission vectors from the admission table.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths="./..." \
		output:crd:artifacts:config=config/crd/bases \
		output:rbac:artifacts:config=config/rbac \
		output:webhook:artifacts:config=config/webhook
	$(GO) run ./hack/crdbounds
	cd conformance && RETRYGUARD_WRITE_SCHEMA=1 $(GO) test -count=1 -run '^TestTheSchemaBoundsAreTheLimits$$' .
	$(GO) test -count=1 -run '^TestConformanceAdmissionVectors$$' ./api/v1alpha1 -update-vectors
	hack/chart-crds.sh config/crd/bases charts/retryguard/templates
	$(GO) run ./hack/apiref
	mkdir -p charts/retryguard/files
	for role in role:role-rules leader_election_role:leader-election-rules metrics_auth_role:metrics-auth-rules; do \
		sed -n '/^rules:/,$$p' config/rbac/$${role%%:*}.yaml | tail -n +2 > charts/retryguard/files/$${role##*:}.yaml; done

.PHONY: generate
generate: ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: fmt
fmt: ## go fmt the code.
	$(GO) fmt ./...
	@# go fmt ignores go.work (go1.26), so in a nested module it cannot resolve the
	@# module's own packages; gofmt -l -w is all it would run on them.
	$(GOFMT) -l -w $(RUNTIME_MODULES)

.PHONY: vet
vet: ## go vet the code.
	$(GO) vet ./...
	for m in $(RUNTIME_MODULES); do $(GO) -C $$m vet ./...; done

.PHONY: exports
exports: ## Regenerate runtime/exports.txt and contract/exports.txt, the exported identifiers (make test fails until a new export is listed and reviewed).
	$(GO) -C runtime test -count=1 ./internal/exports -run TestExportsAreTheGolden -update

.PHONY: verify-gen
verify-gen: manifests generate ## Fail when generated files differ from the committed ones.
	@if [[ -n "$$(git status --porcelain -- api config charts)" ]]; then \
		echo "generated files are stale; run 'make manifests generate' and commit:"; \
		git status --porcelain -- api config charts; git --no-pager diff --stat -- api config charts; exit 1; fi
	@echo "generated files are up to date"

.PHONY: envtest
envtest: ## Build (once) the kube-apiserver and etcd the tests run, and print where.
	@echo "KUBEBUILDER_ASSETS=$$(hack/envtest-assets.sh)"

# promtool (for the chart's alert rule tests) is built from the Go module proxy
# once, pinned and cached outside the checkout by hack/gotool.sh.
PROMTOOL = $(shell hack/gotool.sh promtool)

.PHONY: chart-check
chart-check: manifests envtest ## Lint, render, install, upgrade and uninstall the Helm chart; prove its RBAC and admission policy by impersonation; test its alerts with promtool; hold its README's values table to the schema.
	cd hack/chartcheck && KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" PROMTOOL="$(PROMTOOL)" $(GO) test -count=1 ./...

.PHONY: api-reference
api-reference: ## Regenerate docs/api-reference.md from the CRDs in config/crd/bases (make manifests runs it too).
	$(GO) run ./hack/apiref

.PHONY: chart-readme
chart-readme: ## Regenerate the values table in charts/retryguard/README.md from values.schema.json and values.yaml.
	cd hack/chartcheck && RETRYGUARD_WRITE_README=1 $(GO) test -count=1 -run '^TestChartReadmeValuesTable$$' .

.PHONY: consumer-check
consumer-check: ## Check that an application importing the runtime takes none of the operator's dependencies.
	cd hack/consumer && $(GO) test -count=1 ./...

.PHONY: otlp-check
otlp-check: ## Read the traces of a request through the RoundTripper and through the sidecar (a real process) back from the OpenTelemetry Collector's OTLP receiver.
	cd hack/otlp && $(GO) test -count=1 ./...

.PHONY: release-check
release-check: ## Publish the modules at a test version to a file-based module proxy, then go install the plugin and go get the runtime from it, as docs/release.md says.
	cd hack/release && $(GO) test -count=1 -timeout 45m ./...

.PHONY: drill-check
drill-check: envtest ## Run the recovery drill's tests, its --quick run (the drill's regression guard) included (about a minute).
	cd hack/drills && KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test -count=1 ./...

# The e2e suite's apps and helpers (the fleet drill's dependency and clients
# among them) have unit tests of their own, on loopback; the suite itself
# needs the node (make e2e).
.PHONY: e2e-apps-check
e2e-apps-check: ## Vet the e2e module and run its apps' and helpers' tests (not the suite: make e2e).
	$(GO) -C test/e2e vet ./...
	$(GO) -C test/e2e test $(TEST_FLAGS) ./apps/... ./internal/...

.PHONY: fuzz
fuzz: ## Run every native fuzz test for FUZZTIME each (default 60s).
	hack/fuzz.sh $(FUZZTIME)

.PHONY: e2e-cluster
e2e-cluster: ## Run a real single-node cluster (root; Ctrl-C tears it down and restores the host).
	cd hack/e2e && $(GO) run ./cmd/e2e-cluster

E2E_FLAGS ?= -timeout 80m
.PHONY: e2e
e2e: manifests image ## Publish make image's images and the chart to a registry on a real single-node cluster, verify their signatures, install from it and run the story with real pods (root).
	cd test/e2e && RETRYGUARD_E2E_MANAGER_IMAGE=$${RETRYGUARD_E2E_MANAGER_IMAGE:-$(abspath $(IMAGE_DIR))/retryguard-manager.tar} \
		RETRYGUARD_E2E_PROXY_IMAGE=$${RETRYGUARD_E2E_PROXY_IMAGE:-$(abspath $(IMAGE_DIR))/retryguard-proxy.tar} RETRYGUARD_E2E_TIMINGS=$${RETRYGUARD_E2E_TIMINGS:-/var/tmp/retryguard-e2e-timings.tsv} \
		$(GO) test -v -count=1 $(E2E_FLAGS) . -args -ginkgo.v -ginkgo.label-filter=e2e

# The fleet drill's full form (docs/fleet-drill.md): the chart installed, then
# every trigger run with naive retries and with Retryguard on 20 client pods.
# make e2e runs its quick form.
FLEET_DRILL_OUT ?= $(abspath bin/fleet-drill)
.PHONY: fleet-drill
fleet-drill: manifests image ## Run the fleet drill's full form on the e2e node (root; about 20 min): report and plot in FLEET_DRILL_OUT.
	cd test/e2e && RETRYGUARD_E2E_MANAGER_IMAGE=$${RETRYGUARD_E2E_MANAGER_IMAGE:-$(abspath $(IMAGE_DIR))/retryguard-manager.tar} \
		RETRYGUARD_E2E_PROXY_IMAGE=$${RETRYGUARD_E2E_PROXY_IMAGE:-$(abspath $(IMAGE_DIR))/retryguard-proxy.tar} \
		RETRYGUARD_FLEET_DRILL=full RETRYGUARD_FLEET_DRILL_OUT=$(FLEET_DRILL_OUT) \
		$(GO) test -v -count=1 $(E2E_FLAGS) . -args -ginkgo.v '-ginkgo.label-filter=install || fleet-drill'

.PHONY: bench
bench: envtest ## Run the benchmarks recorded in docs/benchmarks.md.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test -run '^$$' -bench . -benchmem ./...
	for m in $(RUNTIME_MODULES); do KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) -C $$m test -run '^$$' -bench . -benchmem ./...; done

# The paired benchmarks (ours and a peer interleaved in one run, on one CPU),
# three runs each; benchcheck holds each median to its goal, past it by no
# more than half the runs' spread (docs/benchmarks.md).
BENCH_CHECK_OUT ?= bin/bench-check.txt
.PHONY: bench-check
bench-check: ## Run the paired benchmarks three times; fail when a median is past its goal by more than the runs' noise.
	@mkdir -p $(dir $(BENCH_CHECK_OUT))
	$(GO) -C runtime/benchmarks test -run '^$$' -bench '^Benchmark(DoSuccess|Budget)$$/-paired$$' -benchmem -cpu 1 -count 3 -benchtime 300ms . \
		> $(BENCH_CHECK_OUT) || { cat $(BENCH_CHECK_OUT); exit 1; }
	$(GO) -C runtime/grpc test -run '^$$' -bench '^BenchmarkUnaryPaired$$' -count 3 -benchtime 2s . \
		>> $(BENCH_CHECK_OUT) || { cat $(BENCH_CHECK_OUT); exit 1; }
	$(GO) test -run '^$$' -bench '^BenchmarkProxyPaired$$' -cpu 1 -count 3 -benchtime 150x ./proxy/ \
		>> $(BENCH_CHECK_OUT) || { cat $(BENCH_CHECK_OUT); exit 1; }
	$(GO) -C runtime/benchmarks run ./internal/benchcheck < $(BENCH_CHECK_OUT)

.PHONY: dev-cluster
dev-cluster: manifests envtest ## Run a local control plane in the foreground; kubeconfig in bin/dev/kubeconfig.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) run ./hack/dev-cluster

##@ Build

.PHONY: build
build: manifests generate fmt vet ## Build the manager binary.
	$(GO) build -o bin/manager ./cmd/manager

.PHONY: plugin
plugin: ## Build the kubectl plugin (kubectl retryguard graph | explain | lint).
	$(GO) build -o bin/kubectl-retryguard ./cmd/kubectl-retryguard

.PHONY: run
run: manifests generate fmt vet ## Run the controllers against the current kubeconfig (webhooks need certificates: see make dev-cluster).
	$(GO) run ./cmd/manager --leader-elect=false --enable-webhooks=false

# `make image` needs neither Docker nor a registry: hack/image packs the static
# manager FROM scratch into an OCI layout tarball, tagged with the chart's
# appVersion, that `ctr -n k8s.io images import` and `docker load` both take.
IMAGE_DIR ?= bin/image
IMAGE_VERSION ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' charts/retryguard/Chart.yaml)
IMAGE_REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
IMAGE_CREATED ?= $(shell git log -1 --format=%ct 2>/dev/null || date +%s)

.PHONY: image
image: ## Build the manager's and the retryguard-proxy sidecar's images without Docker into bin/image/retryguard-{manager,proxy}.tar.
	mkdir -p $(IMAGE_DIR)
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -buildvcs=auto \
		-ldflags "-s -w -X main.version=$(IMAGE_VERSION) -X main.revision=$(IMAGE_REVISION)" -o $(IMAGE_DIR)/manager ./cmd/manager
	cd hack/image && $(GO) run . -binary $(abspath $(IMAGE_DIR))/manager -output $(abspath $(IMAGE_DIR))/retryguard-manager.tar \
		-version "$(IMAGE_VERSION)" -revision "$(IMAGE_REVISION)" -created "$(IMAGE_CREATED)"
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -buildvcs=auto -ldflags "-s -w" -o $(IMAGE_DIR)/retryguard-proxy ./cmd/retryguard-proxy
	cd hack/image && $(GO) run . -binary $(abspath $(IMAGE_DIR))/retryguard-proxy -output $(abspath $(IMAGE_DIR))/retryguard-proxy.tar \
		-repository retryguard/proxy -path /retryguard-proxy -title retryguard-proxy \
		-version "$(IMAGE_VERSION)" -revision "$(IMAGE_REVISION)" -created "$(IMAGE_CREATED)"

.PHONY: image-check
image-check: image ## Read the image back: user, entrypoint, labels, no shell, the manager inside.
	cd hack/image && RETRYGUARD_IMAGE_ARCHIVE=$(abspath $(IMAGE_DIR))/retryguard-manager.tar \
		RETRYGUARD_IMAGE_BINARY=$(abspath $(IMAGE_DIR))/manager $(GO) test -count=1 ./...

.PHONY: release
release: ## Stamp VERSION (vX.Y.Z) into every sibling require, the chart and the kustomize image tag; print the tags (docs/release.md).
	@if [[ -z "$(VERSION)" ]]; then echo "usage: make release VERSION=vX.Y.Z"; exit 2; fi
	$(GO) -C hack/release run . $(VERSION)

# make release-push publishes what make image built and the chart to an OCI
# registry (docs/release.md): REGISTRY is host[:port][/path]; the images go to
# $(REGISTRY)/retryguard/{manager,proxy}:<appVersion> and the chart to
# oci://$(REGISTRY)/charts. cosign (hack/gotool.sh) signs each by digest with
# COSIGN_KEY, whose password is in COSIGN_PASSWORD, and attests each image's
# CycloneDX SBOM, kept in bin/release/. REGISTRY_CA trusts a private CA.
COSIGN = $(shell hack/gotool.sh cosign)
CYCLONEDX_GOMOD = $(shell hack/gotool.sh cyclonedx-gomod)
COSIGN_KEY ?= cosign.key
REGISTRY_CA ?=

# Asked for before make image spends minutes building.
ifneq ($(filter release-push,$(MAKECMDGOALS)),)
ifeq ($(REGISTRY),)
$(error usage: make release-push REGISTRY=registry.example.com[/path] COSIGN_KEY=cosign.key (COSIGN_PASSWORD in the environment))
endif
endif

.PHONY: release-push
release-push: image ## Push the images and the chart to REGISTRY, sign each with cosign (COSIGN_KEY, COSIGN_PASSWORD), attest each image's SBOM (docs/release.md).
	$(GO) -C hack/publish run ./cmd/publish -registry "$(REGISTRY)" $(if $(REGISTRY_CA),-ca "$(abspath $(REGISTRY_CA))") \
		-key "$(abspath $(COSIGN_KEY))" -cosign "$(COSIGN)" -sbom-tool "$(CYCLONEDX_GOMOD)" -out "$(abspath bin/release)" \
		-chart "$(abspath charts/retryguard)" "$(abspath $(IMAGE_DIR))/retryguard-manager.tar" "$(abspath $(IMAGE_DIR))/retryguard-proxy.tar"

.PHONY: publish-check
publish-check: ## Push, sign, attest and verify a release against a real registry (CNCF Distribution on loopback); a moved tag and another key are refused.
	cd hack/publish && $(GO) test -count=1 ./...

.PHONY: tidy
tidy: ## go mod tidy the published modules (go mod tidy ignores go.work; this replaces their siblings by directory meanwhile).
	$(GO) -C hack/release run . -tidy

##@ Deployment

.PHONY: install
install: manifests ## Install the CRDs into the current cluster.
	kubectl apply -k config/crd

.PHONY: uninstall
uninstall: manifests ## Remove the CRDs from the current cluster.
	kubectl delete --ignore-not-found -k config/crd

# CERT_MANAGER=false deploys config/without-cert-manager: the manager issues,
# rotates and injects its own webhook serving certificate.
CERT_MANAGER ?= true
DEPLOY_DIR = $(if $(filter false,$(CERT_MANAGER)),config/without-cert-manager,config/default)

.PHONY: deploy
deploy: manifests ## Deploy the manager to the current cluster (certificates from cert-manager; CERT_MANAGER=false: its own).
	kubectl apply --server-side -k $(DEPLOY_DIR)

.PHONY: undeploy
undeploy: ## Remove the manager AND the CRDs (with every RetryPolicy and RetryBudget) from the current cluster.
	kubectl delete --ignore-not-found -k $(DEPLOY_DIR)
