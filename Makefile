# The README's commands. Each installs what it needs (Debian packages),
# builds, and runs.
#   make demo   every demo mode between a server and a client on this host
#   make test   the whole suite: unit, conformance, ASan+UBSan, fuzzers
#   make build  just build (build/)
#   make install    build/ into $(DESTDIR)$(PREFIX) (default /usr/local):
#                   librdmx, headers, the rdmx CLI, man pages, pkg-config
#                   files and the CMake package
#   make deb    librdmx0, librdmx-dev and rdmx-tools .debs in build/deb/

JOBS ?= $(shell nproc)
PREFIX ?= /usr/local

.PHONY: all build deps demo test clean format install uninstall deb

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

# The prefix is given at install time, so one build installs anywhere; the
# loader's cache is refreshed when installing for real as root.
install: build
	@cmake --install build --prefix "$(PREFIX)"
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" -eq 0 ]; then ldconfig; fi

# What the last make install put there (build/install_manifest.txt names
# the files without DESTDIR: give the same DESTDIR).
uninstall:
	@if [ ! -f build/install_manifest.txt ]; then \
		echo "uninstall: nothing installed from build/"; exit 1; fi
	@sed 's|^|$(DESTDIR)|' build/install_manifest.txt | xargs -d '\n' rm -f
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" -eq 0 ]; then ldconfig; fi

# dpkg-buildpackage writes beside the source: build a copy of the tree
# (committed and not yet committed files) in build/deb/.
deb: deps
	@rm -rf build/deb && mkdir -p build/deb/rdmx
	@git ls-files -z --cached --others --exclude-standard | \
		tar --null -T - -cf - | tar -xf - -C build/deb/rdmx
	@cd build/deb/rdmx && dpkg-buildpackage -us -uc -b -j$(JOBS) >../build.log 2>&1 || \
		{ tail -30 ../build.log; echo "make deb: failed, build/deb/build.log has it all"; exit 1; }
	@ls build/deb/*.deb

format:
	@clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan build-tsan build-fuzz
