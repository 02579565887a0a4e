# sluice: `make test` is the whole check, on a fresh Debian machine or in CI.
GO ?= go
STATICCHECK_VERSION ?= v0.8.2

.PHONY: test deps need vet unit scenario bench-test bench bench-overload lint screenshot

test: deps vet unit scenario bench-test

# deps installs what the tests need: redis-server (tests start their own
# private servers on loopback; nothing is left running) and chromium (the
# dashboard's browser test drives it headless).
deps:
	@$(MAKE) --no-print-directory need PKG=redis-server BIN=redis-server \
		MAC='brew install redis'
	@$(MAKE) --no-print-directory need PKG=chromium BIN=chromium \
		MAC='brew install --cask chromium'

# need installs the Debian package PKG when the command BIN is missing and
# the user is root, and otherwise says what to install.
need:
	@if command -v $(BIN) >/dev/null 2>&1; then \
		echo "$(BIN): $$(command -v $(BIN))"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing $(PKG) with apt-get"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(PKG) >/dev/null && \
		command -v $(BIN); \
	else \
		echo "$(BIN) is missing: install it (Debian/Ubuntu: sudo apt-get install $(PKG);"; \
		echo "macOS: $(MAC)), or run 'make test' as root on Debian to have it installed."; \
		exit 1; \
	fi

# screenshot retakes docs/dashboard.png, the README's picture of the
# dashboard, with the browser test.
screenshot: deps
	SLUICE_DASHBOARD_SCREENSHOT=1 $(GO) test -count=1 -run TestDashboardInABrowser ./observe/dashboard

vet:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...

unit:
	SLUICE_REQUIRE_REDIS=1 SLUICE_REQUIRE_BROWSER=1 $(GO) test -race -shuffle=on -timeout 15m ./...

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
