"""libgpupool-cuda (docs/isolation.md) through real processes: the probe
(test/cuda/cudaprobe.c) reaches the fake libcuda.so.1 (test/fakecuda) the way
applications do -- dlsym, cuGetProcAddress old and new, a direct link -- with
the library preloaded exactly as a container's /etc/ld.so.preload would.

The fake driver knows nothing of limits: every CUDA_ERROR_OUT_OF_MEMORY below
a fake device's total, and every figure that is not the device's own, comes
from the library.
"""

import json
import os
import random
import re
import shlex
import signal
import subprocess
import time

import pytest

from conftest import BUILD as BUILD_DIR, TIMEOUT_SCALE

GiB = 1 << 30
MiB = 1 << 20

LIB = os.path.join(BUILD_DIR, "lib", "libgpupool-cuda.so")
FAKECUDA = os.path.join(BUILD_DIR, "test", "fakecuda")
FAKENVML = os.path.join(BUILD_DIR, "test", "fakenvml")
PROBE = os.path.join(BUILD_DIR, "test", "cuda", "gpupool-cudaprobe")
PROBE_LINKED = os.path.join(BUILD_DIR, "test", "cuda", "gpupool-cudaprobe-linked")
UUID0 = "GPU-11111111-2222-3333-4444-555555555555"
UUID1 = "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa"

pytestmark = pytest.mark.skipif(
    not os.path.exists(LIB) or not os.path.exists(PROBE),
    reason="libgpupool-cuda or the probe is not built")


def _sanitizer_preloads():
    """An ASan/UBSan build of the library needs the sanitizer runtimes first
    in the preload list, as they would be in a sanitized program."""
    out = subprocess.run(["objdump", "-p", LIB], capture_output=True, text=True).stdout
    libs = []
    for name in ("libasan.so", "libubsan.so"):
        m = re.search(r"NEEDED\s+(%s\.\d+)" % re.escape(name), out)
        if m:
            path = subprocess.run(["gcc", "-print-file-name=" + m.group(1)],
                                  capture_output=True, text=True).stdout.strip()
            libs.append(path)
    return libs


SANITIZERS = _sanitizer_preloads() if os.path.exists(LIB) else []
PRELOAD = ":".join(SANITIZERS + [LIB])
WRAPPER = shlex.split(os.environ.get("GP_PLUGIN_WRAPPER", ""))


class Probe:
    """Runs probes with the library preloaded over the fake driver."""

    def __init__(self, tmp):
        self.tmp = str(tmp)
        self.prefix = os.path.join(self.tmp, "region")

    def env(self, limit="4g", devices="%s=16g,%s=8g" % (UUID0, UUID1), preload=True, **extra):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CUDA_DEVICE_MEMORY", "ALIYUN_COM_GPU_MEM", "FAKECUDA"))}
        env["LD_LIBRARY_PATH"] = FAKECUDA + ":" + FAKENVML
        env["FAKECUDA_DEVICES"] = devices
        env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = self.prefix
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:exitcode=23:verify_asan_link_order=0")
        if limit is not None:
            env["CUDA_DEVICE_MEMORY_LIMIT"] = limit
        if preload:
            env["LD_PRELOAD"] = PRELOAD
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def argv(self, script, via=None, linked=False, wrap=True):
        argv = ([] if not wrap else WRAPPER) + [PROBE_LINKED if linked else PROBE]
        if via:
            argv += ["--via", via]
        return argv + shlex.split(script)

    def run(self, script, via=None, linked=False, timeout=30, check=True, **env_kw):
        p = subprocess.run(self.argv(script, via, linked), env=self.env(**env_kw),
                           capture_output=True, text=True, timeout=timeout * TIMEOUT_SCALE)
        if check:
            assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
            assert "ERROR: AddressSanitizer" not in p.stderr, p.stderr
            assert "runtime error:" not in p.stderr, p.stderr
        return Result(p)

    def spawn(self, script, via=None, **env_kw):
        return subprocess.Popen(self.argv(script, via, wrap=False), env=self.env(**env_kw),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class Result:
    def __init__(self, p):
        self.p = p
        self.lines = [l.split() for l in p.stdout.splitlines() if l.strip()]

    def codes(self):
        return [l[1] for l in self.lines]

    def line(self, cmd, nth=0):
        found = [l for l in self.lines if l[0] == cmd]
        assert len(found) > nth, (cmd, self.p.stdout, self.p.stderr)
        return found[nth]

    def value(self, cmd, key, nth=0):
        for tok in self.line(cmd, nth)[2:]:
            if tok.startswith(key + "="):
                return int(tok.split("=", 1)[1]) if tok.split("=", 1)[1].isdigit() \
                    else tok.split("=", 1)[1]
        raise AssertionError((cmd, key, self.p.stdout))


@pytest.fixture
def probe(tmp_path):
    return Probe(tmp_path)


VIAS = ["dlsym", "proc", "proc2", "proc-old", "linked"]


def _run_via(probe, script, via, **kw):
    if via == "linked":
        return probe.run(script, linked=True, **kw)
    return probe.run(script, via=via, **kw)


# ---- pass-through and the limit -------------------------------------------------

def test_no_limit_is_pure_pass_through(probe):
    r = probe.run("init info total fill 1g", limit=None)
    assert r.value("info", "total") == 16 * GiB
    assert r.value("total", "bytes") == 16 * GiB
    assert r.line("fill")[1] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert r.value("fill", "bytes") == 16 * GiB  # the fake's own limit
    assert not [f for f in os.listdir(probe.tmp) if f.startswith("region")]


def test_a_compute_limit_alone_limits_no_memory(probe):
    """CUDA_DEVICE_SM_LIMIT without a memory limit (docs/compute.md): the whole GPU's
    memory, no memory region made."""
    r = probe.run("init info total fill 1g", limit=None, CUDA_DEVICE_SM_LIMIT=30)
    assert r.value("info", "total") == 16 * GiB
    assert r.value("fill", "bytes") == 16 * GiB
    assert not [f for f in os.listdir(probe.tmp) if f.startswith("region")]


@pytest.mark.parametrize("via", VIAS)
def test_limit_exact_to_the_byte_on_every_way_in(probe, via):
    limit = 4 * GiB + 12345
    r = _run_via(probe, "init info total alloc %d alloc 1 free alloc 1 info" % limit, via,
                 limit=str(limit))
    assert r.value("info", "total") == limit
    assert r.value("info", "free") == limit
    assert r.value("total", "bytes") == limit
    assert r.codes()[3:7] == ["CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY", "CUDA_SUCCESS",
                              "CUDA_SUCCESS"]
    assert r.value("info", "free", 1) == limit - 1


# One row per allocation path: the probe command and the bytes it must cost.
PATHS = [
    ("alloc 3m", 3 * MiB),
    ("managed 3m", 3 * MiB),
    ("async 3m", 3 * MiB),
    ("poolalloc 3m", 3 * MiB),
    ("create 4m", 4 * MiB),                       # granularity 2 MiB
    ("pitch 1000 1024", 1024 * 1024),             # pitch 1024: padding charged
    ("array 1024 256", 1024 * 256 * 4),           # FLOAT, 1 channel
    ("array3d 64 64 16", 64 * 64 * 16 * 4),
    ("mipmap 256 256 3", (256 * 256 + 128 * 128 + 64 * 64) * 4),
]


@pytest.mark.parametrize("cmd,cost", PATHS, ids=[p[0].split()[0] for p in PATHS])
@pytest.mark.parametrize("via", ["dlsym", "proc"])
def test_every_allocation_path_is_charged_and_given_back(probe, cmd, cost, via):
    limit = 64 * MiB
    r = probe.run("init %s info free info" % cmd, via=via, limit=str(limit))
    assert r.line(cmd.split()[0])[1] == "CUDA_SUCCESS"
    assert r.value("info", "free") == limit - cost
    assert r.line("free")[1] == "CUDA_SUCCESS"
    assert r.value("info", "free", 1) == limit
    # The path itself is refused past the limit, with the driver's OOM code.
    fill = "alloc %d" % (limit - cost + 1)
    r = probe.run("init %s %s" % (fill, cmd), via=via, limit=str(limit))
    assert r.codes()[-1] == "CUDA_ERROR_OUT_OF_MEMORY", r.p.stdout
    # ...and exactly at the limit it fits.
    r = probe.run("init alloc %d %s info" % (limit - cost, cmd), via=via, limit=str(limit))
    assert r.codes()[-2] == "CUDA_SUCCESS", r.p.stdout
    assert r.value("info", "free") == 0


def test_failed_driver_call_is_rolled_back(probe):
    r = probe.run("init alloc 1m info", limit="64m", FAKECUDA_FAIL="cuMemAlloc_v2:2")
    assert r.line("alloc")[1] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert r.value("info", "free") == 64 * MiB
    r = probe.run("init create 2m info", limit="64m", FAKECUDA_FAIL="cuMemCreate:999")
    assert r.line("create")[1] != "CUDA_SUCCESS"
    assert r.value("info", "free") == 64 * MiB


def test_context_teardown_gives_memory_back(probe):
    r = probe.run("init ctx-create alloc 10m array 1024 1024 info ctx-destroy init info",
                  limit="64m")
    assert r.value("info", "free") == 64 * MiB - 10 * MiB - 4 * MiB
    assert r.value("info", "free", 1) == 64 * MiB
    r = probe.run("init alloc 10m primary-reset init info", limit="64m")
    assert r.value("info", "free") == 64 * MiB


def test_per_device_limits_and_gpushare_share(probe):
    r = probe.run("init info device 1 info total", limit=None,
                  CUDA_DEVICE_MEMORY_LIMIT_0="1g", CUDA_DEVICE_MEMORY_LIMIT_1="512m")
    assert r.value("info", "total") == GiB
    assert r.value("info", "total", 1) == 512 * MiB
    assert r.value("total", "bytes") == 512 * MiB
    # A region keeps the limit it was created with (one container, one env).
    r = probe.run("init info", limit="2g")
    assert r.value("info", "total") == GiB
    # gpushare: 4 of 16 units of each GPU (another container: another region)
    r = probe.run("init info device 1 info", limit=None,
                  ALIYUN_COM_GPU_MEM_CONTAINER="4", ALIYUN_COM_GPU_MEM_DEV="16",
                  CUDA_DEVICE_MEMORY_SHARED_CACHE=probe.prefix + "-gpushare")
    assert r.value("info", "total") == 4 * GiB
    assert r.value("info", "total", 1) == 2 * GiB
    # A limit above the GPU is the GPU.
    r = probe.run("init info", limit="100g", CUDA_DEVICE_MEMORY_SHARED_CACHE=probe.prefix + "-big")
    assert r.value("info", "total") == 16 * GiB


def test_dra_uuid_names_survive_a_shell(probe):
    """The plugin spells a UUID in a variable's name with '_' for '-' (poolapi_names.h): dash,
    the /bin/sh of Debian images, drops names with '-' from the environment it passes on, so a
    workload started by a shell entrypoint would run without its limit. Through sh, the
    underscore form still limits the GPU; the dashed form does not reach the process."""
    d = os.path.join(probe.tmp, "claim-sh")
    os.mkdir(d)
    under = UUID0.replace("-", "_")
    env = probe.env(limit=None, **{"CUDA_DEVICE_MEMORY_LIMIT_" + under: "1g",
                                   "CUDA_DEVICE_MEMORY_SHARED_CACHE_" + under: d + "/region"})
    cmd = " ".join(shlex.quote(a) for a in probe.argv("init info", wrap=False))
    p = subprocess.run(["dash", "-c", "exec " + cmd], env=env, capture_output=True, text=True,
                       timeout=30 * TIMEOUT_SCALE)
    assert "total=%d" % GiB in p.stdout, (p.stdout, p.stderr)
    assert os.listdir(d) == ["region." + UUID0]
    dashed = probe.env(limit=None, **{"CUDA_DEVICE_MEMORY_LIMIT_" + UUID0: "1g"})
    p = subprocess.run(["dash", "-c", "exec " + cmd], env=dashed, capture_output=True,
                       text=True, timeout=30 * TIMEOUT_SCALE)
    assert "total=%d" % (16 * GiB) in p.stdout, (p.stdout, p.stderr)  # dash dropped it


def test_dra_limits_and_regions_keyed_by_uuid(probe):
    """The DRA driver's form: each claim's CDI edits name their GPU by UUID (limit and region
    prefix), so a container holding two claims gets both limits, whatever order its devices
    come in, and each GPU's region lives in its own claim's directory."""
    a, b = os.path.join(probe.tmp, "claim-a"), os.path.join(probe.tmp, "claim-b")
    os.mkdir(a)
    os.mkdir(b)
    env = {"CUDA_DEVICE_MEMORY_LIMIT_" + UUID0: "1g",
           "CUDA_DEVICE_MEMORY_SHARED_CACHE_" + UUID0: a + "/region",
           "CUDA_DEVICE_MEMORY_LIMIT_" + UUID1: "512m",
           "CUDA_DEVICE_MEMORY_SHARED_CACHE_" + UUID1: b + "/region"}
    r = probe.run("init info device 1 info alloc 600m", limit=None, **env)
    assert r.value("info", "total") == GiB
    assert r.value("info", "total", 1) == 512 * MiB
    assert r.codes()[-1] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert os.listdir(a) == ["region." + UUID0] and os.listdir(b) == ["region." + UUID1]
    # the process renumbers its devices: the UUID still finds each limit
    r = probe.run("init info device 1 info", limit=None, CUDA_VISIBLE_DEVICES="1,0", **env)
    assert r.value("info", "total") == 512 * MiB
    assert r.value("info", "total", 1) == GiB
    # a GPU no variable names (a whole-device claim beside a shared one): no limit
    one = {k: v for k, v in env.items() if UUID1 in k}
    r = probe.run("init info device 1 info", limit=None, **one)
    assert r.value("info", "total") == 16 * GiB
    assert r.value("info", "total", 1) == 512 * MiB


def test_one_region_per_gpu_shared_by_processes(probe):
    holder = probe.spawn("init alloc 3g device 1 alloc 1g hold")
    try:
        assert holder.stdout.readline().split()[1] == "CUDA_SUCCESS"
        for _ in range(4):
            holder.stdout.readline()
        r = probe.run("init info device 1 info")
        assert r.value("info", "free") == GiB
        assert r.value("info", "free", 1) == 3 * GiB
        files = sorted(f for f in os.listdir(probe.tmp) if f.startswith("region."))
        assert files == ["region." + UUID0, "region." + UUID1]
        for f in files:
            assert os.path.getsize(os.path.join(probe.tmp, f)) <= 64 * 1024
    finally:
        holder.kill()
        holder.wait()
    assert probe.run("init info").value("info", "free") == 4 * GiB


# ---- how the application finds the driver ----------------------------------------

def test_get_proc_address_honours_the_callers_version(probe):
    r = probe.run("init procaddr cuMemAlloc 12040 procaddr cuMemAlloc 3000 "
                  "procaddr cuMemAllocAsync 12040 2 procaddr cuMemAllocAsync 11000 "
                  "procaddr cuGraphAddKernelNode 11080 procaddr cuGraphAddKernelNode 12000 "
                  "procaddr cuGetProcAddress 12040 procaddr cuGetProcAddress 11080 "
                  "procaddr cuStreamSynchronize 12040 procaddr cuNoSuchThing 12040 "
                  "procaddr cuLaunchKernel 12040 "
                  "graph-node 11080 graph-node 12000")
    pa = [l for l in r.lines if l[0] == "procaddr"]
    lib = lambda l: [t for t in l if t.startswith("lib=")][0]
    sym = lambda l: [t for t in l if t.startswith("sym=")][0]
    assert pa[0][1] == "CUDA_SUCCESS" and lib(pa[0]) == "lib=libgpupool-cuda.so"
    assert sym(pa[0]) == "sym=cuMemAlloc_v2"
    # The legacy 32-bit ABI is kept, and charged by its own wrapper.
    assert lib(pa[1]) == "lib=libgpupool-cuda.so" and sym(pa[1]) == "sym=cuMemAlloc"
    assert lib(pa[2]) == "lib=libgpupool-cuda.so" and sym(pa[2]) == "sym=cuMemAllocAsync_ptsz"
    assert pa[3][1] == "CUDA_ERROR_NOT_FOUND"
    assert lib(pa[4]) == "lib=libcuda.so.1" and sym(pa[4]) == "sym=cuGraphAddKernelNode"
    assert lib(pa[5]) == "lib=libcuda.so.1" and sym(pa[5]) == "sym=cuGraphAddKernelNode_v2"
    assert lib(pa[6]) == "lib=libgpupool-cuda.so" and sym(pa[6]) == "sym=cuGetProcAddress_v2"
    assert lib(pa[7]) == "lib=libgpupool-cuda.so" and sym(pa[7]) == "sym=cuGetProcAddress"
    assert lib(pa[8]) == "lib=libcuda.so.1"  # not ours: untouched, no cost
    assert pa[9][1] == "CUDA_ERROR_NOT_FOUND"
    # Launches are interposed (the compute limit, docs/compute.md).
    assert lib(pa[10]) == "lib=libgpupool-cuda.so" and sym(pa[10]) == "sym=cuLaunchKernel"
    ref = probe.run("init graph-node 11080 graph-node 12000", preload=False)
    assert [l for l in r.lines if l[0] == "graph-node"] == \
        [l for l in ref.lines if l[0] == "graph-node"]


def test_null_out_parameters_get_the_drivers_answer(probe):
    script = "init null-info null-alloc info"
    ours = probe.run(script)
    theirs = probe.run(script, preload=False)
    assert ours.line("null-info") == theirs.line("null-info")
    assert ours.line("null-alloc") == theirs.line("null-alloc")
    assert ours.line("null-alloc")[1] == "CUDA_ERROR_INVALID_VALUE"
    assert ours.value("info", "free") == 4 * GiB


def test_rtld_next_still_means_after_the_caller(probe, tmp_path):
    """Our dlsym forwards with a tail call, so glibc still resolves RTLD_NEXT
    relative to the real caller: a marker defined only in a library preloaded
    between the program and us must be found."""
    marker_c = tmp_path / "marker.c"
    marker_c.write_text("int gp_rtld_next_marker(void) { return 42; }\n")
    main_c = tmp_path / "main.c"
    main_c.write_text(
        "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <stdio.h>\n"
        "int main(void) { int (*f)(void) = (int (*)(void))dlsym(RTLD_NEXT, \"gp_rtld_next_marker\");\n"
        "  void *self = dlsym(RTLD_DEFAULT, \"main\");\n"
        "  printf(\"%d %d\\n\", f ? f() : -1, self != NULL); return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "libmarker.so"), str(marker_c)],
                   check=True)
    subprocess.run(["cc", "-rdynamic", "-o", str(tmp_path / "main"), str(main_c), "-ldl"],
                   check=True)
    env = probe.env()
    env["LD_PRELOAD"] = ":".join(SANITIZERS + [str(tmp_path / "libmarker.so"), LIB])
    out = subprocess.run([str(tmp_path / "main")], env=env, capture_output=True, text=True,
                         timeout=30)
    assert out.stdout.split() == ["42", "1"], (out.stdout, out.stderr)


def test_ctypes_framework_and_fork(probe, tmp_path):
    """Python's ctypes resolves through dlsym like a framework does; a fork
    child owns none of its parent's memory and its own is reclaimed."""
    script = tmp_path / "fw.py"
    script.write_text(r'''
import ctypes, os, sys
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
ctx = ctypes.c_void_p()
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
p = ctypes.c_uint64()
def alloc(n):
    return cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n))
def free_mem():
    f, t = ctypes.c_size_t(), ctypes.c_size_t()
    assert cu.cuMemGetInfo_v2(ctypes.byref(f), ctypes.byref(t)) == 0
    return f.value
assert alloc(1 << 30) == 0
kid = os.fork()
if kid == 0:
    rc1 = alloc(2 << 30)
    rc2 = alloc(2 << 30)
    os._exit(0 if (rc1, rc2) == (0, 2) else 1)
_, st = os.waitpid(kid, 0)
assert st == 0, st
print(free_mem())
''')
    env = probe.env()
    env["ASAN_OPTIONS"] = "detect_leaks=0"  # the interpreter's own leaks are not ours
    out = subprocess.run(["/usr/bin/python3", str(script)], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert int(out.stdout.split()[-1]) == 3 * GiB


def test_threads(probe):
    r = probe.run("init threads 16 1m info", limit="64m")
    assert r.line("threads")[1] == "CUDA_SUCCESS", r.p.stdout
    assert r.value("info", "free") == 64 * MiB


# ---- many processes ---------------------------------------------------------------

def test_32_processes_racing_for_the_last_gib_never_exceed_it(probe):
    holder = probe.spawn("init alloc 3g hold")
    kids = []
    try:
        assert holder.stdout.readline().split()[1] == "CUDA_SUCCESS"
        assert holder.stdout.readline().split()[1] == "CUDA_SUCCESS"
        kids = [probe.spawn("init fill 7m fill 1m fill 4k hold") for _ in range(32)]
        total = 0
        for k in kids:
            got = 0
            for _ in range(4):
                l = k.stdout.readline().split()
                if l[0] == "fill":
                    assert l[1] == "CUDA_ERROR_OUT_OF_MEMORY"
                    got += int(l[2].split("=")[1])
            total += got
        assert total == GiB, total
        assert probe.run("init info").value("info", "free") == 0
    finally:
        for k in kids + [holder]:
            k.kill()
            k.wait()
    assert probe.run("init info").value("info", "free") == 4 * GiB


def test_sigkill_storm_never_wedges_and_always_reclaims(probe):
    """1,000 processes killed at random instants of an allocation loop, 8 at
    a time: every new process initialises and allocates promptly, and at the
    end the whole limit is free again."""
    rng = random.Random(1)
    kills = int(os.environ.get("GP_CUDA_KILLS", "1000"))
    done = 0
    while done < kills:
        batch = [probe.spawn("init loop 1000000 1m", limit="64m") for _ in range(8)]
        for p in batch:
            line = p.stdout.readline().split()
            assert line[:2] == ["init", "CUDA_SUCCESS"], (line, p.stderr.read())
        time.sleep(rng.random() * 0.004)
        for p in batch:
            p.send_signal(signal.SIGKILL)
        for p in batch:
            p.wait()
        done += len(batch)
    r = probe.run("init info fill 1m", limit="64m")
    assert r.value("info", "free") == 64 * MiB
    assert r.value("fill", "bytes") == 64 * MiB


# ---- failing closed ----------------------------------------------------------------

@pytest.mark.parametrize("env,why", [
    ({"limit": "4 GiB"}, 'CUDA_DEVICE_MEMORY_LIMIT="4 GiB" is not a size'),
    ({"limit": None, "CUDA_DEVICE_MEMORY_LIMIT_0": "lots"}, "CUDA_DEVICE_MEMORY_LIMIT_0"),
    ({"limit": None, "ALIYUN_COM_GPU_MEM_CONTAINER": "4"}, "ALIYUN_COM_GPU_MEM_DEV"),
])
def test_unusable_limit_fails_closed(probe, env, why):
    r = probe.run("init alloc 1m", **env)
    assert r.codes() == ["CUDA_ERROR_NOT_PERMITTED", "CUDA_ERROR_NOT_PERMITTED"], r.p.stdout
    msgs = [l for l in r.p.stderr.splitlines() if l.startswith("gpupool-cuda: ")]
    assert len(msgs) == 1 and why in msgs[0], r.p.stderr


def test_uncreatable_region_fails_closed(probe, tmp_path):
    r = probe.run("init alloc 1m", CUDA_DEVICE_MEMORY_SHARED_CACHE=str(tmp_path / "no" / "dir"))
    assert r.codes()[0] == "CUDA_ERROR_NOT_PERMITTED"
    assert "cannot open the shared region" in r.p.stderr
    os.mkfifo(probe.prefix + "." + UUID0)
    r = probe.run("init alloc 1m")
    assert r.codes()[0] == "CUDA_ERROR_NOT_PERMITTED"
    assert "not a regular file" in r.p.stderr


# ---- NVML: what nvidia-smi sees ----------------------------------------------------

def test_nvml_reports_the_share(probe, tmp_path):
    inv = {"driver_version": "550.54.15", "cuda_driver_version": 12040, "gpus": [
        {"uuid": UUID0, "name": "NVIDIA A100-SXM4-40GB", "minor": 0, "memory_mib": 16384,
         "pci_bus_id": "00000000:07:00.0"}]}
    (tmp_path / "inv.json").write_text(json.dumps(inv))
    holder = probe.spawn("init alloc 1g hold", devices=UUID0 + "=16g",
                         FAKE_NVML_INVENTORY=str(tmp_path / "inv.json"))
    try:
        for _ in range(2):
            assert holder.stdout.readline().split()[1] == "CUDA_SUCCESS"
        r = probe.run("nvml", devices=UUID0 + "=16g",
                      FAKE_NVML_INVENTORY=str(tmp_path / "inv.json"))
        assert r.value("nvml", "total") == 4 * GiB
        assert r.value("nvml", "used") == GiB
        assert r.value("nvml", "free") == 3 * GiB
        assert r.value("nvml", "total2") == 4 * GiB
        assert r.value("nvml", "used2") == GiB
        r = probe.run("nvml", devices=UUID0 + "=16g", preload=False,
                      FAKE_NVML_INVENTORY=str(tmp_path / "inv.json"))
        assert r.value("nvml", "total") == 16 * GiB
    finally:
        holder.kill()
        holder.wait()


def test_nvml_process_list_is_the_containers_own(probe, tmp_path):
    """nvmlDeviceGetComputeRunningProcesses_v3/_v2 on a limited GPU list the container's own
    processes (from its region: pids as the container sees them, what each holds), not the
    driver's host-wide list with the neighbours'; without the library the driver's list."""
    inv = {"gpus": [{"uuid": UUID0, "memory_mib": 16384}]}
    (tmp_path / "inv.json").write_text(json.dumps(inv))
    control = tmp_path / "nvml-control"
    control.write_text("process 0 999999 5000 10 10\n")   # a neighbour, by its host pid
    env = dict(devices=UUID0 + "=16g", FAKE_NVML_INVENTORY=str(tmp_path / "inv.json"),
               FAKE_NVML_CONTROL=str(control))
    a = probe.spawn("init alloc 1g hold", **env)
    b = probe.spawn("init alloc 512m hold", **env)
    try:
        for h in (a, b):
            for _ in range(2):
                assert h.stdout.readline().split()[1] == "CUDA_SUCCESS"
        r = probe.run("init nvml-procs", **env)
        assert r.value("nvml-procs", "count_rc") == 7   # NVML_ERROR_INSUFFICIENT_SIZE
        assert r.value("nvml-procs", "need") == 2
        assert r.value("nvml-procs", "n") == 2 and r.value("nvml-procs", "n2") == 2
        pids = [int(x) for x in r.value("nvml-procs", "pids").split(",")]
        used = [int(x) for x in r.value("nvml-procs", "used").split(",")]
        assert dict(zip(pids, used)) == {a.pid: GiB, b.pid: GiB // 2}
        r = probe.run("nvml-procs", preload=False, **env)
        assert r.value("nvml-procs", "pids") == 999999   # the driver's own answer
    finally:
        for h in (a, b):
            h.kill()
            h.wait()


def test_nvml_process_utilization_is_the_containers_own(probe, tmp_path):
    """nvmlDeviceGetProcessUtilization on a limited GPU answers the samples of the container's
    own processes, renamed to the pids the container sees, from the node agent's pid map in the
    region directory; a neighbour's sample is never shown, and without a map there is none
    (NOT_FOUND, as the driver says when it has no sample). Without the library: the driver's."""
    inv = {"gpus": [{"uuid": UUID0, "memory_mib": 16384}]}
    (tmp_path / "inv.json").write_text(json.dumps(inv))
    control = tmp_path / "nvml-control"
    # Ours (host pid 424242, pid 7 in the container) and a neighbour's.
    control.write_text("process 0 424242 1000 37 12\nprocess 0 999999 5000 55 10\n")
    env = dict(devices=UUID0 + "=16g", FAKE_NVML_INVENTORY=str(tmp_path / "inv.json"),
               FAKE_NVML_CONTROL=str(control))
    pid_map = os.path.join(os.path.dirname(probe.prefix), "pids")
    r = probe.run("init nvml-util", **env)
    assert r.value("nvml-util", "count_rc") == 6   # NVML_ERROR_NOT_FOUND: no map yet
    assert r.value("nvml-util", "rc") == 6
    with open(pid_map, "w") as f:
        f.write("gpupool-pids 1\n424242 7\n")
    r = probe.run("init nvml-util", **env)
    assert r.value("nvml-util", "count_rc") == 7   # NVML_ERROR_INSUFFICIENT_SIZE, as the driver
    assert r.value("nvml-util", "need") == 1
    assert r.value("nvml-util", "samples") == "7:37"
    # A damaged map names nobody; it never shows the neighbour.
    with open(pid_map, "w") as f:
        f.write("garbage 424242 7\n999999 8\n")
    assert probe.run("init nvml-util", **env).value("nvml-util", "rc") == 6
    r = probe.run("nvml-util", preload=False, **env)
    assert sorted(r.value("nvml-util", "samples").split(",")) == ["424242:37", "999999:55"]