# itogate — see README.md. Every target works on a fresh clone with Go 1.26;
# OPA comes from go.mod as a tool (`go tool opa`), nothing else is installed.
SHELL := /bin/bash
GO    ?= go
OPA   := $(GO) tool opa
BIN   := bin/itogate
COVERAGE_THRESHOLD ?= 90

.PHONY: image chart run build test test-go test-vet test-go-only test-policy fmt-check demo clean codes bundle fuzz bench soak compare identical test-k8s k8s-binaries

LISTEN   ?= 127.0.0.1:8443
DATA_DIR ?= ./data

## run: serve on embedded defaults (development mode, loopback, dev keys); make run LISTEN=127.0.0.1:18443 (9443 is the webhook's port)
run:
	$(GO) run ./cmd/itogate serve --listen $(LISTEN) --data-dir $(DATA_DIR)

## build: bin/itogate stamped with VERSION (default: git describe; `itogate version` prints it)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
build:
	$(GO) build -ldflags "-X github.com/itocompute/itogate/gatekeeper/version.Version=$(VERSION)" -o $(BIN) ./cmd/itogate

## image: the container image (Dockerfile: base images pinned by digest, VERSION stamped), tagged IMAGE;
##   make image IMAGE=registry.example.com/itogate:v1.2.3 VERSION=v1.2.3. Pin deployments by the digest
##   the registry reports after `docker push` (Helm value image.digest, kustomize images: digest).
IMAGE ?= itogate:$(VERSION)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
image:
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE) .
	@echo "image: $(IMAGE) $$(docker image inspect --format '{{.Id}}' $(IMAGE))"

## chart: helm lint --strict and helm template of deploy/helm/itogate, with the helm pinned in
##   hack/tools/go.mod (built from the Go module proxy); `go test ./deploy` runs the same and more.
##   make chart HELM_VALUES=my-values.yaml HELM_NAMESPACE=itogate-system
HELM           := $(GO) -C $(CURDIR)/hack/tools tool helm
HELM_NAMESPACE ?= itogate-system
HELM_VALUES    ?=
chart:
	$(HELM) lint --strict $(CURDIR)/deploy/helm/itogate --namespace $(HELM_NAMESPACE) $(if $(HELM_VALUES),--values $(abspath $(HELM_VALUES)))
	$(HELM) template itogate $(CURDIR)/deploy/helm/itogate --namespace $(HELM_NAMESPACE) $(if $(HELM_VALUES),--values $(abspath $(HELM_VALUES)))

## test: everything CI runs — gofmt, go vet, the Go tests and the policy trio (fmt, check, test+coverage).
##   Every part runs even when an earlier one fails; the summary names each failed part.
TEST_PARTS := fmt-check test-vet test-go-only test-policy

test:
	@failed=""; \
	for part in $(TEST_PARTS); do \
	  $(MAKE) --no-print-directory $$part || failed="$$failed $$part"; \
	done; \
	if [ -n "$$failed" ]; then echo "make test: FAILED:$$failed" >&2; exit 1; fi; \
	echo "make test: every part passed ($(TEST_PARTS))"

## test-go: go vet and the Go tests (-race), both run, failing if either failed
test-go:
	@failed=""; \
	for part in test-vet test-go-only; do \
	  $(MAKE) --no-print-directory $$part || failed="$$failed $$part"; \
	done; \
	if [ -n "$$failed" ]; then echo "make test-go: FAILED:$$failed" >&2; exit 1; fi

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')); \
	if [ -n "$$out" ]; then echo "gofmt: not formatted:" >&2; echo "$$out" >&2; exit 1; fi; \
	echo "gofmt: ok"

## test-vet: go vet, and again for windows so the non-unix files (*_other.go) and
##   every test file a unix build tag does not exclude keep compiling there.
test-vet:
	$(GO) vet ./...
	GOOS=windows $(GO) vet ./...

## test-go-only: -timeout is go test's hang detector per package, not a speed
##   limit: at load 45 with -race the e2e package alone ran past the 10m default.
##   The PostgreSQL ledger tests run against hack/test-postgres.sh's DSN (the local
##   server, started if needed; ITOGATE_TEST_POSTGRES_DSN to name another;
##   ITOGATE_TEST_POSTGRES=skip to run without), and through hack/test-pgbouncer.sh's
##   PgBouncer in transaction mode (ITOGATE_TEST_PGBOUNCER_DSN, ITOGATE_TEST_PGBOUNCER=skip).
##   gotestsum lists every skipped test.
GOTESTSUM := $(GO) tool gotestsum --format pkgname-and-test-fails --format-hide-empty-pkg

test-go-only:
	@dsn=$$(hack/test-postgres.sh) || exit 1; export ITOGATE_TEST_POSTGRES_DSN="$$dsn"; \
	pooler=$$(hack/test-pgbouncer.sh) || exit 1; export ITOGATE_TEST_PGBOUNCER_DSN="$$pooler"; \
	echo "$(GOTESTSUM) -- -race -count=1 -timeout 30m ./...   (PostgreSQL: $${dsn:-skipped}; PgBouncer: $${pooler:-skipped})"; \
	$(GOTESTSUM) -- -race -count=1 -timeout 30m ./...
	@# the parallelism model on all its generated layouts, and Go's training facts against the
	@# bundle's Rego reference on all their mutations (under -race each checks a sample)
	$(GO) test -count=1 -run '^TestParallelismModel$$' ./policies
	$(GO) test -count=1 -run '^TestFactsMatchReference$$' ./gatekeeper/policy

## test-policy: the policy trio; every check runs, failing at the end if any failed.
##   Keeps the coverage report in bin/coverage.json and prints a per-file summary
##   (rows not covered); fails below COVERAGE_THRESHOLD % of the policy files' lines.
test-policy:
	@failed=""; mkdir -p bin; \
	run() { echo "$$*"; "$$@" || failed="$$failed [$$*]"; }; \
	run $(OPA) fmt --list --fail policies; \
	run $(OPA) check --strict policies; \
	run $(OPA) check --strict --schema schemas/input.json policies; \
	echo "$(OPA) test policies --fail-on-empty --timeout 300s --coverage > bin/coverage.json"; \
	if $(OPA) test policies --fail-on-empty --timeout 300s --coverage > bin/coverage.json; then \
	  run $(GO) run ./internal/covsummary -threshold $(COVERAGE_THRESHOLD) bin/coverage.json; \
	else cat bin/coverage.json; failed="$$failed [opa test]"; fi; \
	if [ -n "$$failed" ]; then echo "policy: FAILED:$$failed" >&2; exit 1; fi; \
	echo "policy: fmt, check --strict, test ok (coverage >= $(COVERAGE_THRESHOLD)%; report in bin/coverage.json)"

## demo: start a real server, drive the admission cases through HTTP, print a table
demo: build
	$(BIN) demo

## codes: regenerate docs/codes.md from the policy METADATA and Go's codes
codes:
	$(GO) run ./cmd/itogate codes > docs/codes.md

## fuzz: run every fuzz target for FUZZTIME each (default 10s; seeds in testdata/fuzz/ run in `make test` too).
##   A failing input is written to the package's testdata/fuzz/<target>/: commit it with the fix.
FUZZTIME         ?= 10s
FUZZMINIMIZETIME ?= 2s
FUZZ_TARGETS     := ./gatekeeper/server:FuzzAdmissionRequest ./gatekeeper/server:FuzzDepositRequest \
                    ./gatekeeper/manifest:FuzzParse ./gatekeeper/verify:FuzzTokenVerify \
                    ./gatekeeper/verify:FuzzSignedTokenVerify ./gatekeeper/verify:FuzzManifestVerify \
                    ./gatekeeper/safefile:FuzzReadManifest ./gatekeeper/booking:FuzzMoneyMatchesRego

##   Go 1.26's fuzz coordinator can fail a target with a bare "context deadline exceeded" as
##   -fuzztime ends on a loaded machine (golang/go#75804, fixed in Go 1.27): such a run, with no
##   failing input written, is reported and not counted; any other failure fails the target.
fuzz:
	@set -uo pipefail; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; echo "fuzz: $$name ($$pkg, $(FUZZTIME))"; \
	  out=$$($(GO) test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=$(FUZZMINIMIZETIME) $$pkg 2>&1); \
	  rc=$$?; echo "$$out"; \
	  if [ $$rc -ne 0 ]; then \
	    if echo "$$out" | grep -q 'context deadline exceeded' && ! echo "$$out" | grep -q 'Failing input written' \
	       && [ "$$(echo "$$out" | grep -c -- '--- FAIL')" = 1 ] && ! echo "$$out" | grep -qE 'panic:|_test\.go:[0-9]+:'; then \
	      echo "fuzz: $$name: Go's fuzztime boundary race (golang/go#75804), no failing input: not counted"; \
	    else exit 1; fi; \
	  fi; \
	done

## bench: stage benchmarks, a CPU profile of the whole handler and the same load shapes against
##   itogate serve and opa run --server on loopback → bench/out/<UTC time>/summary.md (docs/performance.md).
##   BENCH_DURATION=10s BENCH_RATE=200 BENCH_HIGH_RATE=1000 BENCH_WORKERS=16 BENCH_BENCHTIME=1s BENCH_PROFILE_N=1500
bench:
	bench/run.sh

## compare: policy evaluation cost of BASELINE (default 814edfb) vs HEAD and vs OPA on the same bundle,
##   one interleaved run → bench/out/compare-<UTC time>/summary.md (also the last part of `make bench`)
##   make compare BASELINE=<commit> COMPARE_ROUNDS=5 COMPARE_BENCHTIME=200x
##   COMPARE_INSTRUCTIONS=1: also instructions per decision under valgrind (load-independent, ~20 min)
BASELINE ?= 814edfb
compare:
	bench/compare.sh $(BASELINE) HEAD

## identical: decisions of HEAD's policy vs BASELINE's on every fixture and 4000 seeded mutations
##   (ITOGATE_BASELINE_MUTATIONS=n); any difference but exact-money corrections fails
identical:
	bench/identical.sh $(BASELINE)

## soak: resident memory of itogate serve over many allowed admissions → bench/out/soak-<UTC time>/summary.md
##   SOAK_ADMISSIONS=100000 (1000000 for the issue's figure) SOAK_CHUNK=20000 SOAK_WORKERS=16
soak:
	bench/soak.sh

## test-k8s: the workload boundary against a REAL kube-apiserver and etcd (controller-runtime envtest):
##   the shipped ValidatingWebhookConfiguration, an itogate child process, Jobs and Pods through client-go
##   and kubectl, and the Helm chart and kustomize example installed as docs/kubernetes.md says, with the pinned
##   helm and kustomize of hack/tools (test/k8s). Not part of `make test`. The binaries come from hack/k8s-binaries.sh: built
##   from source once (10-25 min on 2 cores, ~3 GB of Go build cache) and cached outside the clone in
##   $${ITOGATE_K8S_CACHE:-~/.cache/itogate}, keyed by version; later runs take seconds to start.
test-k8s: k8s-binaries
	@assets=$$(hack/k8s-binaries.sh) && \
	$(GO) vet -tags k8s ./test/k8s/ && \
	KUBEBUILDER_ASSETS="$$assets" $(GO) test -tags k8s -count=1 -v -timeout 30m ./test/k8s/

## k8s-binaries: build (or find cached) etcd, kube-apiserver and kubectl; prints their directory
k8s-binaries:
	@hack/k8s-binaries.sh >/dev/null

clean:
	rm -rf bin data

## bundle: build and sign the policy bundle with OPA's own `opa build` → bin/bundle.tar.gz (see bundles/README.md)
##   make bundle BUNDLE_SIGNING_KEY=release.key.pem BUNDLE_KEY_ID=release-2026-11 BUNDLE_VERIFICATION_KEY=release.pub.pem
##   (or the same as ITOGATE_BUNDLE_* environment variables). Without a key: the PUBLISHED development key.
BUNDLE_OUT              ?= bin/bundle.tar.gz
BUNDLE_SIGNING_KEY      ?= $(ITOGATE_BUNDLE_SIGNING_KEY)
BUNDLE_KEY_ID           ?= $(ITOGATE_BUNDLE_KEY_ID)
BUNDLE_VERIFICATION_KEY ?= $(ITOGATE_BUNDLE_VERIFICATION_KEY)
BUNDLE_SIGNING_ALG      ?= $(or $(ITOGATE_BUNDLE_SIGNING_ALG),RS256)
BUNDLE_STAGE            := bin/bundle-stage
BUNDLE_BUILT_AT         := $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
BUNDLE_LABEL            ?= $(shell git describe --tags --always --dirty 2>/dev/null | tr -c 'A-Za-z0-9._+\n-' '_' || true)
REVISION                ?= $(subst :,,$(subst -,,$(BUNDLE_BUILT_AT)))$(if $(BUNDLE_LABEL),-$(BUNDLE_LABEL))

bundle:
	@set -euo pipefail; \
	key='$(BUNDLE_SIGNING_KEY)'; kid='$(BUNDLE_KEY_ID)'; pub='$(BUNDLE_VERIFICATION_KEY)'; \
	if [ -z "$$key" ]; then \
	  key=fixtures/keys/dev-bundle.key.pem; kid=dev-bundle-1; pub=fixtures/keys/dev-bundle.pub.pem; \
	  echo "!! bundle: signing with the PUBLISHED DEVELOPMENT key $$key (key id $$kid)." >&2; \
	  echo "!! bundle: anyone can sign with it; itogate serve --config refuses it. Development only." >&2; \
	elif [ -z "$$kid" ] || [ -z "$$pub" ]; then \
	  echo "bundle: BUNDLE_SIGNING_KEY needs BUNDLE_KEY_ID and BUNDLE_VERIFICATION_KEY (to check the result)" >&2; exit 2; \
	fi; \
	case "$$key" in /*) ;; *) key="$$PWD/$$key";; esac; \
	rm -rf $(BUNDLE_STAGE); mkdir -p $(BUNDLE_STAGE) $(dir $(BUNDLE_OUT)); \
	$(GO) build -o bin/opa github.com/open-policy-agent/opa; \
	cp -R policies/ito $(BUNDLE_STAGE)/ito; \
	printf '{"revision": "%s", "roots": ["ito"], "metadata": {"built_at": "%s"}}\n' \
	  '$(REVISION)' '$(BUNDLE_BUILT_AT)' > $(BUNDLE_STAGE)/.manifest; \
	out='$(BUNDLE_OUT)'; case "$$out" in /*) ;; *) out="$$PWD/$$out";; esac; opa="$$PWD/bin/opa"; \
	( cd $(BUNDLE_STAGE) && "$$opa" build --bundle . --ignore testdata --ignore '*_test.rego' \
	    --signing-key "$$key" --signing-alg $(BUNDLE_SIGNING_ALG) --verification-key-id "$$kid" -o "$$out" ); \
	rm -rf $(BUNDLE_STAGE); \
	$(GO) run ./cmd/itogate bundle inspect --verification-key "$$pub" --key-id "$$kid" \
	  --algorithm $(BUNDLE_SIGNING_ALG) "$$out" || { rm -f "$$out"; echo "bundle: $$out removed" >&2; exit 1; }
