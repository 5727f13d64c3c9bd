# Short commands. The real build is CMake (build/); see README.md.
BUILD      ?= build
JOBS       ?= $(shell nproc)
# ctest labels left out (-LE): the deb package test is make check-deb's
CTEST_EXCLUDE ?= ^deb$$
CMAKE_ARGS ?=

.PHONY: all bootstrap configure build check demo asan fuzz format format-check clean \
	install uninstall deb check-deb

# make install: PREFIX (or prefix; default /usr/local), DESTDIR, and the GNU
# directory variables (bindir, libdir, datadir, mandir, docdir, sysconfdir,
# ...), each given to CMake's GNUInstallDirs as CMAKE_INSTALL_<NAME>
# (docs/install.md). They are configure-time settings of $(BUILD), as a
# GNU ./configure --prefix is.
prefix     ?= /usr/local
PREFIX     ?= $(prefix)
DESTDIR    ?=
GNU_DIRS   := bindir sbindir libexecdir sysconfdir localstatedir runstatedir libdir \
              includedir datarootdir datadir mandir docdir
INSTALL_ARGS = -DCMAKE_INSTALL_PREFIX=$(PREFIX) \
	$(foreach d,$(GNU_DIRS),$(if $($(d)),-DCMAKE_INSTALL_$(shell echo $(d) | tr a-z A-Z)=$($(d))))

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
	cd $(BUILD) && { ctest --output-on-failure -j $(JOBS) -LE '$(CTEST_EXCLUDE)' --output-junit junit.xml; t=$$?; \
	  $(CURDIR)/scripts/test-summary junit.xml $(if $(STRICT_SKIPS),--strict); s=$$?; \
	  [ $$t = 0 ] && [ $$s = 0 ]; }

demo: bootstrap
	$(MAKE) build
	scripts/demo $(BUILD)

# Test suite under AddressSanitizer + UndefinedBehaviorSanitizer.
# make asan: the suite under ASan + UBSan, less the client-compat tests
# (real gcloud and Vertex SDK runs: minutes of Python, the same kilnd
# handlers the curl-driven tests run under ASan)
asan: bootstrap
	$(MAKE) check BUILD=build-asan CMAKE_ARGS="-DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON" \
	  CTEST_EXCLUDE='^(deb|client-compat)$$$$'

# Short libFuzzer run of every fuzz target (FUZZ_SECONDS each).
FUZZ_SECONDS ?= 60
fuzz: bootstrap
	scripts/run-fuzzers build-fuzz $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

# Fails if any C file differs from .clang-format's style.
format-check:
	clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h' '*.cu')

install: configure
	cmake -S . -B $(BUILD) $(INSTALL_ARGS)
	cmake --build $(BUILD) -j $(JOBS)
	DESTDIR=$(DESTDIR) cmake --install $(BUILD)

# removes what the last `make install` from $(BUILD) wrote (its manifest),
# under the same DESTDIR
uninstall:
	DESTDIR=$(DESTDIR) cmake --build $(BUILD) --target uninstall

# make deb: the Debian packages kiln and kiln-train (packaging/debian,
# debhelper) of the commit at HEAD (git archive: uncommitted changes are
# not in them), built under $(BUILD)/deb, then lintian. docs/install.md.
deb:
	rm -rf $(BUILD)/deb && mkdir -p $(BUILD)/deb/kiln
	git archive HEAD | tar -x -C $(BUILD)/deb/kiln
	cp -r packaging/debian $(BUILD)/deb/kiln/debian
	cd $(BUILD)/deb/kiln && DEB_BUILD_OPTIONS="parallel=$(JOBS)" dpkg-buildpackage -us -uc -b
	lintian --fail-on error,warning --info $(BUILD)/deb/*.changes

# make check-deb: `make deb`, then the packages' own test (deb_package:
# their contents, lintian, and apt install in a fresh Debian 12 chroot that
# the test makes with debootstrap the first time, a job run there, remove
# and purge). Minutes, so `make check` leaves it out; .ci/run runs it.
check-deb: bootstrap
	$(MAKE) build
	$(MAKE) deb
	cd $(BUILD) && ctest --output-on-failure -L '^deb$$'

clean:
	rm -rf build build-asan build-fuzz
