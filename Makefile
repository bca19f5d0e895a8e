# itogate — see README.md. Every target works on a fresh clone with Go 1.26;
# OPA comes from go.mod as a tool (`go tool opa`), nothing else is installed.
SHELL := /bin/bash
GO    ?= go
OPA   := $(GO) tool opa
BIN   := bin/itogate
COVERAGE_THRESHOLD ?= 90

.PHONY: run build test test-go test-policy fmt-check demo clean codes

LISTEN   ?= 127.0.0.1:8443
DATA_DIR ?= ./data

## run: serve on embedded defaults (development mode, loopback, dev keys); make run LISTEN=127.0.0.1:9443
run:
	$(GO) run ./cmd/itogate serve --listen $(LISTEN) --data-dir $(DATA_DIR)

build:
	$(GO) build -o $(BIN) ./cmd/itogate

## test: everything CI runs — Go tests, then the policy trio (fmt, check, test+coverage)
test: test-go test-policy

test-go:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

test-policy:
	$(OPA) fmt --list --fail policies
	$(OPA) check --strict policies
	$(OPA) check --strict --schema policies/schemas/input.json policies
	$(OPA) test policies --ignore schemas --fail-on-empty --coverage --threshold $(COVERAGE_THRESHOLD) > /dev/null
	@echo "policy: fmt, check --strict, test (coverage >= $(COVERAGE_THRESHOLD)%) ok"

## demo: start a real server, drive the admission cases through HTTP, print a table
demo: build
	$(BIN) demo

## codes: regenerate docs/codes.md from the policy METADATA and Go's codes
codes:
	$(GO) run ./cmd/itogate codes > docs/codes.md

clean:
	rm -rf bin data
