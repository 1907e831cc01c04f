# xdpfab: see README.md. Every target works on a fresh Debian/Ubuntu machine
# with Go installed, as root; generated BPF objects are committed, so clang is
# only needed for `make generate`.
GO ?= go
PKGS := ./...
# Packages with goroutines that the race detector should watch.
RACE_PKGS := ./av/... ./cq/... ./dataplane/... ./ep/... ./neigh/... ./agent/...

.PHONY: all build test race vet generate demo check-generate clean

all: build

# Compile every package, and write the xdpfab command to bin/xdpfab, stamped
# with its VCS commit (xdpfab version shows it) whatever GOFLAGS says.
build:
	$(GO) build $(PKGS)
	$(GO) build -buildvcs=auto -o bin/xdpfab ./cmd/xdpfab

# go vet, and gofmt over every Go file (bench/ included).
vet:
	$(GO) vet $(PKGS)
	@out=$$("$$($(GO) env GOROOT)/bin/gofmt" -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	bash scripts/check-doc-links.sh
	$(MAKE) --no-print-directory cross

# The packages an application imports build off Linux, where what needs
# Linux fails with fi.EOPNOTSUPP (see package client): vet them, tests
# included, for macOS on both of its architectures.
CROSS_PKGS := ./client/... ./ctl/... ./ep/... ./av/... ./cq/... ./fi/... ./wire/... ./stack/... \
	./dataplane/... ./neigh/... ./loader/... ./bpf/...
.PHONY: cross
cross:
	for arch in amd64 arm64; do GOOS=darwin GOARCH=$$arch $(GO) vet $(CROSS_PKGS) || exit 1; done

# The whole suite: unit and kernel tests (root needed for the latter), then
# the race detector over the concurrent packages.
test: build vet
	$(GO) test -count=1 -timeout 8m $(PKGS)
	$(GO) test -count=1 -race -timeout 8m $(RACE_PKGS)

# The adversarial suite run long: Go native fuzzing of the control
# protocol's decoder, of the agent's dispatch and of the XDP program's
# reference model (their seed corpora run in make test). FUZZTIME per
# target (default 2m).
FUZZTIME ?= 2m
.PHONY: fuzz
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRequest$$' -fuzztime $(FUZZTIME) ./ctl
	$(GO) test -run '^$$' -fuzz '^FuzzDispatch$$' -fuzztime $(FUZZTIME) ./agent
	$(GO) test -run '^$$' -fuzz '^FuzzModel$$' -fuzztime $(FUZZTIME) ./internal/xdpmodel

# The XDP program against its Go model (internal/xdpmodel) over DIFF_N
# generated frames (default 1M, some 10 s on the project's VM; make test
# runs 4000), from DIFF_SEED (default: a fresh one, printed; set it to
# reproduce a failure). As root.
DIFF_N ?= 1000000
DIFF_SEED ?= $(shell date +%s)
.PHONY: difftest
difftest:
	XDPFAB_DIFF_N=$(DIFF_N) XDPFAB_DIFF_SEED=$(DIFF_SEED) $(GO) test -count=1 -v -timeout 10m -run '^TestDifferential$$' ./internal/xdpmodel

# Run every go:generate line of the module: the BPF objects and their Go
# bindings (bpf2go; needs clang-14, llvm, libbpf-dev) and the enums' String
# methods (stringer, in bpf, cq, av, fi, loader, dataplane). .ci/run checks
# that the output reproduces the committed files byte for byte.
generate:
	$(GO) generate ./...

demo: build
	$(GO) run ./cmd/xdpfab demo

clean:
	$(GO) clean -testcache
	rm -rf bin

# The benchmark suite (bench/, a module of its own): namespaces, XDP and
# the libfabric peers, as root. bench regenerates docs/BENCHMARKS.md and
# docs/bench/ (under 15 minutes); bench-quick is the smoke run (under 2
# minutes) and writes bench/out/quick/ only.
.PHONY: bench bench-quick
bench:
	bash bench/run.sh

bench-quick:
	bash bench/run.sh -quick
