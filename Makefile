# gpupool -- top-level entry points. CMake does the building; this file only
# names the jobs people run.
#
#   make          build every program (build/)
#   make demo     build and run the pool on a simulated cluster, parts 1-8: the device
#                 plugin on a simulated node, libgpupool-cuda refusing a process past
#                 its share (fake libcuda), the extender placing pods, kubectl gpupool,
#                 gpupool-sim on the openb trace, the DRA driver preparing a 4 Gi share
#                 of a GPU, compute shares (30/70 and a lone 30 %) on a simulated GPU
#   make test     unit tests, the same under ASan+UBSan, integration tests against the
#                 plain and the sanitized programs, a subset under valgrind, and the
#                 arm64 cross build smoke-tested under qemu-user (make cross)
#   make valgrind-test   the integration subset with the plugin under valgrind
#   make e2e      real kubelet + kube-scheduler end-to-end suites (root): the device plugin
#                 and extender on Kubernetes 1.20, then the DRA driver on 1.36 (e2e-dra)
#   make e2e-dra  the DRA driver's suite alone, on a Kubernetes 1.36 cluster (root;
#                 K136_TARBALL: the shared 1.36.2 tarball or an official server tarball,
#                 docs/e2e.md)
#   make image    OCI images of the daemons from Debian packages, no Docker (root; docs/deploy.md)
#   make bench    footprint and latency benchmarks
#   make fuzz     the libFuzzer targets (test/fuzz, clang, build-fuzz/), each run for
#                 FUZZ_SECONDS (default 60) on its corpus; FUZZ_TARGETS picks some,
#                 FUZZ_JOBS runs that many at once (default 1)
#   make cross    every program cross-built for arm64 (build-arm64/), smoke-tested
#                 under qemu-user (scripts/cross.sh); part of `make test`
#   make gpu-bundle   the GPU conformance kit, self-contained (build/gpu-check/, docs/gpu-check.md)
#   make gpu-check    the kit: on the node's GPU, or against the fake driver and NVML without one
#                     (GPU_CHECK_ARGS: runner options, e.g. --only torch --limit 4g)
#   make build ARCH=arm64, make image ARCH=arm64   the same for arm64 (cross)
#   make image-index   one OCI index per image serving amd64 and arm64

HOST_ARCH  := $(shell dpkg --print-architecture 2>/dev/null || echo amd64)
ARCH       ?= $(HOST_ARCH)
ifeq ($(ARCH),$(HOST_ARCH))
BUILD      ?= build
CROSS_CMAKE =
DEPS_FLAGS  =
else ifeq ($(ARCH),arm64)
BUILD      ?= build-arm64
CROSS_CMAKE = -DCMAKE_TOOLCHAIN_FILE=$(CURDIR)/cmake/aarch64-linux-gnu.cmake
DEPS_FLAGS  = --cross
else
$(error ARCH=$(ARCH): only $(HOST_ARCH) (native) and arm64 (cross, from amd64) are supported)
endif
ARM64_BUILD ?= build-arm64
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_JOBS  ?= 1
FUZZ_TARGETS ?=
PYTHON     ?= /usr/bin/python3
JOBS       ?= $(shell nproc)

# The daemon under the sanitizers: leaks on, a distinct exit status (23) that the
# integration fixtures recognise; UBSan fatal with status 24.
SAN_ENV    = ASAN_OPTIONS=detect_leaks=1:exitcode=23 \
             UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=24
VALGRIND  ?= valgrind --error-exitcode=99 --leak-check=full \
             --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
             --track-fds=no -q
# Timeouts, sleeps and latency bounds in the suite are multiplied by this under valgrind.
VALGRIND_SCALE ?= 10
PYTEST     = $(PYTHON) -m pytest -q -p no:cacheprovider
IT         = test/integration
# A representative subset: valgrind makes the daemon 10-20x slower. Every
# program runs under it: the fixtures put GP_PLUGIN_WRAPPER in front of the
# plugin, the extender, gpupool-sim, kubectl-gpupool and the kube test client.
VALGRIND_TESTS ?= \
  $(IT)/test_registration.py \
  $(IT)/test_allocate.py::test_envvar_uuid $(IT)/test_allocate.py::test_several_strategies \
  $(IT)/test_allocate.py::test_cdi_cri $(IT)/test_allocate.py::test_pass_device_specs \
  $(IT)/test_allocate.py::test_unknown_id_is_named $(IT)/test_allocate.py::test_oversized_request \
  $(IT)/test_allocate.py::test_many_containers $(IT)/test_allocate.py::test_empty_container_request \
  $(IT)/test_preferred.py::test_must_include_honoured $(IT)/test_preferred.py::test_nvlink_pairs_preferred \
  $(IT)/test_preferred.py::test_same_numa_preferred \
  $(IT)/test_preferred.py::test_topology_failure_does_not_fail_call \
  $(IT)/test_robustness.py::test_garbage_on_plugin_socket $(IT)/test_robustness.py::test_unknown_method \
  $(IT)/test_robustness.py::test_garbage_protobuf_payload \
  $(IT)/test_robustness.py::test_idle_connections_do_not_block \
  $(IT)/test_robustness.py::test_second_instance_refuses_to_start \
  $(IT)/test_robustness.py::test_sigkill_then_restart \
  $(IT)/test_health.py::test_xid_48_marks_gpu_unhealthy $(IT)/test_health.py::test_recovery_round_trip \
  $(IT)/test_health.py::test_lost_gpu_needs_restart \
  $(IT)/test_lifecycle.py::test_sigterm $(IT)/test_lifecycle.py::test_sigint \
  $(IT)/test_lifecycle.py::test_sighup_restarts $(IT)/test_lifecycle.py::test_kubelet_restart \
  $(IT)/test_lifecycle.py::test_plugin_socket_deleted \
  $(IT)/test_mig.py::test_mixed_allocate_and_preferred \
  $(IT)/test_mig.py::test_mixed_pass_device_specs_mig_caps \
  $(IT)/test_cdi.py::test_spec_written_with_cdi_cri $(IT)/test_cdi.py::test_spec_dir_unwritable_fails_start \
  $(IT)/test_reload.py::test_config_that_does_not_apply_keeps_serving \
  $(IT)/test_reload.py::test_cdi_spec_unwritable_keeps_serving \
  $(IT)/test_reload.py::test_gpu_lost_before_sighup \
  $(IT)/test_gpumem.py::test_units_per_gpu_and_node_publishing \
  $(IT)/test_gpumem.py::test_multi_container_pod_one_allocate_per_container \
  $(IT)/test_gpumem.py::test_plugin_restart_between_bind_and_allocate \
  $(IT)/test_kube_client.py::test_get_object_and_not_found_status \
  $(IT)/test_kube_client.py::test_malformed_json_is_an_error_not_a_crash \
  $(IT)/test_kube_client.py::test_paginated_list_keeps_one_page_in_memory \
  $(IT)/test_kube_client.py::test_watch_events_split_across_chunks \
  $(IT)/test_kube_client.py::test_reflector_relists_on_410 \
  $(IT)/test_kube_client.py::test_protobuf_list_pages_with_continue \
  $(IT)/test_kube_client.py::test_protobuf_list_in_tiny_chunks \
  $(IT)/test_kube_client.py::test_protobuf_list_broken_off_after_items_is_not_retried \
  $(IT)/test_kube_client.py::test_https_bearer_token \
  $(IT)/test_kube_client.py::test_bad_kubeconfig_is_reported \
  $(IT)/test_extender.py::test_filter_both_modes_and_gpushare_paths \
  $(IT)/test_extender.py::test_bind_writes_one_binding_with_the_annotations \
  $(IT)/test_extender.py::test_refused_binding_rolls_back \
  $(IT)/test_extender.py::test_malformed_bodies_get_4xx_json_error \
  $(IT)/test_extender.py::test_bad_flags_are_refused \
  $(IT)/test_sim.py::test_json_lines_contract $(IT)/test_sim.py::test_bad_csv \
  $(IT)/test_sim.py::test_bad_flags $(IT)/test_sim.py::test_missing_inputs_help_and_version \
  $(IT)/test_plugin_metrics.py::test_devices_allocated_counts_pod_resources \
  $(IT)/test_cli.py::test_gpushare_summary_byte_exact $(IT)/test_cli.py::test_gpupool_json \
  $(IT)/test_cli.py::test_watch_cache_lists_in_parallel_and_no_per_node_requests \
  $(IT)/test_cli.py::test_list_broken_off_mid_items_starts_over_once \
  $(IT)/test_cli.py::test_bad_kubeconfig $(IT)/test_cli.py::test_usage_errors \
  $(IT)/test_isolation.py::test_limit_exact_to_the_byte_on_every_way_in \
  $(IT)/test_isolation.py::test_context_teardown_gives_memory_back \
  $(IT)/test_isolation.py::test_null_out_parameters_get_the_drivers_answer \
  $(IT)/test_isolation.py::test_threads $(IT)/test_isolation.py::test_unusable_limit_fails_closed

.PHONY: all deps build asan demo test unit-test asan-test integration-test \
        asan-integration-test valgrind-test e2e e2e-dra image bench clean cross image-index fuzz \
        gpu-bundle gpu-check

all: build

deps:
	@scripts/install-deps.sh $(DEPS_FLAGS)

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CROSS_CMAKE) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) -- --no-print-directory

asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DGP_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS) -- --no-print-directory

demo: build
	@scripts/demo.sh $(BUILD)
	@$(PYTHON) scripts/demo_pool.py $(BUILD)
	@$(PYTHON) scripts/demo_dra.py $(BUILD)

unit-test: build
	cd $(BUILD) && ctest --output-on-failure

asan-test: asan
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure

integration-test: build
	GP_BUILD_DIR=$(abspath $(BUILD)) $(PYTEST) $(IT)

# What measures glibc's own heap cannot run where ASan replaces malloc.
ASAN_DESELECT = --deselect $(IT)/test_extender_limits.py::test_a_burst_of_5000_node_requests_leaves_no_memory_behind

asan-integration-test: asan
	GP_BUILD_DIR=$(abspath $(ASAN_BUILD)) $(SAN_ENV) $(PYTEST) $(IT) $(ASAN_DESELECT)

valgrind-test: build
	@command -v valgrind >/dev/null || { echo "valgrind-test: valgrind not installed (make deps)" >&2; exit 1; }
	GP_BUILD_DIR=$(abspath $(BUILD)) GP_PLUGIN_WRAPPER="$(VALGRIND)" \
	  GP_TIMEOUT_SCALE=$(VALGRIND_SCALE) $(PYTEST) $(VALGRIND_TESTS)

# arm64 from this host: build every program, smoke-test under qemu-user.
cross: build
	@scripts/install-deps.sh --cross
	@GP_NATIVE_BUILD=$(abspath $(BUILD)) scripts/cross.sh $(abspath $(ARM64_BUILD))

test: unit-test asan-test integration-test asan-integration-test valgrind-test cross

# clang + libFuzzer + ASan/UBSan, its own build directory; new inputs land in
# $(FUZZ_BUILD)/corpus, never in the tree (scripts/fuzz.sh).
fuzz: deps
	@FUZZ_JOBS=$(FUZZ_JOBS) scripts/fuzz.sh $(abspath $(FUZZ_BUILD)) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The 1.20 suite (device plugin, extender), then the DRA suite on 1.36: both
# always run (one cluster at a time: they share the well-known ports).
e2e: build
	@rc=0; test/e2e/run.sh $(abspath $(BUILD)) || rc=1; \
	  test/e2e/dra.sh $(abspath $(BUILD)) || rc=1; exit $$rc

e2e-dra: build
	@test/e2e/dra.sh $(abspath $(BUILD))

image: build
	@scripts/install-deps.sh --image $(DEPS_FLAGS)
	@GP_IMAGE_ARCH=$(ARCH) scripts/image.sh $(abspath $(BUILD))

# Both architectures' images, then one OCI index per image (build/images/<image>.multiarch.oci.tar).
image-index:
	@$(MAKE) --no-print-directory image ARCH=$(HOST_ARCH)
	@$(MAKE) --no-print-directory image ARCH=arm64
	@scripts/image-index.sh $(abspath build/images) $(abspath build/images) $(abspath $(ARM64_BUILD)/images)

bench: build
	@bench/run.sh $(abspath $(BUILD))

# The GPU conformance kit: only what it packs is built (the fakes too, for a
# machine without a GPU). Native only: it runs the machine's ldd.
GPU_CHECK_TARGETS = gpupool-device-plugin gpupool-cuda gpupool-cudaprobe gpupool-cudaprobe-linked \
                    gpupool-gpucheck-kubelet gpupool-launchprobe fakecuda fakenvml
GPU_CHECK_ARGS ?=
gpu-bundle: deps
	@test "$(ARCH)" = "$(HOST_ARCH)" || { echo "gpu-bundle: native only (ARCH=$(HOST_ARCH))" >&2; exit 1; }
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target $(GPU_CHECK_TARGETS) -- --no-print-directory
	@scripts/gpu-check-bundle.sh $(abspath $(BUILD))

gpu-check: gpu-bundle
	@scripts/gpu-check.sh $(abspath $(BUILD)) $(GPU_CHECK_ARGS)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(ARM64_BUILD) $(FUZZ_BUILD)
