# outboxd developer tasks. `make help` lists them.
GO ?= go

.PHONY: help test test-short build bench lint fmt

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

test: ## vet, then the whole suite with the race detector (needs PostgreSQL; see README)
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 15m ./...

test-short: ## the whole suite without the race detector
	$(GO) test -count=1 -timeout 10m ./...

build: ## build bin/outboxd
	$(GO) build -o bin/outboxd ./cmd/outboxd

bench: build ## drain 200k messages through the null sink, outboxd vs the article's per-row design
	./bin/outboxd bench --variant both

fmt: ## gofmt the tree
	gofmt -w $$(git ls-files '*.go')

lint: ## gofmt check and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
