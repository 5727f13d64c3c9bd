# Short commands. The real build is CMake (build/); see README.md.
BUILD      ?= build
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all bootstrap configure build check demo asan fuzz format format-check clean

all: build

bootstrap:
	@scripts/bootstrap

# build/Makefile, not CMakeCache.txt: a configure that failed (a package
# missing) leaves the cache behind, and the next make must configure again.
$(BUILD)/Makefile:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS)

configure: $(BUILD)/Makefile

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The last line names every skipped test and why (scripts/test-summary);
# STRICT_SKIPS=1 (.ci/run) also fails on a skip that must not happen on this
# machine: software bootstrap installs, or a privileged test where this is root
# on a real root file system.
check: bootstrap
	$(MAKE) build
	cd $(BUILD) && { ctest --output-on-failure -j $(JOBS) --output-junit junit.xml; t=$$?; \
	  $(CURDIR)/scripts/test-summary junit.xml $(if $(STRICT_SKIPS),--strict); s=$$?; \
	  [ $$t = 0 ] && [ $$s = 0 ]; }

demo: bootstrap
	$(MAKE) build
	scripts/demo $(BUILD)

# Test suite under AddressSanitizer + UndefinedBehaviorSanitizer.
asan: bootstrap
	$(MAKE) check BUILD=build-asan CMAKE_ARGS="-DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON"

# Short libFuzzer run of every fuzz target (FUZZ_SECONDS each).
FUZZ_SECONDS ?= 60
fuzz: bootstrap
	scripts/run-fuzzers build-fuzz $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

# Fails if any C file differs from .clang-format's style.
format-check:
	clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h' '*.cu')

clean:
	rm -rf build build-asan build-fuzz
