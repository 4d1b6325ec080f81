# gpupool -- top-level entry points. CMake does the building; this file only
# names the jobs people run.
#
#   make          build every program (build/)
#   make demo     build and run the device plugin on a simulated node
#   make test     unit tests, the same under ASan+UBSan, integration tests
#   make e2e      real kubelet + kube-scheduler end-to-end suite (root)
#   make bench    footprint and latency benchmarks

BUILD      ?= build
ASAN_BUILD ?= build-asan
PYTHON     ?= /usr/bin/python3
JOBS       ?= $(shell nproc)

.PHONY: all deps build asan demo test unit-test asan-test integration-test e2e bench clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) -- --no-print-directory

asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DGP_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS) -- --no-print-directory

demo: build
	@scripts/demo.sh $(BUILD)

unit-test: build
	cd $(BUILD) && ctest --output-on-failure

asan-test: asan
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure

integration-test: build
	GP_BUILD_DIR=$(abspath $(BUILD)) $(PYTHON) -m pytest -q -p no:cacheprovider test/integration

test: unit-test asan-test integration-test

e2e: build
	@test/e2e/run.sh $(abspath $(BUILD))

bench: build
	@bench/run.sh $(abspath $(BUILD))

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
