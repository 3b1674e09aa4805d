# The README's commands. Each installs what it needs (Debian packages),
# builds, and runs.
#   make demo   every demo mode between a server and a client on this host
#   make test   the whole suite: unit, conformance, ASan+UBSan, fuzzers
#   make build  just build (build/)

JOBS ?= $(shell nproc)

.PHONY: all build deps demo test clean format

all: build

deps:
	@./scripts/install-deps.sh

build: deps
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build build -j $(JOBS) -- --no-print-directory

demo: build
	@./scripts/demo.sh build/apps/rdmx

test: deps
	@./scripts/test.sh

format:
	@clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan build-tsan build-fuzz
