# Entry points. The two a newcomer needs: `make demo` and `make test`.
BUILD ?= build
ASAN_BUILD ?= build-asan

.PHONY: all build build-asan demo test deps install format clean

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

install: build
	cmake --install $(BUILD)

format:
	find src tests/unit tools bench -name '*.[ch]' -print0 | xargs -0 clang-format -i

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
