# outboxd developer tasks. `make help` lists them.
GO ?= go

.PHONY: help test test-short build bench lint fmt oldest-go

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

test: ## vet, then the whole suite with the race detector (needs PostgreSQL; see README)
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 15m ./...
	$(GO) test -race -count=1 -tags failpoints ./internal/failpoint/

test-short: ## the whole suite without the race detector
	$(GO) test -count=1 -timeout 10m ./...

# The release build: CGO off, so the binary links no libc and runs on any
# Linux of the same architecture, including a scratch or distroless image
# (the Dockerfile runs this target). VERSION is what `outboxd version` prints.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BIN ?= bin/outboxd
BUILD_FLAGS = -trimpath -ldflags "-s -w -X github.com/outboxd/outbox/internal/cli.Version=$(VERSION)"

build: ## build bin/outboxd (or BIN), static (CGO_ENABLED=0)
	CGO_ENABLED=0 $(GO) build $(BUILD_FLAGS) -o $(BIN) ./cmd/outboxd

bench: build ## drain 200k messages through the null sink, outboxd vs the article's per-row design
	./bin/outboxd bench --variant both

# The go directive in go.mod is the oldest Go supported; this target builds
# and vets everything, tests included, with that exact toolchain.
GO_MIN = $(shell awk '/^go /{print $$2}' go.mod)

oldest-go: ## build and vet every package with the oldest supported Go (the go directive)
	GOTOOLCHAIN=go$(GO_MIN) $(GO) vet ./...

fmt: ## gofmt the tree
	gofmt -w $$(git ls-files '*.go')

GOLANGCI_LINT ?= $(shell command -v golangci-lint || echo $$($(GO) env GOPATH)/bin/golangci-lint)

lint: ## gofmt check, go vet, then golangci-lint (.golangci.yml) when installed
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	@if [ -x "$(GOLANGCI_LINT)" ]; then nice -n 10 $(GOLANGCI_LINT) run ./...; \
	else echo "golangci-lint not installed: go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0"; fi

.PHONY: chaos chaos-ci chaos-soak

# Where the chaos suite writes one directory per run (report.json, events,
# deliveries, worker logs).
CHAOS_OUT ?= $(CURDIR)/tmp/chaos

chaos: ## fault-injection suite, verbose: failpoint matrix + 90 s of random faults (CHAOS_SEED replays)
	CHAOS_OUT=$(CHAOS_OUT) $(GO) test -tags chaos -count=1 -parallel 1 -timeout 10m -v -run 'TestChecker|TestFailpointMatrix|TestRandomFaults' ./chaos/

chaos-ci: ## the chaos tiers CI runs (tiers 1 and 2, about 3 minutes)
	CHAOS_OUT=$(CHAOS_OUT) $(GO) test -tags chaos -count=1 -parallel 1 -timeout 8m -run 'TestChecker|TestFailpointMatrix|TestRandomFaults' ./chaos/

chaos-soak: ## random faults for CHAOS_DURATION (default 30m), by hand
	CHAOS_OUT=$(CHAOS_OUT) CHAOS_DURATION=$${CHAOS_DURATION:-30m} $(GO) test -tags chaos -count=1 -timeout 3h -v -run TestSoak ./chaos/

.PHONY: chaos-nats

# chaos and chaos-ci already run TestRandomFaultsNATS (their -run pattern
# matches it); this runs the broker variant alone.
chaos-nats: ## random faults against a NATS JetStream sink, verbose (nats-server with JetStream at CHAOS_NATS_ADDR, default 127.0.0.1:4222)
	CHAOS_OUT=$(CHAOS_OUT) $(GO) test -tags chaos -count=1 -parallel 1 -timeout 6m -v -run 'TestCheckerNATS|TestRandomFaultsNATS' ./chaos/
