"""libgpupool-cuda against the adversarial review's probes
(/work/shared/research/isolation-review.md, docs/isolation.md): each test
drives the library through the driver ABI, over the fake libcuda.so.1 with
FAKECUDA_PHYS on, so the fake also tracks what every live process
*physically* holds on each GPU -- and every test asserts that this never
passed the limit, not only what the library reported. Each one fails on the
library as it was before the review's defects were fixed (named per test).
"""

import os
import subprocess

import pytest

from conftest import BUILD as BUILD_DIR, TIMEOUT_SCALE
from test_isolation import (FAKECUDA, LIB, PRELOAD, PROBE, UUID0, UUID1, GiB, MiB, Probe,
                            _run_via)

PHYS_TOOL = os.path.join(FAKECUDA, "gpupool-fakecuda-phys")
RACE = os.path.join(BUILD_DIR, "test", "cuda", "gpupool-dlsym-race")
CTOR_LIB = os.path.join(BUILD_DIR, "test", "cuda", "libgpupool-ctor-dlsym.so")

pytestmark = pytest.mark.skipif(
    not os.path.exists(LIB) or not os.path.exists(PROBE) or not os.path.exists(PHYS_TOOL),
    reason="libgpupool-cuda, the probe or the fake's physical-use tool is not built")


class PhysProbe(Probe):
    """The probe with the fake's physical-use file on."""

    def __init__(self, tmp):
        super().__init__(tmp)
        self.phys_file = os.path.join(self.tmp, "phys")

    def env(self, **kw):
        env = super().env(**kw)
        env.setdefault("FAKECUDA_PHYS", self.phys_file)
        return env

    def phys(self):
        """{device UUID: (current, peak)} over live processes."""
        if not os.path.exists(self.phys_file):
            return {}
        out = subprocess.run([PHYS_TOOL, self.phys_file], capture_output=True, text=True,
                             check=True).stdout
        res = {}
        for line in out.splitlines():
            f = dict(t.split("=", 1) for t in line.split())
            res[f["uuid"]] = (int(f["current"]), int(f["peak"]))
        return res

    def peak(self, uuid=UUID0):
        return self.phys().get(uuid, (0, 0))[1]


@pytest.fixture
def probe(tmp_path):
    return PhysProbe(tmp_path)


# ---- D6, D15: the lookups ------------------------------------------------------

@pytest.mark.parametrize("limit", ["4g", None])
def test_d6_no_deadlock_between_dlsym_and_the_loader_lock(probe, limit):
    """A library constructor (loader lock held) calling dlsym while another
    thread makes the first CUDA lookup. Before: hung (exit 124), with a
    limit and without one (pure pass-through)."""
    p = subprocess.run([RACE, CTOR_LIB], env=probe.env(limit=limit), capture_output=True,
                       text=True, timeout=30 * TIMEOUT_SCALE)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert p.stdout.startswith("ok "), p.stdout


@pytest.mark.parametrize("limit", ["4g", None])
def test_d15_dlsym_default_unchanged_without_libcuda(probe, limit):
    """'Is CUDA present?' in a process that never loaded libcuda answers NULL,
    as without the library, and loads nothing. Before: the wrapper was found
    (and libcuda loaded as a side effect)."""
    r = probe.run("--no-load dlsym-default cuInit dlsym-default cuMemAlloc_v2 "
                  "dlsym-default nvmlDeviceGetMemoryInfo", limit=limit)
    ref = probe.run("--no-load dlsym-default cuInit dlsym-default cuMemAlloc_v2 "
                    "dlsym-default nvmlDeviceGetMemoryInfo", limit=limit, preload=False)
    assert [l[2] for l in r.lines] == ["null", "null", "null"] == [l[2] for l in ref.lines]
    # Once the application has loaded the driver, the wrapper is what it finds.
    r = probe.run("init dlsym-default cuMemAlloc_v2", limit=limit)
    assert r.line("dlsym-default")[2] == "found"


# ---- D12: cuGetProcAddress with pointers that are not the exports --------------

def test_d12_best_abi_match_when_the_driver_hands_out_other_pointers(probe):
    """With the driver's cuGetProcAddress pointers differing from its exported
    symbols, the version rule must pick the newest ABI not after the caller's
    version. Before: cuGetProcAddress at 12000+ got the v1 wrapper (status
    never written by a _v2 caller)."""
    r = probe.run("init procaddr cuGetProcAddress 12040 procaddr cuGetProcAddress 11080 "
                  "procaddr cuMemAlloc 12040 procaddr cuMemAllocAsync 12040 2 "
                  "procaddr cuDevicePrimaryCtxRelease 12040 "
                  "procaddr cuDevicePrimaryCtxRelease 10000",
                  via="proc2", FAKECUDA_PROCADDR_DISTINCT=1)
    got = [(l[1], [t for t in l if t.startswith("sym=")]) for l in r.lines if l[0] == "procaddr"]
    assert got == [("CUDA_SUCCESS", ["sym=cuGetProcAddress_v2"]),
                   ("CUDA_SUCCESS", ["sym=cuGetProcAddress"]),
                   ("CUDA_SUCCESS", ["sym=cuMemAlloc_v2"]),
                   ("CUDA_SUCCESS", ["sym=cuMemAllocAsync_ptsz"]),
                   ("CUDA_SUCCESS", ["sym=cuDevicePrimaryCtxRelease_v2"]),
                   ("CUDA_SUCCESS", ["sym=cuDevicePrimaryCtxRelease"])], r.p.stdout
    # ...and what they hand out is charged.
    r = probe.run("init alloc 3g alloc 2g", via="proc2", FAKECUDA_PROCADDR_DISTINCT=1)
    assert r.codes()[1:] == ["CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY"]
    assert probe.peak() <= 4 * GiB


# ---- D13: the legacy primary-context release ------------------------------------

@pytest.mark.parametrize("via", ["dlsym", "proc-old"])
def test_d13_legacy_primary_release_gives_the_context_memory_back(probe, via):
    """Before: the unversioned cuDevicePrimaryCtxRelease passed through, the
    context's 3g stayed charged and the next 3g was refused."""
    r = probe.run("init alloc 3g legacy-release device 0 alloc 3g info", via=via)
    assert r.codes() == ["CUDA_SUCCESS"] * 6, r.p.stdout
    assert r.value("info", "free") == 1 * GiB
    assert probe.peak() <= 4 * GiB


# ---- D10: pitch padding ---------------------------------------------------------

def test_d10_pitch_padding_charged_before_the_driver_allocates(probe):
    """Width 1, height 1M: the driver pads each row to 512 bytes (512 MiB).
    Before: 1 MiB was charged, the driver took 512 MiB (4.11 GiB physical
    under a 4 GiB limit) until the padding's charge failed."""
    r = probe.run("init alloc 3700m pitch 1 1048576 info")
    assert r.line("pitch")[1] == "CUDA_ERROR_OUT_OF_MEMORY", r.p.stdout
    assert r.value("info", "free") == 4 * GiB - 3700 * MiB
    assert probe.peak() <= 4 * GiB
    # Exactly what the driver takes is charged when it fits.
    r = probe.run("init pitch 1000 1024 info")
    assert r.value("pitch", "pitch") == 1024
    assert r.value("info", "free") == 4 * GiB - 1024 * 1024


# ---- D11: whose limit, on which GPU ----------------------------------------------

def test_d11_visible_devices_renumbering_keeps_each_gpus_limit(probe):
    """The limit variables name the GPUs as the container sees them. A process
    that sets CUDA_VISIBLE_DEVICES=1 sees container GPU 1 as its device 0: it
    gets GPU 1's limit. Before: limit _0 (6g) was applied to GPU 1 (limit 4g)."""
    env = dict(limit=None, CUDA_DEVICE_MEMORY_LIMIT_0="6g", CUDA_DEVICE_MEMORY_LIMIT_1="4g")
    r = probe.run("init total fill 256m", CUDA_VISIBLE_DEVICES="1", **env)
    assert r.value("total", "bytes") == 4 * GiB
    assert r.value("fill", "bytes") == 4 * GiB
    assert probe.peak(UUID1) <= 4 * GiB
    # By UUID the rule is the smallest limit of any GPU (exact for equal limits).
    r = probe.run("init total", CUDA_VISIBLE_DEVICES=UUID0, **env)
    assert r.value("total", "bytes") == 4 * GiB


# ---- races, against what the GPU physically holds -------------------------------

def _wait_all(procs, timeout=120):
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout * TIMEOUT_SCALE)
        assert p.returncode == 0, (p.returncode, err)
        outs.append(out)
    return outs


def test_64_processes_churning_never_hold_more_than_the_limit(probe):
    """64 processes allocating and freeing 300m at once under 1g: the review
    saw HAMi-core reach 31.9 GiB under 4 GiB this way."""
    script = "init " + "alloc 300m free " * 100
    procs = [probe.spawn(script, limit="1g") for _ in range(64)]
    outs = _wait_all(procs)
    granted = sum(o.count("alloc CUDA_SUCCESS") for o in outs)
    refused = sum(o.count("alloc CUDA_ERROR_OUT_OF_MEMORY") for o in outs)
    assert granted > 0 and granted + refused == 64 * 100
    assert probe.peak() <= GiB, probe.phys()
    assert probe.run("init info", limit="1g").value("info", "free") == GiB


def test_4_processes_racing_for_1_5g_each_under_4g(probe):
    procs = [probe.spawn("init alloc 1536m hold") for _ in range(4)]
    try:
        codes = []
        for p in procs:
            p.stdout.readline()
            codes.append(p.stdout.readline().split()[1])
        assert sorted(codes) == ["CUDA_ERROR_OUT_OF_MEMORY"] * 2 + ["CUDA_SUCCESS"] * 2
        assert probe.peak() <= 4 * GiB
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_64_threads_churning_in_one_process(probe):
    r = probe.run("init threads 64 100m info", limit="1g")
    assert r.value("info", "free") == GiB
    assert probe.peak() <= GiB


def test_kill_storm_physical_peak_and_full_recovery(probe):
    """300 churning processes SIGKILLed at random instants, 10 at a time."""
    import random
    import signal
    import time
    rng = random.Random(7)
    for _ in range(30):
        batch = [probe.spawn("init " + "alloc 200m free " * 500, limit="1g") for _ in range(10)]
        for p in batch:
            assert p.stdout.readline().split()[:2] == ["init", "CUDA_SUCCESS"]
        time.sleep(rng.random() * 0.01)
        for p in batch:
            p.send_signal(signal.SIGKILL)
        for p in batch:
            p.wait()
    assert probe.peak() <= GiB
    r = probe.run("init info fill 100m", limit="1g")
    assert r.value("info", "free") == GiB
    assert r.value("fill", "bytes") == 1000 * MiB


# ---- D3: memory a stream-ordered pool keeps ---------------------------------------

@pytest.mark.parametrize("threshold", ["", "pool-threshold max "])
def test_d3_pool_retention_is_charged_and_trimmed_before_a_refusal(probe, threshold):
    """A pool keeps what is freed into it (until a synchronisation past its
    threshold, or forever with UINT64_MAX). Before: the async free gave the
    charge back at once and cuMemAlloc_v2 got 3g more: 6 GiB under 4."""
    r = probe.run("init %sasync 3g free info alloc 3g info" % threshold, FAKECUDA_POOL_RETAIN=1)
    assert r.value("info", "free") == 1 * GiB, r.p.stdout      # the pool holds 3g
    assert r.line("alloc")[1] == "CUDA_SUCCESS", r.p.stdout    # after trimming it
    assert r.value("info", "free", 1) == 1 * GiB
    assert probe.peak() <= 4 * GiB, probe.phys()


def test_d3_pool_that_shrank_is_seen(probe):
    r = probe.run("init pool-threshold max async 3g free info pool-trim 0 info "
                  "pool-threshold 0 async 1g free info sync info", FAKECUDA_POOL_RETAIN=1)
    frees = [int(l[2].split("=")[1]) for l in r.lines if l[0] == "info"]
    assert frees == [1 * GiB, 4 * GiB, 3 * GiB, 4 * GiB], r.p.stdout
    assert probe.peak() <= 4 * GiB


def test_d3_stream_ordered_allocations_refused_only_past_what_the_pool_can_give(probe):
    r = probe.run("init pool-threshold max async 3g free async 3g async 1g async 1m info",
                  FAKECUDA_POOL_RETAIN=1)
    assert r.codes()[2:] == ["CUDA_SUCCESS", "CUDA_SUCCESS", "CUDA_SUCCESS", "CUDA_SUCCESS",
                             "CUDA_ERROR_OUT_OF_MEMORY", "CUDA_SUCCESS"], r.p.stdout
    assert r.value("info", "free") == 0
    assert probe.peak() <= 4 * GiB


# ---- D4: the GPU whose memory it is ------------------------------------------------

def test_d4_another_devices_pool_is_charged_to_that_device(probe):
    """GPU0 current, an allocation from GPU1's default pool. Before: charged
    to GPU0, and GPU1 gave 4g more: 7 GiB on a GPU limited to 4."""
    r = probe.run("init xdev-pool 3g 1 info device 1 info alloc 2g alloc 1g")
    frees = [int(l[2].split("=")[1]) for l in r.lines if l[0] == "info"]
    assert frees == [4 * GiB, 1 * GiB], r.p.stdout
    assert [l[1] for l in r.lines if l[0] == "alloc"] == \
        ["CUDA_ERROR_OUT_OF_MEMORY", "CUDA_SUCCESS"]
    assert probe.peak(UUID1) <= 4 * GiB and probe.peak(UUID0) <= 4 * GiB, probe.phys()


@pytest.mark.parametrize("noctx", ["", "no-ctx "])
def test_d4_a_stream_of_another_context_is_charged_to_its_device(probe, noctx):
    """cuMemAllocAsync on a stream of GPU1's context, with GPU0 current or no
    current context at all. Before: charged to GPU0, or not at all."""
    r = probe.run("init stream-on 1 %sasync-on-stream 3g device 1 info device 0 info" % noctx)
    assert r.line("async-on-stream")[1] == "CUDA_SUCCESS", r.p.stdout
    frees = [int(l[2].split("=")[1]) for l in r.lines if l[0] == "info"]
    assert frees == [1 * GiB, 4 * GiB], r.p.stdout
    r = probe.run("init stream-on 1 %sasync-on-stream 3g async-on-stream 2g" % noctx)
    assert [l[1] for l in r.lines if l[0] == "async-on-stream"] == \
        ["CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY"], r.p.stdout
    assert probe.peak(UUID1) <= 4 * GiB


def test_d4_a_devices_current_pool_is_followed(probe):
    """cuDeviceSetMemPool(1, a pool made on GPU1) from GPU0's context, then
    stream-ordered allocations on GPU1 come from it and are charged there,
    with what it retains."""
    r = probe.run("init set-mempool 1 device 1 pool-threshold max async 3g free info "
                  "device 0 info", FAKECUDA_POOL_RETAIN=1)
    assert r.line("set-mempool")[1] == "CUDA_SUCCESS", r.p.stdout
    frees = [int(l[2].split("=")[1]) for l in r.lines if l[0] == "info"]
    assert frees == [1 * GiB, 4 * GiB], r.p.stdout
    assert probe.peak(UUID1) <= 4 * GiB


# ---- D2: virtual memory, released while still mapped ------------------------------

def test_d2_memory_released_while_mapped_stays_charged(probe):
    """cuMemCreate, map, set access, cuMemRelease -- what the CUDA VMM samples
    and UCX do -- four times under 4g. Before: 8.0 GiB physical, and
    cuMemGetInfo still said 4 GiB free."""
    r = probe.run("init " + "vmm 2g vmm-release " * 4 + "info")
    assert [l[1] for l in r.lines if l[0] == "vmm"] == \
        ["CUDA_SUCCESS", "CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY", "CUDA_ERROR_OUT_OF_MEMORY"]
    assert r.value("info", "free") == 0, r.p.stdout
    assert probe.peak() <= 4 * GiB, probe.phys()


@pytest.mark.parametrize("order", [
    "vmm-release vmm-unmap",            # release first, then the last mapping
    "vmm-unmap vmm-release",            # unmap first
])
def test_d2_given_back_at_the_last_of_release_and_unmap(probe, order):
    r = probe.run("init vmm 2g info %s info" % order.split()[0] + " info %s info" % order.split()[1])
    frees = [int(l[2].split("=")[1]) for l in r.lines if l[0] == "info"]
    assert frees == [2 * GiB, 2 * GiB, 2 * GiB, 4 * GiB], r.p.stdout


def test_d2_two_mappings_and_a_retained_handle(probe):
    """Mapped twice, released, then a handle retained from an address: the
    memory is charged once and given back only at the end."""
    r = probe.run("init vmm 2g vmm-map vmm-retain info "
                  "vmm-release info vmm-unmap info vmm-unmap info vmm-release info")
    frees = [int(l[2].split("=")[1]) for l in r.lines if l[0] == "info"]
    assert frees == [2 * GiB, 2 * GiB, 2 * GiB, 2 * GiB, 4 * GiB], r.p.stdout
    assert probe.peak() <= 4 * GiB


def test_d2_exported_memory_stays_charged_until_the_exporter_exits(probe):
    """Exported (and imported back), then every handle released and every
    mapping unmapped: another process may still map it, and an importer does
    not charge it, so it stays charged here until this process exits
    (docs/isolation.md, "Virtual memory")."""
    r = probe.run("init vmm 2g vmm-import vmm-release vmm-release vmm-unmap info")
    assert r.codes() == ["CUDA_SUCCESS"] * 7, r.p.stdout
    assert r.value("info", "free") == 2 * GiB, r.p.stdout
    assert probe.run("init info").value("info", "free") == 4 * GiB  # the exporter is gone
    assert probe.peak() <= 4 * GiB


# ---- cuCtxSetLimit: device memory the application grows ---------------------------

def test_context_limit_growth_is_charged_and_goes_with_the_context(probe):
    """The malloc heap (default 8 MiB) grown to 3g, and the per-thread stack
    grown to 16 KiB (x 132 SMs x 2048 threads on the fake: 3.87 GiB more).
    Before: outside the share (isolation.md said the application 'cannot
    grow them')."""
    r = probe.run("init set-limit heap 3g info alloc 2g")
    assert r.value("info", "free") == 1 * GiB + 8 * MiB, r.p.stdout
    assert r.line("alloc")[1] == "CUDA_ERROR_OUT_OF_MEMORY"
    r = probe.run("init set-limit stack 16384 alloc 1g set-limit stack 1024 alloc 1g info")
    assert [l[1] for l in r.lines if l[0] == "alloc"] == \
        ["CUDA_ERROR_OUT_OF_MEMORY", "CUDA_SUCCESS"], r.p.stdout
    assert r.value("info", "free") == 3 * GiB
    r = probe.run("init ctx-create set-limit heap 3g ctx-destroy info")
    assert r.value("info", "free") == 4 * GiB, r.p.stdout
    # Past the share, the growth itself is refused.
    r = probe.run("init alloc 2g set-limit heap 3g")
    assert r.line("set-limit")[1] == "CUDA_ERROR_OUT_OF_MEMORY", r.p.stdout
    assert probe.peak() <= 4 * GiB, probe.phys()


# ---- graphs: allocation nodes take memory at launch -----------------------------

def test_graph_allocations_are_charged_when_the_graph_takes_the_memory(probe):
    """A captured allocation (and its free) becomes graph nodes; the memory
    is taken from the device's graph pool at launch and kept there. Before:
    charged at capture, given back by the captured free, so the launch's
    3g was never charged and 3g more were granted: 6 GiB under 4."""
    r = probe.run("init capture 3g free graph-launch info alloc 3g info")
    assert r.line("capture")[1] == "CUDA_SUCCESS", r.p.stdout
    assert r.line("graph-launch")[1] == "CUDA_SUCCESS", r.p.stdout
    frees = [int(l[2].split("=")[1]) for l in r.lines if l[0] == "info"]
    assert frees[0] == 1 * GiB, r.p.stdout      # the graph pool holds 3g
    assert r.line("alloc")[1] == "CUDA_SUCCESS"  # after trimming it
    assert frees[1] == 1 * GiB
    assert probe.peak() <= 4 * GiB, probe.phys()


def test_graph_launch_refused_past_the_limit_runs_nothing(probe):
    r = probe.run("init alloc 2g capture 3g free graph-launch graph-attr")
    assert r.line("graph-launch")[1] == "CUDA_ERROR_OUT_OF_MEMORY", r.p.stdout
    assert r.value("graph-attr", "reserved") == 0
    assert probe.peak() <= 4 * GiB


def test_graph_allocation_kept_past_the_launch(probe):
    """An allocation the graph does not free is the application's until it
    frees it; then it is the graph pool's until trimmed."""
    r = probe.run("init capture 3g graph-launch alloc 2g free alloc 2g info")
    assert [l[1] for l in r.lines if l[0] == "alloc"] == \
        ["CUDA_ERROR_OUT_OF_MEMORY", "CUDA_SUCCESS"], r.p.stdout
    assert r.value("info", "free") == 2 * GiB
    assert probe.peak() <= 4 * GiB


# ---- liveness across fork ------------------------------------------------------------

def test_parent_killed_while_its_forked_child_lives_gives_its_share_back(probe):
    """PyTorch's DataLoader forks workers after CUDA is up. The parent holds
    1g, its child 1g; the parent is SIGKILLed. The child inherited the
    region's mapping: were the slot locks on the mapped file's description,
    the child would keep the dead parent charged (it did, on the first
    version of the OFD-lock liveness)."""
    import signal
    import time
    p = probe.spawn("init alloc 1g fork-hold 1g hold")
    try:
        lines = [p.stdout.readline().split() for _ in range(4)]
        assert [l[1] for l in lines[:3]] == ["CUDA_SUCCESS"] * 3, lines
        child = int(lines[2][2].split("=")[1])
        assert probe.run("init info").value("info", "free") == 2 * GiB
        p.send_signal(signal.SIGKILL)
        p.wait()
        deadline = time.time() + 1.0 * TIMEOUT_SCALE
        while probe.run("init info").value("info", "free") != 3 * GiB:
            assert time.time() < deadline, "the dead parent's 1g is still charged"
            time.sleep(0.05)
        r = probe.run("init alloc 3g alloc 1m")
        assert r.codes() == ["CUDA_SUCCESS", "CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY"]
    finally:
        try:
            os.kill(child, 9)
        except (NameError, ProcessLookupError):
            pass
        if p.poll() is None:
            p.kill()
            p.wait()
    assert probe.peak() <= 4 * GiB
