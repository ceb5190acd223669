# oncegate — run `make help` for the targets.
.DEFAULT_GOAL := help
GO ?= go

.PHONY: help build test race lint fuzz bench soak sim ci

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

build: ## build ./oncegate
	$(GO) build -o oncegate ./cmd/oncegate

test: ## the README's test command: every test that needs nothing installed, long ones aside
	$(GO) test -short -vet=off -ldflags=-w ./...

race: ## every test with the race detector (CI runs make test's command, then this)
	$(GO) test -race ./...

lint: ## gofmt, go vet and staticcheck
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

fuzz: ## run every fuzz target for FUZZTIME executions (default 1000000x; a count, see .ci/run)
	FUZZTIME=$${FUZZTIME:-1000000x}; git grep -l '^func Fuzz' -- '*_test.go' | while read -r f; do \
	  for t in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$f | sed 's/^func //'); do \
	    $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $$FUZZTIME ./$$(dirname $$f) || exit 1; done; done

bench: ## Go benchmarks for the hot paths
	$(GO) test -run '^$$' -bench . -benchmem ./...

soak: ## a long chaos soak: 50,000 logical requests, 20 kills (docs/chaos.md)
	$(GO) run ./bench/chaos -requests $${REQUESTS:-50000} -kills $${KILLS:-20}

sim: ## the fleet simulation at scale, redrawing docs/sim.png and docs/sim-fallback.png (docs/simulation.md)
	$(GO) run ./bench/sim -out docs/sim.png -fallback-out docs/sim-fallback.png

ci: ## what CI runs on a clean clone
	bash .ci/run
