# sluice: make demo, make test (as root on Debian/Ubuntu; both install what they need).
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
export CGO_ENABLED := 1
GO ?= go
# --version and GET /v1/status name the commit built (api.Revision).
REVISION ?= $(shell git describe --always --dirty=+dirty --abbrev=12 --exclude='*' 2>/dev/null)
BUILD_FLAGS := -tags seccomp -trimpath -ldflags "-X github.com/sluicehq/sluice/api.revision=$(REVISION)"

.PHONY: all help deps build install test fuzz demo bench bench-read soak vet clean vagrant-e2e

all: build

help:
	@echo "make demo   - build, start sluiced on the example, run a scripted agent session, verify the audit"
	@echo "make test   - the whole suite as root: vet, unit, e2e over the real socket, race, fuzz"
	@echo "make build  - bin/sluiced, bin/sluice, bin/sluice-init (every container's init) and bin/sluice-helper"
	@echo "make fuzz   - every fuzz target for FUZZTIME (default 10m) each; saves new corpus entries to testdata/fuzz to commit"
	@echo "make vagrant-e2e - a Debian 12 VM (libvirt): install.sh, the socket-activated service, the e2e suite against it; destroyed after"
	@echo "make bench  - benchmarks against the transport, durability and spawn floors (prints ratios)"
	@echo "make soak   - as root: 10,000 mixed calls, kill -9 in flight, idle and slow connections, a full audit disk (SOAK_CALLS=...)"
	@echo "make deps   - apt packages (only if missing) and Go modules"
	@echo "make install - as root: build, scripts/install.sh (binaries, group sluice, units), then enable sluiced.socket"

deps:
	@scripts/deps.sh

# The service, as docs/operating.md "Install as a service" sets it up:
# install.sh (idempotent: an upgrade too), then the socket, where systemd runs.
install: build
	scripts/install.sh
	@if [ -d /run/systemd/system ]; then systemctl enable --now sluiced.socket && echo "install: sluiced.socket enabled: sluiced starts on the first connection"; \
	else echo "install: no systemd here: start sluiced yourself (docs/operating.md)"; fi

build: deps bin/sluice-helper
	$(GO) build $(BUILD_FLAGS) -o bin/ ./cmd/sluiced ./cmd/sluice ./cmd/sluice-init

# The static helper that waits inside pooled containers for the argv.
bin/sluice-helper: sandbox/helper/helper.c
	@mkdir -p bin
	gcc -static -O2 -s -o $@ $<

vet:
	gofmt -l . && $(GO) vet -tags seccomp ./...

test: build
	@scripts/test.sh

# FUZZTIME=30s for a short run. New inputs land in <pkg>/testdata/fuzz/:
# commit them (docs/testing.md "Fuzzing").
FUZZTIME ?= 10m
fuzz:
	@FUZZTIME=$(FUZZTIME) scripts/fuzz.sh --save

demo: build
	@scripts/demo.sh

# Builds its own box offline (cached), runs libvirt in a network namespace
# of its own, and always destroys the VM: docs/testing.md "Running the VM e2e".
vagrant-e2e:
	@scripts/vagrant-e2e.sh

bench: build bench-read

bench-read:
	@bench/read.sh

# Not in make test (minutes): docs/testing.md "make soak".
soak: build
	@bench/soak.sh

clean:
	rm -rf bin
