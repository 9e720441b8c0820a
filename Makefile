# A thin wrapper over CMake. `make` builds, `make test` builds and runs every test, `make demo` runs
# the demo, `make deps` installs missing Debian packages, `make asan` runs the tests under
# ASan+UBSan, `make tsan` the threaded ones under TSan. See README.md.
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
JOBS ?= $(shell nproc)
GENERATOR := $(if $(shell command -v ninja 2>/dev/null),-G Ninja,)
CTEST_FLAGS ?= --output-on-failure -j $(JOBS)

.PHONY: all build deps test asan tsan demo clean

all: build

deps:
	@scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=Release

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The demo: train a small CNN on Fashion-MNIST and print its test accuracy (a few minutes on 2 cores).
demo: deps
	@$(MAKE) --no-print-directory build
	$(BUILD)/tools/kiln devices
	$(BUILD)/tools/kiln train mnist

test: deps
	@$(MAKE) --no-print-directory build
	cd $(BUILD) && ctest $(CTEST_FLAGS)

# The same tests, built with AddressSanitizer + UndefinedBehaviorSanitizer in their own directory.
# intercept_tls_get_addr=0: LeakSanitizer otherwise records the dynamic TLS that PoCL (LLVM, loaded with
# dlopen) creates and, after a failed OpenCL compile, reads a bogus DTLS range at exit and crashes its own
# tracer ("Tracer caught signal 11"), failing a test whose assertions all passed. Static TLS and every
# thread stack are still scanned.
asan: deps
	@test -f $(ASAN_BUILD)/CMakeCache.txt || cmake -S . -B $(ASAN_BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=ON
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp UBSAN_OPTIONS=print_stacktrace=1 ctest $(CTEST_FLAGS)

# The thread pool, interning, realize and search tests under ThreadSanitizer, in their own directory
# (any report fails the run). Only the test binary is built.
tsan: deps
	@test -f $(TSAN_BUILD)/CMakeCache.txt || cmake -S . -B $(TSAN_BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_TSAN=ON
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target kiln_tests
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" $(TSAN_BUILD)/tests/kiln_tests "[thread_pool],[uop],[realize],[search]"

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
