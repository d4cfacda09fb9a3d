# kvgate — the two commands a newcomer needs are `make demo` and `make test`.
GO        ?= go
BIN       ?= bin
PKGS      := ./...
GOFLAGS_RACE := -race

.PHONY: all build demo test test-deps bench-deps test-go bench bench-overhead lint fmt docs fuzz clean

all: build

build: ## build every command into ./bin
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/ ./cmd/...

demo: ## run the gateway on its embedded simulated fleet (127.0.0.1:8080)
	$(GO) run ./cmd/gateway --demo

test: test-deps test-go ## install what the tests need, then run every test with -race

# apt-install installs the Debian packages named in $(1) that are missing.
define apt-install
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
endef

# Debian packages the tests need: chromium drives the status page's browser
# test (cmd/gateway/browser_test.go; KVGATE_SKIP_BROWSER=1 skips it).
TEST_PACKAGES := chromium
# nginx is the one-proxy-hop reference of the overhead benchmark.
BENCH_PACKAGES := nginx

test-deps:
	$(if $(strip $(TEST_PACKAGES)),$(call apt-install,$(TEST_PACKAGES)),@true)

bench-deps:
	$(call apt-install,$(BENCH_PACKAGES))

test-go:
	$(GO) vet $(PKGS)
	$(GO) test $(GOFLAGS_RACE) -count=1 -timeout 15m $(PKGS)

bench: ## micro-benchmarks of the hot paths, with allocations
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./handlers/ ./routing/ ./sim/...

bench-overhead: build bench-deps ## gateway overhead vs direct vs nginx, one run (see README)
	./scripts/bench-overhead.sh

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

docs: ## regenerate the README's configuration reference from the code
	$(GO) run ./scripts/readme-reference

FUZZTIME ?= 30s

fuzz: ## run every fuzz target (every func Fuzz* in a _test.go) for FUZZTIME (the committed corpus runs in `make test`)
	@set -e; for f in $$(git ls-files '*_test.go' | xargs grep -l '^func Fuzz'); do \
		for fn in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "fuzz $$fn ($$(dirname $$f))"; $(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) ./$$(dirname $$f)/; \
		done; done

clean:
	rm -rf $(BIN)
