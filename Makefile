# bpfprofiler — see README.md. Run as root (sudo make run, sudo make test).
GO        ?= go
BUILD     := $(CURDIR)/_build
TOOLS     := $(BUILD)/tools
OCB       := $(TOOLS)/builder
MDATAGEN  := $(TOOLS)/mdatagen
GOLANGCI  := $(TOOLS)/golangci-lint
HOST      := $(shell $(GO) env GOHOSTOS GOHOSTARCH)
# Tools run here: built for this machine whatever GOOS/GOARCH say.
GOHOST    := GOOS=$(word 1,$(HOST)) GOARCH=$(word 2,$(HOST)) $(GO)
# GOARCH=arm64 make collector cross-builds otelcol-bpfprofiler-arm64.
COLLECTOR_ARCH := $(filter-out $(word 2,$(HOST)),$(GOARCH))
COLLECTOR := $(BUILD)/otelcol-bpfprofiler$(if $(COLLECTOR_ARCH),-$(COLLECTOR_ARCH))
GATEWAY   := $(BUILD)/gateway/otelcol-gateway
CONFIG    ?= deploy/collector.yaml
GOSRC     := $(shell find bpf internal receiver -name '*.go' -not -name '*_test.go') go.mod go.sum $(wildcard bpf/*.o)

export GOFLAGS ?= -mod=mod

# COLLECTOR_CORE, COLLECTOR_STABLE, COLLECTOR_CONTRIB, MDATAGEN_VERSION.
include collector-release.mk

.PHONY: all build run test faults container-tools soak unit fuzz check-runtimes bench gateway-collector generate generate-bpf generate-metadata check-generated check-release upgrade-collector lint tools collector clean test-tools test-kernels kernel-tools

# apt_install installs those of the Debian packages $(1) that are missing.
apt_install = @need=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || need="$$need $$p"; done; \
	if [ -n "$$need" ]; then echo "installing$$need"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$need >/dev/null; fi

all: build

build:
	$(GO) build ./...

# ocb at the release of collector-release.mk; a builder of another release
# (an older _build) is replaced.
$(OCB): collector-release.mk
	GOBIN=$(TOOLS) $(GOHOST) install go.opentelemetry.io/collector/cmd/builder@$(COLLECTOR_CORE)
	@touch $@

$(GOLANGCI):
	GOBIN=$(TOOLS) GOFLAGS= $(GOHOST) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0

$(MDATAGEN): tools/mdatagen/go.mod
	cd tools/mdatagen && $(GOHOST) build -o $(MDATAGEN) go.opentelemetry.io/collector/cmd/mdatagen

tools: $(OCB) $(MDATAGEN)

# The collector binary, built by ocb from builder-config.yaml.
collector: $(COLLECTOR)
$(BUILD)/otelcol-bpfprofiler: $(OCB) builder-config.yaml $(GOSRC)
	$(OCB) --config builder-config.yaml
	@touch $@

# The collector for another architecture (otelcol-bpfprofiler-arm64): ocb's
# sources, compiled as ocb does (CGO_ENABLED=0, -trimpath, -s -w).
$(BUILD)/otelcol-bpfprofiler-%: $(OCB) builder-config.yaml $(GOSRC)
	$(OCB) --config builder-config.yaml --skip-compilation
	cd $(BUILD) && GOARCH=$* CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -o $@ .
	@touch $@

# Build (if needed) and run the collector on the default configuration.
run: $(COLLECTOR)
	$(COLLECTOR) --config $(CONFIG) --feature-gates=service.profilesSupport

# Every test: unit, BPF integration (root) and end to end with the ocb-built
# collector. BPF tests skip without root unless BPFPROFILER_REQUIRE_BPF=1.
# Packages run one at a time (-p 1): the BPF tests compare measured times
# and shares with the truth, and must not compete for the 2 CPUs.
test: $(COLLECTOR) test-tools
	$(GO) vet ./...
	BPFPROFILER_COLLECTOR=$(COLLECTOR) BPFPROFILER_OCB=$(OCB) $(GO) test -race -count=1 -p 1 -timeout 60m ./...
	cd tools/image && $(GO) test -race -count=1 ./...
	@# The readers again from a position-independent executable: its literals at its load bias.
	$(GO) test -count=1 -buildmode=pie -run TestReadersReadWhatTheThreadPublishes ./internal/readbench
	$(MAKE) fuzz

# The fault scenarios of README.md "Reliability" (test/e2e TestFault*): a
# collector SIGKILLed while starting and running, degraded nodes, the
# backend down and slow, clock steps, a binary of ClickHouse's size, real
# container runtimes (installed by container-tools). FAULTS=full measures
# the README's figures (about 50 minutes); FAULTS=short is CI's version,
# each scenario within about 3 minutes. Not part of make test: they step the wall clock,
# change sysctls and must have the machine to themselves. Each prints its
# figures as "FIGURE <scenario>: ...".
FAULTS ?= full
faults: $(COLLECTOR) test-tools container-tools
	BPFPROFILER_FAULTS=$(FAULTS) BPFPROFILER_COLLECTOR=$(COLLECTOR) BPFPROFILER_REQUIRE_BPF=1 \
		$(GO) test -count=1 -p 1 -v -timeout 3h -run '^TestFault' ./test/e2e

# Every fuzz target of the repository (found by name, so a new one is
# included), each its seed corpus then FUZZTIME of fuzzing; none needs root.
# A failing input is written to the package's testdata/fuzz. A run that
# fails with "context deadline exceeded" and writes no failing input is
# Go 1.26's fuzz coordinator racing its own -fuzztime deadline
# (golang/go#75804, fixed in go1.27), not a finding: it is reported and
# passes. Any other failure fails.
FUZZTIME ?= 10s
fuzz:
	@set -e; out=$$(mktemp); trap 'rm -f $$out' EXIT; \
	for file in $$(grep -rl --include='*_test.go' '^func Fuzz' bench bpf internal receiver test | sort); do \
		for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$file); do \
			echo "== fuzz $$target in ./$$(dirname $$file) for $(FUZZTIME)"; \
			if $(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 1s ./$$(dirname $$file) >$$out 2>&1; \
			then cat $$out; \
			else cat $$out; \
				if grep -q 'context deadline exceeded' $$out && ! grep -q 'Failing input written' $$out; then \
					echo "$$target: the fuzz coordinator's deadline race (golang/go#75804), no failing input written: passes"; \
				else exit 1; fi; \
			fi; \
		done; \
	done

# The runtime tests on the newest release of each runtime the tests pin
# (node's majors from the npm registry, the Go toolchains' minors from the
# module proxy: internal/testutil's NodeReleases and GoLabelBuilds): prints
# each pin beside the newest, then runs the tests those releases change.
# Not part of make test, which stays on the pins; moving a pin is a commit
# that says what was measured. RUNTIMEFLAGS=-always runs them anyway.
check-runtimes: $(COLLECTOR) test-tools
	BPFPROFILER_COLLECTOR=$(COLLECTOR) BPFPROFILER_OCB=$(OCB) $(GO) run ./tools/checkruntimes $(RUNTIMEFLAGS)

unit: test-tools
	$(GO) test -race -count=1 ./...
	cd tools/image && $(GO) test -race -count=1 ./...

# The kernel matrix: boots Debian's kernels under qemu (software emulation)
# and runs the end-to-end checks in each, plus on the machine's own kernel.
# KERNELS chooses (series of Debian kernel packages, arm64/<series> for
# arm64's, or host), CHECKS runs only some checks ("programs load,probe");
# README=1 also rewrites the README's kernel table from the result.
KERNELS ?= 5.10,6.1,6.12,host
COLLECTOR_ARM64 := $(BUILD)/otelcol-bpfprofiler-arm64
test-kernels: $(COLLECTOR) test-tools kernel-tools $(if $(findstring arm64/,$(KERNELS)),$(COLLECTOR_ARM64))
	$(GO) run ./test/kernels -kernels "$(KERNELS)" -collector $(COLLECTOR) -collector-arm64 $(COLLECTOR_ARM64) \
		$(if $(CHECKS),-checks "$(CHECKS)") $(if $(README),-readme README.md)

# What the kernel matrix needs besides Go: qemu and a static busybox; for
# arm64 guests qemu-system-arm and the cross compiler of the C workloads
# (their busybox, glibc and CPython come from Debian's arm64 packages).
kernel-tools:
	$(call apt_install,qemu-system-x86 busybox-static qemu-system-arm gcc-aarch64-linux-gnu)

# What the tests run besides Go, installed with apt when missing: gcc and g++
# build the workloads and symbolizer fixtures, binutils' objcopy splits their
# debug files, libc6-dbg is libc's debug file (start_thread is only there),
# util-linux has chrt, unshare and setpriv, python3.11 is Debian's CPython
# (the Python unwinder's tests also run pyenv's 3.7-3.13 where the machine
# has them, Debian sid's 3.14 and 3.15, which patchelf points at sid's
# glibc, 3.13 and 3.14 built once from source, free-threaded, and 3.14 with a struct
# field moved, with make and zlib1g-dev's headers), gdb reads CPython's struct layouts for internal/runtimes/cpython's
# oracle and stops PHP's JIT code for internal/runtimes/php (gdb-multiarch
# under qemu-user for arm64's), openjdk-17-jdk-headless runs the Java tests (javac compiles the
# Java workloads for the kernel matrix's guests), gcc-aarch64-linux-gnu and
# qemu-user-static build and run the arm64 builds of the thread context and
# Go labels fixtures, apache2 and libapache2-mod-php8.2 are the Apache with
# mod_php (prefork) the PHP walker's e2e check profiles (on a private
# configuration; the packages' service is not needed), systemtap-sdt-dev's
# <sys/sdt.h> builds the USDT workloads (testdata/workloads/usdt),
# postgresql-15 is the PostgreSQL server whose own USDT probes the e2e check
# times and postgresql-client-15 its psql (a private server in a temporary
# directory; the package's service is not needed). No test needs bpftool,
# bpftrace or clang.
test-tools:
	$(call apt_install,gcc g++ binutils libc6-dbg util-linux linux-perf python3.11 gdb openjdk-17-jdk-headless \
		gcc-aarch64-linux-gnu qemu-user-static patchelf make zlib1g-dev gdb-multiarch apache2 libapache2-mod-php8.2 \
		systemtap-sdt-dev postgresql-15 postgresql-client-15)
	@# The Rust fixture of the unwinder's tests: rustup's rustc, else Debian's.
	@command -v rustc >/dev/null || test -x $$HOME/.cargo/bin/rustc || dpkg -s rustc >/dev/null 2>&1 || \
		{ echo "installing rustc"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rustc >/dev/null; }

# The container runtimes of the fault scenario TestFaultContainerRuntimes:
# Debian's containerd and runc, docker.io (dockerd; its client is
# /usr/bin/docker) and podman. The test runs daemons of its own, with their
# own state, whether or not the packages' services run.
container-tools:
	$(call apt_install,containerd runc docker.io podman)

# The plain gateway collector of the bench's gateway suite (otlp receiver,
# otlp_grpc exporter, core components only), built by ocb.
gateway-collector: $(GATEWAY)
$(GATEWAY): $(OCB) bench/gateway-builder.yaml
	$(OCB) --config bench/gateway-builder.yaml
	@touch $@

bench: $(COLLECTOR) $(GATEWAY)
	BPFPROFILER_COLLECTOR=$(COLLECTOR) BPFPROFILER_GATEWAY=$(GATEWAY) $(GO) run ./bench $(BENCHFLAGS)

# The soak of README.md "Reliability" (issue 46): the collector as the
# DaemonSet runs it, in a memory cgroup of its limit, for SOAK_DURATION on a
# host churning binaries and runtimes (bench/soak.go). It writes soak.csv and
# soak.png to _build/soak, copies the PNG to SOAK_PNG when set (e.g.
# SOAK_PNG=docs/soak.png), and fails on an OOM kill, a bound passed or, from
# 30 minutes on, memory growing. CI runs SOAK_DURATION=3m. Not part of make
# test: it loads both CPUs and wants the machine to itself. gcc builds its
# binaries; the runtimes it does not find are skipped with a note.
SOAK_DURATION ?= 1h
SOAK_OUT      := $(BUILD)/soak
soak: $(COLLECTOR)
	$(call apt_install,gcc xz-utils)
	BPFPROFILER_COLLECTOR=$(COLLECTOR) $(GO) run ./bench -suite soak -soak-duration $(SOAK_DURATION) -soak-out $(SOAK_OUT) $(SOAKFLAGS)
	$(if $(SOAK_PNG),cp $(SOAK_OUT)/soak.png $(SOAK_PNG))

# The DaemonSet's image as an OCI image layout in _build/image (crane push
# _build/image REF): an index of one image per platform of IMAGE_ARCHS, each
# that platform's collector and deploy/collector.yaml on an empty base
# (tools/image, its own module). Its version is the DaemonSet's image tag (the
# release of collector-release.mk: check-release); PUSH=REF also pushes it
# with docker login's credentials.
IMAGE_ARCHS     := amd64 arm64
IMAGE_VERSION    = $(lastword $(subst :, ,$(shell sed -n 's/^ *image: *//p' deploy/kubernetes/daemonset.yaml)))
IMAGE_HOSTARCH  := $(shell $(GO) env GOHOSTARCH)
image_collector  = $(BUILD)/otelcol-bpfprofiler$(if $(filter-out $(IMAGE_HOSTARCH),$(1)),-$(1))
.PHONY: image
image: $(foreach a,$(IMAGE_ARCHS),$(call image_collector,$(a)))
	cd tools/image && $(GOHOST) run . -out $(BUILD)/image -config $(CURDIR)/deploy/collector.yaml \
		-version $(IMAGE_VERSION) $(if $(PUSH),-push $(PUSH)) \
		$(foreach a,$(IMAGE_ARCHS),linux/$(a)=$(call image_collector,$(a)))

generate: generate-bpf generate-metadata

generate-bpf:
	$(GO) generate ./bpf/...

generate-metadata: $(MDATAGEN)
	cd receiver/bpfprofilerreceiver && $(MDATAGEN) metadata.yaml

# CI: every collector module (go.mod and the modules it pulls in, ocb's
# manifest, mdatagen's module, the e2e user manifest, the DaemonSet's image
# tag) at the release of collector-release.mk.
check-release:
	$(GO) run ./tools/collectorrelease -check

# After editing collector-release.mk: move go.mod, the manifests, the
# DaemonSet's image tag and tools/mdatagen to it (go get, go mod tidy), then
# check.
upgrade-collector:
	$(GO) run ./tools/collectorrelease -upgrade
	$(GO) run ./tools/collectorrelease -check

# CI: regenerating must not change anything committed.
check-generated: generate
	git diff --exit-code -- bpf receiver
	@test -z "$$(git status --porcelain -- bpf receiver)" || { git status --porcelain -- bpf receiver; echo 'generated files are not committed'; exit 1; }

# gofmt, go vet and golangci-lint (.golangci.yml: errcheck, staticcheck,
# unused, goimports, ...; generated files excluded); clang-format for the
# BPF C (bpf/.clang-format).
lint: $(GOLANGCI)
	$(call apt_install,clang-format)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GOLANGCI) run ./...
	cd tools/image && $(GOLANGCI) run ./...
	clang-format --dry-run --Werror --style=file:bpf/.clang-format bpf/*.c bpf/*.h

clean:
	rm -rf $(BUILD)
