# Entry points. The two a newcomer needs: `make demo` and `make test`.
BUILD ?= build
ASAN_BUILD ?= build-asan
PACKAGE_BUILD ?= build-package

.PHONY: all build build-asan demo test fuzz deps install package format clean

all: build

deps:
	scripts/install-deps.sh all

build:
	scripts/install-deps.sh build
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(BUILD)

build-asan:
	scripts/install-deps.sh build
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DVSOCKET_SANITIZE=ON
	cmake --build $(ASAN_BUILD)

# Installs what is needed, runs real programs with and without vsocket and
# prints the comparison.
demo:
	scripts/demo.sh

# Installs what is needed and runs the whole test suite (see scripts/test.sh).
test:
	scripts/test.sh

# The open-ended fuzz search, FUZZ_TIME seconds per target (or runs=N), at
# the lowest priority; `make test` runs only the deterministic gate
# (tests/fuzz/search.sh, docs/design/fuzzing.md).
FUZZ_TIME ?= 300
fuzz:
	scripts/install-deps.sh fuzz
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVSOCKET_FUZZ=ON
	cmake --build $(BUILD)
	nice -n 19 tests/fuzz/search.sh $(BUILD) $(FUZZ_TIME)

install: build
	cmake --install $(BUILD)

# The Debian package, built in its own directory configured for /usr (the
# library in /usr/lib/<multiarch>): $(PACKAGE_BUILD)/vsocket_VERSION_ARCH.deb.
# Install it with `apt install ./$(PACKAGE_BUILD)/vsocket_*.deb` (README.md).
package:
	scripts/install-deps.sh package
	cmake -S . -B $(PACKAGE_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	      -DCMAKE_INSTALL_PREFIX=/usr -DBUILD_TESTING=OFF
	cmake --build $(PACKAGE_BUILD)
	cd $(PACKAGE_BUILD) && cpack -G DEB

format:
	find src tests/unit tools bench -name '*.[ch]' -print0 | xargs -0 clang-format -i

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(PACKAGE_BUILD)
