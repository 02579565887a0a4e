# sluice: `make test` is the whole check, on a fresh Debian machine or in CI.
GO ?= go
STATICCHECK_VERSION ?= v0.8.2

.PHONY: test deps vet unit scenario bench-test bench bench-overload lint

test: deps vet unit scenario bench-test

# deps installs what the tests need: redis-server (tests start their own
# private servers on loopback; nothing is left running).
deps:
	@if command -v redis-server >/dev/null 2>&1; then \
		echo "redis-server: $$(redis-server --version | cut -d' ' -f3)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing redis-server with apt-get"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null && \
		redis-server --version; \
	else \
		echo "redis-server is missing: install it (Debian/Ubuntu: sudo apt-get install redis-server;"; \
		echo "macOS: brew install redis), or run 'make test' as root on Debian to have it installed."; \
		exit 1; \
	fi

vet:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...

unit:
	SLUICE_REQUIRE_REDIS=1 $(GO) test -race -shuffle=on -timeout 15m ./...

# scenario plays the avalanche demo, shortened, and checks what sluice
# promises. It measures latencies, so it runs without the race detector.
scenario:
	$(GO) test -count=1 -run TestAvalanche -v ./examples/avalanche

bench-test:
	cd bench && SLUICE_REQUIRE_REDIS=1 $(GO) test -race -shuffle=on -timeout 10m ./...

# bench runs the side-by-side benchmarks against the peer libraries.
bench: deps
	cd bench && $(GO) test -run '^$$' -bench . -benchmem -cpu 1,2

# bench-overload plays surges and a slow dependency against sluice and the
# peers, each in a server process of its own (about 15 minutes on 2 cores);
# it prints a markdown table and writes bench/overload.png. Pass flags with
# OVERLOAD_FLAGS, e.g. OVERLOAD_FLAGS='-scenarios cpu -runs 1'. A shortened
# run of it is a test of bench-test.
bench-overload:
	cd bench && $(GO) run ./cmd/overload $(OVERLOAD_FLAGS)

lint:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd bench && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
