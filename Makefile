# Retryguard's build. The two commands a newcomer needs are `make demo` and
# `make test`; everything else is for working on the project.

IMG ?= retryguard/manager:dev
GO ?= go
CONTROLLER_GEN ?= $(GO) tool controller-gen
# Tests and the local control plane run kube-apiserver and etcd built from
# source by hack/envtest-assets.sh (cached outside the checkout).
ENVTEST_ASSETS = $(shell hack/envtest-assets.sh)
TEST_FLAGS ?= -race -count=1
TEST_PKGS ?= ./...
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
test: manifests generate fmt vet envtest chart-check drill-check ## Regenerate, check and run every test against a real API server.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test $(TEST_FLAGS) $(TEST_PKGS)

##@ Development

.PHONY: manifests
manifests: ## Generate CRDs, RBAC and webhook configuration from markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths="./..." \
		output:crd:artifacts:config=config/crd/bases \
		output:rbac:artifacts:config=config/rbac \
		output:webhook:artifacts:config=config/webhook
	rm -f charts/retryguard/crds/*.yaml && cp config/crd/bases/*.yaml charts/retryguard/crds/
	mkdir -p charts/retryguard/files && sed -n '/^rules:/,$$p' config/rbac/role.yaml | tail -n +2 > charts/retryguard/files/role-rules.yaml

.PHONY: generate
generate: ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: fmt
fmt: ## go fmt the code.
	$(GO) fmt ./...

.PHONY: vet
vet: ## go vet the code.
	$(GO) vet ./...

.PHONY: verify-gen
verify-gen: manifests generate ## Fail when generated files differ from the committed ones.
	@if [[ -n "$$(git status --porcelain -- api config charts)" ]]; then \
		echo "generated files are stale; run 'make manifests generate' and commit:"; \
		git status --porcelain -- api config charts; git --no-pager diff --stat -- api config charts; exit 1; fi
	@echo "generated files are up to date"

.PHONY: envtest
envtest: ## Build (once) the kube-apiserver and etcd the tests run, and print where.
	@echo "KUBEBUILDER_ASSETS=$$(hack/envtest-assets.sh)"

.PHONY: chart-check
chart-check: manifests ## Render the Helm chart with Helm's engine and hold it to config/.
	cd hack/chartcheck && $(GO) test -count=1 ./...

.PHONY: drill-check
drill-check: envtest ## Run the real-time recovery drill's tests, its --quick run included (about a minute).
	cd hack/drills && KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test -count=1 ./...

.PHONY: fuzz
fuzz: ## Run every native fuzz test for FUZZTIME each (default 60s).
	hack/fuzz.sh $(FUZZTIME)

.PHONY: bench
bench: envtest ## Run the benchmarks recorded in docs/benchmarks.md.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test -run '^$$' -bench . -benchmem ./...

.PHONY: dev-cluster
dev-cluster: manifests envtest ## Run a local control plane in the foreground; kubeconfig in bin/dev/kubeconfig.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) run ./hack/dev-cluster

##@ Build

.PHONY: build
build: manifests generate fmt vet ## Build the manager binary.
	$(GO) build -o bin/manager .

.PHONY: run
run: manifests generate fmt vet ## Run the controllers against the current kubeconfig (webhooks need certificates: see make dev-cluster).
	$(GO) run . --leader-elect=false --enable-webhooks=false

.PHONY: docker-build
docker-build: ## Build the manager image (needs a Docker engine; there is none on the dev machines).
	docker build -t $(IMG) .

##@ Deployment

.PHONY: install
install: manifests ## Install the CRDs into the current cluster.
	kubectl apply -k config/crd

.PHONY: uninstall
uninstall: manifests ## Remove the CRDs from the current cluster.
	kubectl delete --ignore-not-found -k config/crd

.PHONY: deploy
deploy: manifests ## Deploy the manager (with cert-manager certificates) to the current cluster.
	kubectl apply -k config/default

.PHONY: undeploy
undeploy: ## Remove the manager from the current cluster.
	kubectl delete --ignore-not-found -k config/default
