"""The fake libcuda.so.1 (test/fakecuda) driven by gpupool-cudaprobe, no interposer (issue 15)."""

import os
import signal
import subprocess
import time

import pytest

from conftest import BUILD, run_program, scaled

FAKECUDA_DIR = os.path.join(BUILD, "test", "fakecuda")
PROBE = os.path.join(BUILD, "test", "cuda", "gpupool-cudaprobe")
PROBE_LINKED = os.path.join(BUILD, "test", "cuda", "gpupool-cudaprobe-linked")
PHYS_TOOL = os.path.join(FAKECUDA_DIR, "gpupool-fakecuda-phys")
FAKENVML_DIR = os.path.join(BUILD, "test", "fakenvml")
GIB = 1 << 30
MIB = 1 << 20
UUID0 = "GPU-11111111-2222-3333-4444-555555555555"


def probe_env(devices=None, fail=None, env_extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FAKECUDA_") and k != "CUDA_VISIBLE_DEVICES"}
    env["LD_LIBRARY_PATH"] = FAKECUDA_DIR
    if devices is not None:
        env["FAKECUDA_DEVICES"] = devices
    if fail is not None:
        env["FAKECUDA_FAIL"] = fail
    env.update(env_extra or {})
    return env


def probe_argv(script, via=None, ptsz=False, binary=PROBE):
    argv = [binary]
    if via:
        argv += ["--via", via]
    if ptsz:
        argv.append("--ptsz")
    return argv + [str(a) for a in script]


def probe(*script, via=None, ptsz=False, devices=None, fail=None, binary=PROBE, env_extra=None,
          expect_rc=0):
    proc = run_program(probe_argv(script, via, ptsz, binary),
                       env=probe_env(devices, fail, env_extra))
    assert proc.returncode == expect_rc, (proc.returncode, proc.stdout, proc.stderr)
    return proc


class Holder:
    """A probe left running at its `hold` (or `zombie`): what it printed up to then."""

    def __init__(self, *script, devices=None, env_extra=None, until="holding"):
        self.proc = subprocess.Popen(probe_argv(script), stdout=subprocess.PIPE, text=True,
                                     env=probe_env(devices, None, env_extra))
        self.out = []
        while True:
            line = self.proc.stdout.readline()
            assert line, ("probe ended before %r" % until, self.out)
            self.out.append(line.split())
            if line.strip() == until:
                break

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=scaled(10))
        self.proc.stdout.close()


@pytest.fixture
def holders():
    started = []

    def start(*script, **kw):
        h = Holder(*script, **kw)
        started.append(h)
        return h
    yield start
    for h in started:
        h.kill()


def phys(path, reset=False):
    """The physical-use file as gpupool-fakecuda-phys prints it: {dev: (uuid, current, peak)}."""
    argv = [PHYS_TOOL] + (["--reset-peak"] if reset else []) + [str(path)]
    r = run_program(argv)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    out = {}
    for line in r.stdout.splitlines():
        v = kv(line.split())
        out[int(v["dev"])] = (v["uuid"], int(v["current"]), int(v["peak"]))
    return out


def lines(proc):
    return [line.split() for line in proc.stdout.splitlines()]


def kv(fields):
    return {k: v for k, _, v in (f.partition("=") for f in fields if "=" in f)}


def codes(proc):
    return [f[1] for f in lines(proc)]


def test_default_device_and_happy_paths():
    p = probe("init", "total", "info", "alloc", "1g", "info", "pitch", 1000, 10, "managed", "1m",
              "async", "1m", "poolalloc", "1m", "create", "3m", "array", 100, 100, "array3d",
              10, 10, 10, "mipmap", 64, 64, 7, "info", "free-all", "info")
    out = lines(p)
    assert all(f[1] == "CUDA_SUCCESS" for f in out), p.stdout
    assert kv(out[1])["bytes"] == str(16 * GIB)
    assert kv(out[2]) == {"free": str(16 * GIB), "total": str(16 * GIB)}
    assert kv(out[4])["free"] == str(15 * GIB)
    assert kv(out[5])["pitch"] == "1024"           # 1000 rounded up to 512
    assert kv(out[9])["bytes"] == str(4 * MIB)     # 3 MiB rounded up to the 2 MiB granularity
    mip = sum(max(64 >> lvl, 1) ** 2 * 4 for lvl in range(7))
    used = GIB + 1024 * 10 + 3 * MIB + 4 * MIB + 100 * 100 * 4 + 1000 * 4 + mip
    assert int(kv(out[13])["free"]) == 16 * GIB - used
    assert kv(out[14])["count"] == "9"
    assert kv(out[15])["free"] == str(16 * GIB)


def test_devices_exact_limit_and_oom():
    devs = "%s=2g,1g" % UUID0
    p = probe("init", "fill", "512m", "alloc", "1", "info", "fill-free", "alloc", "2g", "alloc",
              "1", "device", 1, "total", "alloc", "1g", "alloc", "1", devices=devs)
    out = lines(p)
    assert out[1][1] == "CUDA_ERROR_OUT_OF_MEMORY" and kv(out[1])["bytes"] == str(2 * GIB)
    assert out[2][1] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert kv(out[3])["free"] == "0"
    assert out[4][1] == "CUDA_SUCCESS" and kv(out[4])["count"] == "4"
    assert out[5][1] == "CUDA_SUCCESS"          # exactly the total fits
    assert out[6][1] == "CUDA_ERROR_OUT_OF_MEMORY"  # one byte over does not
    assert out[7][1] == "CUDA_SUCCESS"
    assert kv(out[8])["bytes"] == str(GIB)      # device 1: 1g, its own accounting
    assert codes(p)[9:] == ["CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY"]


@pytest.mark.parametrize("value", ["", "0", "16x", "GPU-bad=1g", "1g,,2g", "%s=" % UUID0,
                                   "99999999999999999999g"])
def test_bad_devices_fail_every_call(value):
    p = probe("init", "procaddr", "cuMemAlloc", 12040, devices=value)
    assert codes(p) == ["CUDA_ERROR_UNKNOWN", "CUDA_ERROR_UNKNOWN"]
    errs = [l for l in p.stderr.splitlines() if l.startswith("fakecuda:")]
    assert len(errs) == 1 and "FAKECUDA_DEVICES" in errs[0], p.stderr


def test_not_initialized_and_no_context():
    p = probe("alloc", "1m", "info")
    assert codes(p) == ["CUDA_ERROR_NOT_INITIALIZED"] * 2
    # cuInit without a context: the probe's `init` sets one, so go through
    # ctx-destroy of nothing (INVALID_CONTEXT) and a context destroyed under us.
    p = probe("init", "ctx-create", "alloc", "1g", "ctx-destroy", "ctx-destroy", "info")
    assert codes(p) == ["CUDA_SUCCESS"] * 4 + ["CUDA_ERROR_INVALID_CONTEXT", "CUDA_SUCCESS"]


def test_invalid_values():
    p = probe("init", "null-info", "null-alloc", "alloc", 0, "pitch", 0, 4, "array", 0, 4,
              "mipmap", 8, 8, 5, "mipmap", 8, 8, 4, "create", 0, "free", "free", "threads", 0, 1)
    out = lines(p)
    assert out[1][1:] == ["CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_INVALID_VALUE"]
    assert [f[1] for f in out[2:7]] == ["CUDA_ERROR_INVALID_VALUE"] * 5
    assert out[7][1] == "CUDA_SUCCESS"   # 4 levels of 8x8 are possible
    assert out[8][1] == "CUDA_ERROR_INVALID_VALUE"
    assert out[9][1] == "CUDA_SUCCESS"   # frees the mipmap
    assert out[10] == ["free", "CUDA_ERROR_INVALID_VALUE", "nothing-live"]


def test_context_teardown_frees_memory():
    p = probe("init", "alloc", "1g", "ctx-create", "alloc", "2g", "array", 1024, 1024, "info",
              "ctx-destroy", "info", "create", "2m", "primary-reset", "info", "free", "info")
    out = lines(p)
    assert kv(out[5])["free"] == str(16 * GIB - 3 * GIB - 4 * MIB)
    assert kv(out[7])["free"] == str(15 * GIB)        # the created context's 2g + array gone
    assert kv(out[10])["free"] == str(16 * GIB - 2 * MIB)  # primary reset: VMM survives
    assert out[11][1] == "CUDA_SUCCESS"               # cuMemRelease of the VMM handle
    assert kv(out[12])["free"] == str(16 * GIB)


@pytest.mark.parametrize("via", [None, "dlsym", "proc", "proc2", "proc-old"])
def test_every_path_reaches_the_fake(via):
    p = probe("init", "alloc", "1g", "async", "1m", "launch", 10, "info", "free-all", "info",
              via=via, ptsz=via in ("proc", "proc2"))
    out = lines(p)
    assert all(f[1] == "CUDA_SUCCESS" for f in out), p.stdout
    assert kv(out[4])["free"] == str(15 * GIB - MIB)
    assert kv(out[6])["free"] == str(16 * GIB)


def test_linked_probe():
    p = probe("init", "alloc", "1g", "info", "procaddr", "cuMemAlloc", 12040, binary=PROBE_LINKED)
    out = lines(p)
    assert codes(p) == ["CUDA_SUCCESS"] * 4
    assert kv(out[2])["free"] == str(15 * GIB)
    assert kv(out[3]) == {"status": "0", "lib": "libcuda.so.1", "sym": "cuMemAlloc_v2"}
    r = subprocess.run([PROBE_LINKED, "--via", "proc", "init"], capture_output=True, text=True,
                       env=dict(os.environ, LD_LIBRARY_PATH=FAKECUDA_DIR), timeout=scaled(10))
    assert r.returncode == 2


@pytest.mark.parametrize("name,version,flags,want", [
    ("cuMemAlloc", 3010, 0, "cuMemAlloc"),
    ("cuMemAlloc", 3020, 0, "cuMemAlloc_v2"),
    ("cuMemFree", 2000, 0, "cuMemFree"),
    ("cuMemGetInfo", 12040, 0, "cuMemGetInfo_v2"),
    ("cuMemAllocPitch", 3000, 0, "cuMemAllocPitch"),
    ("cuDeviceTotalMem", 3020, 0, "cuDeviceTotalMem_v2"),
    ("cuArrayCreate", 3010, 0, "cuArrayCreate"),
    ("cuArray3DCreate", 3020, 0, "cuArray3DCreate_v2"),
    ("cuCtxCreate", 3020, 0, "cuCtxCreate_v2"),
    ("cuCtxDestroy", 3020, 0, "cuCtxDestroy"),
    ("cuCtxDestroy", 4000, 0, "cuCtxDestroy_v2"),
    ("cuDevicePrimaryCtxRelease", 10020, 0, "cuDevicePrimaryCtxRelease"),
    ("cuDevicePrimaryCtxRelease", 11000, 0, "cuDevicePrimaryCtxRelease_v2"),
    ("cuDevicePrimaryCtxReset", 11080, 0, "cuDevicePrimaryCtxReset_v2"),
    ("cuGetProcAddress", 11080, 0, "cuGetProcAddress"),
    ("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"),
    ("cuGraphAddKernelNode", 11080, 0, "cuGraphAddKernelNode"),
    ("cuGraphAddKernelNode", 12000, 0, "cuGraphAddKernelNode_v2"),
    ("cuMemAllocAsync", 11020, 0, "cuMemAllocAsync"),
    ("cuMemAllocAsync", 12040, 2, "cuMemAllocAsync_ptsz"),
    ("cuMemFreeAsync", 12040, 2, "cuMemFreeAsync_ptsz"),
    ("cuMemAllocFromPoolAsync", 12040, 2, "cuMemAllocFromPoolAsync_ptsz"),
    ("cuLaunchKernel", 12040, 2, "cuLaunchKernel_ptsz"),
    ("cuLaunchKernel", 12040, 1, "cuLaunchKernel"),
    ("cuMemAlloc", 12040, 2, "cuMemAlloc_v2"),       # no _ptsz variant: the plain one
    ("cuCtxPushCurrent", 3020, 0, "cuCtxPushCurrent"),
    ("cuCtxPushCurrent", 4000, 0, "cuCtxPushCurrent_v2"),
    ("cuCtxPopCurrent", 12040, 0, "cuCtxPopCurrent_v2"),
    ("cuMemPoolTrimTo", 11020, 0, "cuMemPoolTrimTo"),
    ("cuMemPoolSetAttribute", 11020, 0, "cuMemPoolSetAttribute"),
    ("cuMemPoolGetAttribute", 12040, 0, "cuMemPoolGetAttribute"),
    ("cuDeviceSetMemPool", 11020, 0, "cuDeviceSetMemPool"),
    ("cuStreamGetCtx", 9020, 0, "cuStreamGetCtx"),
    ("cuPointerGetAttribute", 4000, 0, "cuPointerGetAttribute"),
    ("cuCtxSetLimit", 3010, 0, "cuCtxSetLimit"),
    ("cuStreamBeginCapture", 10000, 0, "cuStreamBeginCapture"),
    ("cuStreamBeginCapture", 10010, 0, "cuStreamBeginCapture_v2"),
    ("cuGraphInstantiate", 11000, 0, "cuGraphInstantiate_v2"),
    ("cuGraphInstantiateWithFlags", 11040, 0, "cuGraphInstantiateWithFlags"),
    ("cuGraphLaunch", 12040, 2, "cuGraphLaunch_ptsz"),
    ("cuDeviceGraphMemTrim", 11040, 0, "cuDeviceGraphMemTrim"),
    ("cuMemRetainAllocationHandle", 11000, 0, "cuMemRetainAllocationHandle"),
    ("cuMemSetAccess", 10020, 0, "cuMemSetAccess"),
])
def test_procaddr_versions(name, version, flags, want):
    p = probe("procaddr", name, version, flags)
    assert lines(p)[0] == ["procaddr", "CUDA_SUCCESS", "status=0", "lib=libcuda.so.1",
                           "sym=" + want]


def test_procaddr_not_found():
    p = probe("procaddr", "cuMemAllocAsync", 11010, "procaddr", "cuMemPoolCreate", 11000,
              "procaddr", "cuNoSuchCall", 12040, "procaddr", "cuMemAlloc_v2", 12040,
              "procaddr", "cuMemAlloc", 12040, 4)
    out = lines(p)
    assert out[0] == ["procaddr", "CUDA_ERROR_NOT_FOUND", "status=2", "pfn=null"]
    assert out[1] == ["procaddr", "CUDA_ERROR_NOT_FOUND", "status=2", "pfn=null"]
    assert out[2] == ["procaddr", "CUDA_ERROR_NOT_FOUND", "status=1", "pfn=null"]
    assert out[3] == ["procaddr", "CUDA_ERROR_NOT_FOUND", "status=1", "pfn=null"]
    assert out[4][1] == "CUDA_ERROR_INVALID_VALUE"   # unknown flags


def test_proc_old_gets_old_abis():
    # At 11030 the async allocator exists but cuGraphAddKernelNode is v1.
    p = probe("init", "async", "1m", "graph-node", 11030, "graph-node", 12040, via="proc-old")
    out = lines(p)
    assert codes(p) == ["CUDA_SUCCESS"] * 4
    assert "abi=v1" in out[2] and "abi=v2" in out[3]


def test_ptsz_paths():
    p = probe("init", "async", "1m", "poolalloc", "1m", "launch", 5, "free-all", "info",
              via="proc2", ptsz=True)
    assert set(codes(p)) == {"CUDA_SUCCESS"}
    assert kv(lines(p)[5])["free"] == str(16 * GIB)


def test_fail_injection():
    p = probe("init", "alloc", "1m", "info", "async", "1m", "info",
              fail="cuMemAlloc_v2,cuMemAllocAsync:CUDA_ERROR_NOT_PERMITTED")
    out = lines(p)
    assert codes(p) == ["CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY", "CUDA_SUCCESS",
                        "CUDA_ERROR_NOT_PERMITTED", "CUDA_SUCCESS"]
    assert kv(out[4])["free"] == str(16 * GIB)   # no side effects
    p = probe("init", "info", fail="cuMemGetInfo_v2:999")
    assert codes(p) == ["CUDA_SUCCESS", "CUDA_ERROR_UNKNOWN"]
    p = probe("init", fail="cuNoSuch:2")
    assert codes(p) == ["CUDA_ERROR_UNKNOWN"]
    assert "FAKECUDA_FAIL" in p.stderr


def test_threads_and_loop():
    p = probe("init", "threads", 16, "64m", "loop", 10000, "1m", "info", devices="1g")
    out = lines(p)
    assert out[1] == ["threads", "CUDA_SUCCESS", "failures=0"]
    assert out[2][1] == "CUDA_SUCCESS" and kv(out[2])["n"] == "10000"
    assert kv(out[3])["free"] == str(GIB)
    # 16 threads x 128 MiB on 1 GiB: some must fail, none may corrupt the count.
    p = probe("init", "threads", 16, "128m", "info", devices="1g")
    out = lines(p)
    assert out[1][1] in ("CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY")
    assert kv(out[2])["free"] == str(GIB)


def test_nvml_through_the_fake():
    inv = os.path.join(os.path.dirname(__file__), "..", "fakenvml", "inventories", "4gpu.json")
    p = probe("nvml", env_extra={"LD_LIBRARY_PATH": FAKECUDA_DIR + ":" + FAKENVML_DIR,
                                 "FAKE_NVML_INVENTORY": os.path.abspath(inv)})
    out = lines(p)
    assert out[0][1] == "CUDA_SUCCESS", p.stdout + p.stderr
    v = kv(out[0])
    assert int(v["total"]) > 0 and v["total"] == v["total2"]


def test_usage_and_load_errors():
    for argv in (["bogus"], ["alloc"], ["alloc", "1x"], ["--via", "nowhere", "init"], []):
        r = subprocess.run([PROBE] + argv, capture_output=True, text=True, timeout=scaled(10))
        assert r.returncode == 2, (argv, r.stderr)
        assert r.stdout == ""
    r = subprocess.run([PROBE, "init"], capture_output=True, text=True, timeout=scaled(10),
                       env=dict(os.environ, LD_LIBRARY_PATH="/nonexistent"))
    if r.returncode == 0:
        pytest.skip("a real libcuda.so.1 is installed on this machine")
    assert r.returncode == 3 and "libcuda.so.1" in r.stderr


def test_hold_flushes_and_can_be_killed():
    env = dict(os.environ, LD_LIBRARY_PATH=FAKECUDA_DIR)
    proc = subprocess.Popen([PROBE, "init", "alloc", "1m", "hold"], stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        got = [proc.stdout.readline().strip() for _ in range(3)]
        assert got == ["init CUDA_SUCCESS", "alloc CUDA_SUCCESS", "holding"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=scaled(10))
        proc.stdout.close()


# --- FAKECUDA_PHYS: physical use across live processes ----------------------------------------

def test_phys_two_processes_add_up_and_share_the_device(tmp_path, holders):
    f = tmp_path / "phys"
    env = {"FAKECUDA_PHYS": str(f)}
    devs = "%s=4g,2g" % UUID0
    holders("init", "alloc", "1g", "array", 1024, 1024, "hold", devices=devs, env_extra=env)
    assert oct(os.stat(f).st_mode & 0o777) == "0o666"
    b = holders("init", "alloc", "2g", "alloc", "2g", "info", "device", 1, "create", "2m",
                "hold", devices=devs, env_extra=env)
    # 1g + 4 MiB held by the first: the second gets 2g, not 2g more, and sees the rest.
    assert [l[1] for l in b.out[:3]] == ["CUDA_SUCCESS", "CUDA_SUCCESS",
                                         "CUDA_ERROR_OUT_OF_MEMORY"]
    assert kv(b.out[3])["free"] == str(GIB - 4 * MIB)
    got = phys(f)
    assert got[0] == (UUID0, 3 * GIB + 4 * MIB, 3 * GIB + 4 * MIB)
    assert got[1] == ("GPU-fa4ecada-0000-0000-0000-000000000001", 2 * MIB, 2 * MIB)
    # Frees go back: a third process fills exactly what is left.
    p = probe("init", "fill", "1m", devices=devs, env_extra=env)
    assert kv(lines(p)[1])["bytes"] == str(GIB - 4 * MIB)
    assert phys(f)[0][1] == 3 * GIB + 4 * MIB


def test_phys_killed_process_drops_out_and_peak_is_kept(tmp_path, holders):
    f = tmp_path / "phys"
    env = {"FAKECUDA_PHYS": str(f)}
    a = holders("init", "alloc", "3g", "hold", devices="4g", env_extra=env)
    holders("init", "async", "512m", "hold", devices="4g", env_extra=env)
    assert phys(f)[0][1:] == (3 * GIB + 512 * MIB, 3 * GIB + 512 * MIB)
    p = probe("init", "alloc", "1g", devices="4g", env_extra=env)
    assert codes(p) == ["CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY"]
    a.kill()
    assert phys(f)[0][1:] == (512 * MIB, 3 * GIB + 512 * MIB)   # current drops, peak stays
    p = probe("init", "alloc", "3g", "info", devices="4g", env_extra=env)
    assert codes(p) == ["CUDA_SUCCESS"] * 3
    assert kv(lines(p)[2])["free"] == str(512 * MIB)
    assert phys(f)[0][1:] == (512 * MIB, 3 * GIB + 512 * MIB)   # 3.5g again: no new peak
    assert phys(f, reset=True)[0][1:] == (512 * MIB, 512 * MIB)
    assert phys(f)[0][1:] == (512 * MIB, 512 * MIB)


def test_phys_bad_file_fails_closed(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"x" * 100)
    for path in (str(bad), str(tmp_path / "no" / "dir"), ""):
        p = probe("init", env_extra={"FAKECUDA_PHYS": path})
        assert codes(p) == ["CUDA_ERROR_UNKNOWN"]
        assert "FAKECUDA_PHYS" in p.stderr
    r = subprocess.run([PHYS_TOOL, str(bad)], capture_output=True, text=True, timeout=scaled(10))
    assert r.returncode == 1 and "not a physical-use file" in r.stderr
    r = subprocess.run([PHYS_TOOL], capture_output=True, text=True, timeout=scaled(10))
    assert r.returncode == 2


def test_phys_exec_drops_the_old_image_share(tmp_path, holders):
    f = tmp_path / "phys"
    env = {"FAKECUDA_PHYS": str(f)}
    h = holders("--via", "proc", "init", "alloc", "3g", "exec-self", "init", "info", "alloc",
                "3g", "hold", devices="4g", env_extra=env)
    # The new image (same pid, same options) starts from nothing: the old one's
    # descriptor closed at exec, and with it the slot's lock.
    assert [l[:2] for l in h.out] == [["init", "CUDA_SUCCESS"], ["alloc", "CUDA_SUCCESS"],
                                      ["init", "CUDA_SUCCESS"], ["info", "CUDA_SUCCESS"],
                                      ["alloc", "CUDA_SUCCESS"], ["holding"]]
    assert kv(h.out[3])["free"] == str(4 * GIB)
    assert phys(f)[0][1:] == (3 * GIB, 3 * GIB)


def test_phys_zombie_leader_keeps_its_share(tmp_path, holders):
    f = tmp_path / "phys"
    env = {"FAKECUDA_PHYS": str(f)}
    h = holders("init", "zombie", "3g", devices="4g", env_extra=env)
    assert h.out[1] == ["zombie", "CUDA_SUCCESS"]
    stat = "/proc/%d/stat" % h.proc.pid
    deadline = time.monotonic() + scaled(10)
    while open(stat).read().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the main thread did not exit"
        time.sleep(0.01)
    assert h.proc.poll() is None                       # the worker keeps the process alive
    p = probe("init", "alloc", "2g", devices="4g", env_extra=env)
    assert codes(p) == ["CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY"]
    assert phys(f)[0][1] == 3 * GIB
    h.kill()
    assert phys(f)[0][1] == 0


def test_no_load_and_dlsym_default():
    p = probe("--no-load", "dlsym-default", "cuInit", "sleep", 1, "dlsym-default", "cuInit",
              "init", "dlsym-default", "cuInit", "dlsym-default", "cuNoSuchCall")
    assert lines(p) == [["dlsym-default", "CUDA_SUCCESS", "null"], ["sleep", "CUDA_SUCCESS"],
                        ["dlsym-default", "CUDA_SUCCESS", "null"], ["init", "CUDA_SUCCESS"],
                        ["dlsym-default", "CUDA_SUCCESS", "found"],
                        ["dlsym-default", "CUDA_SUCCESS", "null"]]
    r = subprocess.run([PROBE_LINKED, "--no-load", "init"], capture_output=True, text=True,
                       env=dict(os.environ, LD_LIBRARY_PATH=FAKECUDA_DIR), timeout=scaled(10))
    assert r.returncode == 2


def test_no_load_still_fails_to_load_with_exit_3():
    r = subprocess.run([PROBE, "--no-load", "dlsym-default", "cuInit", "init"],
                       capture_output=True, text=True, timeout=scaled(10),
                       env=dict(os.environ, LD_LIBRARY_PATH="/nonexistent"))
    if r.returncode == 0:
        pytest.skip("a real libcuda.so.1 is installed on this machine")
    assert r.returncode == 3 and r.stdout == "dlsym-default CUDA_SUCCESS null\n"


@pytest.mark.parametrize("no_load", [True, False])
def test_ctor_deadlock_runs_both_threads(no_load):
    p = probe(*((["--no-load"] if no_load else []) + ["ctor-deadlock", "init", "alloc", "1m"]))
    out = lines(p)
    # Thread B dlopened libcuda (RTLD_GLOBAL) before A's dlopen: the
    # constructor finds cuInit, and B's lookups wait for the loader lock.
    assert out[0] == ["ctor-deadlock", "CUDA_SUCCESS", "cuInit=found"], p.stdout
    assert codes(p)[1:] == ["CUDA_SUCCESS"] * 2


@pytest.mark.parametrize("via", ["dlsym", "proc", "proc2", "proc-old"])
def test_legacy_release_frees_the_primary_context(via):
    p = probe("init", "alloc", "1g", "legacy-release", "info", "device", 0, "info",
              "legacy-release", "legacy-release", via=via)
    assert codes(p) == ["CUDA_SUCCESS"] * 3 + ["CUDA_ERROR_CONTEXT_IS_DESTROYED"] + \
        ["CUDA_SUCCESS"] * 3 + ["CUDA_ERROR_INVALID_CONTEXT"]
    assert kv(lines(p)[5])["free"] == str(16 * GIB)
    p = probe("init", "legacy-release", binary=PROBE_LINKED)
    assert codes(p) == ["CUDA_SUCCESS"] * 2


# --- cuGetProcAddress pointers that differ from the exports; CUDA_VISIBLE_DEVICES ------------

def test_procaddr_distinct_pointers_behave_the_same():
    env = {"FAKECUDA_PROCADDR_DISTINCT": "1"}
    p = probe("procaddr", "cuMemAlloc", 12040, "procaddr", "cuMemAllocAsync", 12040, 2,
              "procaddr", "cuGetProcAddress", 12040, env_extra=env)
    # Inside the library, but at no exported symbol's address.
    assert lines(p) == [["procaddr", "CUDA_SUCCESS", "status=0", "lib=libcuda.so.1",
                         "sym=?"]] * 3
    for via in ("proc", "proc2", "proc-old"):
        p = probe("init", "alloc", "1g", "async", "1m", "info", "legacy-release", "device", 0,
                  "info", via=via, ptsz=via == "proc2", env_extra=env)
        assert set(codes(p)) == {"CUDA_SUCCESS"}, p.stdout
        assert kv(lines(p)[3])["free"] == str(15 * GIB - MIB)
        assert kv(lines(p)[6])["free"] == str(16 * GIB)
    p = probe("procaddr", "cuMemAlloc", 12040, env_extra={"FAKECUDA_PROCADDR_DISTINCT": "0"})
    assert lines(p)[0][-1] == "sym=cuMemAlloc_v2"
    p = probe("init", env_extra={"FAKECUDA_PROCADDR_DISTINCT": "yes"})
    assert codes(p) == ["CUDA_ERROR_UNKNOWN"] and "FAKECUDA_PROCADDR_DISTINCT" in p.stderr


UUID1 = "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa"
CVD_DEVICES = "%s=1g,2g,%s=3g" % (UUID0, UUID1)


@pytest.mark.parametrize("cvd,want", [
    ("2,0", [(UUID1, 3), (UUID0, 1)]),
    ("1", [("GPU-fa4ecada-0000-0000-0000-000000000001", 2)]),
    ("GPU-6666,GPU-11111111-2222-3333-4444-555555555555", [(UUID1, 3), (UUID0, 1)]),
    ("1,7,0", [("GPU-fa4ecada-0000-0000-0000-000000000001", 2)]),   # stops at 7
    ("0,0,2", [(UUID0, 1)]),                                         # a repeat stops it
    ("2,GPU-", [(UUID1, 3)]),
    ("0,x,1", [(UUID0, 1)]),
])
def test_cuda_visible_devices_remaps_ordinals(cvd, want):
    script = ["init", "count"]
    for i in range(len(want)):
        script += ["device", i, "uuid", "total"]
    script += ["device", len(want)]
    p = probe(*script, devices=CVD_DEVICES, env_extra={"CUDA_VISIBLE_DEVICES": cvd})
    out = lines(p)
    assert codes(p)[:-1] == ["CUDA_SUCCESS"] * (2 + 3 * len(want)), p.stdout
    assert out[-1][1] == "CUDA_ERROR_INVALID_DEVICE"
    assert kv(out[1])["n"] == str(len(want))
    for i, (uuid, gib) in enumerate(want):
        assert kv(out[3 + 3 * i])["uuid"] == uuid
        assert kv(out[4 + 3 * i])["bytes"] == str(gib * GIB)


@pytest.mark.parametrize("cvd", ["", "7", "GPU-fa4ecada", "-1", "GPU-11111111-2222-3333-4444-5555555555550"])
def test_cuda_visible_devices_naming_none_is_no_device(cvd):
    p = probe("init", "count", devices="%s=1g,2g,2g" % UUID0,
              env_extra={"CUDA_VISIBLE_DEVICES": cvd})
    assert codes(p) == ["CUDA_ERROR_NO_DEVICE", "CUDA_ERROR_NOT_INITIALIZED"]


def test_phys_file_counts_real_devices_under_cuda_visible_devices(tmp_path, holders):
    f = tmp_path / "phys"
    env = {"FAKECUDA_PHYS": str(f), "CUDA_VISIBLE_DEVICES": "2"}
    holders("init", "alloc", "3g", "hold", devices=CVD_DEVICES, env_extra=env)
    p = probe("init", "device", 2, "alloc", "1g", devices=CVD_DEVICES,
              env_extra={"FAKECUDA_PHYS": str(f)})
    assert codes(p) == ["CUDA_SUCCESS", "CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY"]
    got = phys(f)
    assert [got[d][:2] for d in range(3)] == [(UUID0, 0), ("GPU-fa4ecada-0000-0000-0000-000000000001",
                                                           0), (UUID1, 3 * GIB)]



# --- stream-ordered pools that retain memory; devices of pools and streams --------------------

RETAIN = {"FAKECUDA_POOL_RETAIN": "1"}


def pool_fig(fields):
    v = kv(fields)
    return int(v["reserved"]) // MIB, int(v["used"]) // MIB


def test_pool_retains_until_sync_and_reuses_its_cache():
    p = probe("init", "async", "3g", "free", "pool-attr", "info", "alloc", "3g", "async", "1g",
              "pool-attr", "sync", "pool-attr", "info", devices="4g", env_extra=RETAIN)
    out = lines(p)
    assert pool_fig(out[3]) == (3072, 0)              # freed, still reserved
    assert kv(out[4])["free"] == str(GIB)
    assert out[5][1] == "CUDA_ERROR_OUT_OF_MEMORY"    # the device is physically full
    assert out[6][1] == "CUDA_SUCCESS"                # the pool's cache serves this one
    assert pool_fig(out[7]) == (3072, 1024)
    assert out[8][1] == "CUDA_SUCCESS"
    assert pool_fig(out[9]) == (1024, 1024)           # sync: reserved falls to what is used
    assert kv(out[10])["free"] == str(3 * GIB)
    v = kv(out[7])
    assert (v["reserved-high"], v["used-high"]) == (str(3 * GIB), str(3 * GIB))


def test_pool_without_retain_keeps_nothing():
    p = probe("init", "pool-threshold", "max", "async", "3g", "free", "pool-attr", "alloc", "3g",
              devices="4g")
    out = lines(p)
    assert pool_fig(out[4]) == (0, 0) and kv(out[4])["threshold"] == str(2 ** 64 - 1)
    assert out[5][1] == "CUDA_SUCCESS"


def test_pool_release_threshold_and_trim():
    p = probe("init", "pool-threshold", "max", "async", "3g", "async", "512m", "free", "sync",
              "pool-attr", "pool-trim", "1g", "pool-attr", "pool-trim", 0, "pool-attr", "free",
              "pool-threshold", "1g", "pool-attr", "sync", "pool-attr", "pool-threshold", 0,
              "sync", "pool-attr", "info", devices="4g", env_extra=RETAIN)
    out = lines(p)
    assert set(codes(p)) == {"CUDA_SUCCESS"}, p.stdout
    assert pool_fig(out[6]) == (3584, 3072)      # UINT64_MAX: a sync keeps everything
    assert kv(out[6])["threshold"] == str(2 ** 64 - 1)
    assert pool_fig(out[8]) == (3072, 3072)      # trim never goes below what is used
    assert pool_fig(out[10]) == (3072, 3072)
    assert pool_fig(out[13]) == (3072, 0)        # setting the threshold releases nothing
    assert pool_fig(out[15]) == (1024, 0)        # a sync keeps the threshold's worth
    assert pool_fig(out[18]) == (0, 0)
    assert kv(out[19])["free"] == str(4 * GIB)


def test_pool_from_another_device_charges_that_device():
    p = probe("init", "xdev-pool", "3g", 1, "ptr-dev", "info", "device", 1, "info", "alloc",
              "2g", "free", "device", 0, "free", "device", 1, "info", devices="4g,4g")
    out = lines(p)
    assert codes(p)[:3] == ["CUDA_SUCCESS"] * 3 and kv(out[2])["dev"] == "1"
    assert kv(out[3])["free"] == str(4 * GIB)         # device 0 untouched
    assert kv(out[5])["free"] == str(GIB)
    assert out[6][1] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert out[7][1] == "CUDA_SUCCESS"                # freed on the stream it came from
    assert kv(out[11])["free"] == str(4 * GIB)


def test_stream_of_another_device_without_a_current_context():
    p = probe("init", "stream-on", 1, "stream-ctx", "no-ctx", "async", "1m", "async-on-stream",
              "1g", "ptr-dev", "device", 1, "info", "device", 0, "info", "no-ctx", "free",
              "device", 1, "info", devices="4g,4g", env_extra=RETAIN)
    out = lines(p)
    assert kv(out[2])["primary"] == "1"
    assert out[4][1] == "CUDA_ERROR_INVALID_CONTEXT"  # the null stream needs a context
    assert out[5][1] == "CUDA_SUCCESS"                # a real stream does not
    assert kv(out[6])["dev"] == "1"
    assert kv(out[8])["free"] == str(3 * GIB)
    assert kv(out[10])["free"] == str(4 * GIB)
    assert out[12][1] == "CUDA_SUCCESS"               # cuMemFreeAsync on that stream, no context
    assert kv(out[14])["free"] == str(3 * GIB)        # retained by device 1's pool until a sync


def test_device_set_mem_pool_is_what_alloc_async_uses():
    p = probe("init", "async", "1m", "set-mempool", 0, "pool-attr", "async", "1g", "pool-attr",
              "device", 1, "set-mempool", 1, "async", "2m", "pool-attr", "device", 0, "pool-attr",
              devices="4g,4g")
    out = lines(p)
    assert set(codes(p)) == {"CUDA_SUCCESS"}, p.stdout
    assert pool_fig(out[3]) == (0, 0)                 # the probe's own pool, now current
    assert pool_fig(out[5]) == (1024, 1024)
    assert pool_fig(out[9]) == (2, 2)                 # device 1's own pool
    assert pool_fig(out[11]) == (1024, 1024)


def test_phys_counts_what_a_pool_retains(tmp_path, holders):
    f = tmp_path / "phys"
    env = dict(RETAIN, FAKECUDA_PHYS=str(f))
    a = holders("init", "pool-threshold", "max", "async", "3g", "free", "sync", "pool-attr",
                "hold", devices="4g", env_extra=env)
    assert pool_fig(a.out[5]) == (3072, 0)
    assert phys(f)[0][1] == 3 * GIB
    p = probe("init", "alloc", "2g", devices="4g", env_extra=env)
    assert codes(p) == ["CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY"]
    a.kill()
    assert phys(f)[0][1:] == (0, 3 * GIB)


# --- VMM references ------------------------------------------------------------------------

def free_mib(fields):
    return int(kv(fields)["free"]) // MIB


@pytest.mark.parametrize("script,frees", [
    # release while mapped (the CUDA samples' order): the memory stays until the unmap
    (["vmm", "2g", "vmm-release", "info", "vmm-unmap", "info"], [2048, 4096]),
    (["vmm", "2g", "vmm-unmap", "info", "vmm-release", "info"], [2048, 4096]),
    # a retained reference needs its own release, whatever the order
    (["vmm", "2g", "vmm-retain", "vmm-release", "vmm-unmap", "info", "vmm-release", "info"],
     [2048, 4096]),
    (["vmm", "2g", "vmm-retain", "vmm-unmap", "vmm-release", "info", "vmm-release", "info"],
     [2048, 4096]),
    # an imported handle is another value for the same allocation
    (["vmm-create", "2g", "vmm-import", "vmm-map", "vmm-release", "vmm-release", "info",
      "vmm-unmap", "info"], [2048, 4096]),
    (["vmm-create", "2g", "vmm-import", "vmm-release", "info", "vmm-release", "info"],
     [2048, 4096]),
    # two mappings of one handle: gone with the last
    (["vmm", "2g", "vmm-map", "vmm-release", "vmm-unmap", "info", "vmm-unmap", "info"],
     [2048, 4096]),
])
def test_vmm_memory_goes_with_the_last_handle_and_mapping(script, frees):
    p = probe("init", *script, devices="4g")
    assert set(codes(p)) == {"CUDA_SUCCESS"}, p.stdout
    assert [free_mib(l) for l in lines(p) if l[0] == "info"] == frees


def test_vmm_handles_are_checked():
    p = probe("init", "vmm", "2m", "vmm-retain", "vmm-release", "vmm-release", "vmm-map",
              "vmm-unmap", "vmm-unmap", "vmm-create", "4m", "vmm-import", "vmm-release",
              "vmm-map", "vmm-release", "vmm-import", "create", "2m", "free", devices="4g")
    out = lines(p)
    assert out[2] == ["vmm-retain", "CUDA_SUCCESS", "same=1"]
    assert out[5][1] == "CUDA_ERROR_INVALID_VALUE"    # no H left: nothing to map
    assert out[6][1] == "CUDA_SUCCESS"
    assert out[7][1] == "CUDA_ERROR_INVALID_VALUE"    # M empty
    assert out[9] == ["vmm-import", "CUDA_SUCCESS", "new=1"]
    assert out[11][1] == "CUDA_SUCCESS"               # the first handle still maps
    assert out[13][1] == "CUDA_ERROR_INVALID_VALUE"   # H empty: nothing to export
    assert codes(p)[14:] == ["CUDA_SUCCESS"] * 2


def test_vmm_released_handle_value_is_dead_while_memory_lives():
    # Every reference released: the mapping alone keeps the memory, and a
    # retain through it hands out the value it was mapped with, which maps anew.
    p = probe("init", "vmm", "2m", "vmm-retain", "vmm-release", "vmm-release", "info",
              "vmm-retain", "vmm-map", "vmm-unmap", "vmm-unmap", "info", "vmm-release", "info",
              devices="4g")
    out = lines(p)
    assert set(codes(p)) == {"CUDA_SUCCESS"}, p.stdout
    assert free_mib(out[5]) == 4094 and out[6] == ["vmm-retain", "CUDA_SUCCESS", "same=1"]
    assert free_mib(out[10]) == 4094 and free_mib(out[12]) == 4096


def test_phys_counts_released_but_mapped_memory(tmp_path, holders):
    f = tmp_path / "phys"
    env = {"FAKECUDA_PHYS": str(f)}
    holders("init", "vmm", "2g", "vmm-release", "vmm", "1g", "vmm-retain", "vmm-unmap",
            "vmm-release", "hold", devices="4g", env_extra=env)
    assert phys(f)[0][1] == 3 * GIB
    p = probe("init", "vmm", "2g", devices="4g", env_extra=env)
    assert codes(p) == ["CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY"]


# --- cuCtxSetLimit growth -------------------------------------------------------------------

STACK_BYTES_PER_BYTE = 132 * 2048    # every resident thread of every SM has the stack


def test_ctx_limit_growth_is_device_memory_of_the_context():
    p = probe("init", "set-limit", "heap", "1g", "info", "set-limit", "stack", 4096, "info",
              "set-limit", "heap", "5g", "info", "set-limit", "heap", "4m", "info", "ctx-create",
              "set-limit", "heap", "2g", "info", "ctx-destroy", "info", "set-limit", "stack", 0,
              "info", "set-limit", "heap", "3g", "primary-reset", "info", devices="4g")
    out = lines(p)
    heap = GIB - 8 * MIB
    stack = (4096 - 1024) * STACK_BYTES_PER_BYTE
    assert out[1] == ["set-limit", "CUDA_SUCCESS", "value=%d" % GIB]
    assert kv(out[2])["free"] == str(4 * GIB - heap)
    assert kv(out[4])["free"] == str(4 * GIB - heap - stack)
    assert out[5] == ["set-limit", "CUDA_ERROR_OUT_OF_MEMORY", "value=%d" % GIB]  # unchanged
    assert kv(out[6])["free"] == str(4 * GIB - heap - stack)
    assert kv(out[8])["free"] == str(4 * GIB - stack)                  # below the default: 0
    assert kv(out[11])["free"] == str(4 * GIB - stack - (2 * GIB - 8 * MIB))
    assert kv(out[13])["free"] == str(4 * GIB - stack)                 # gone with the context
    assert kv(out[15])["free"] == str(4 * GIB)
    assert out[16][1] == "CUDA_SUCCESS" and kv(out[18])["free"] == str(4 * GIB)


def test_phys_counts_ctx_limit_growth(tmp_path, holders):
    f = tmp_path / "phys"
    env = {"FAKECUDA_PHYS": str(f)}
    holders("init", "set-limit", "heap", "3g", "hold", devices="4g", env_extra=env)
    assert phys(f)[0][1] == 3 * GIB - 8 * MIB
    p = probe("init", "set-limit", "heap", "2g", "alloc", "1g", "alloc", "9m", devices="4g",
              env_extra=env)
    assert codes(p) == ["CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY", "CUDA_SUCCESS",
                        "CUDA_ERROR_OUT_OF_MEMORY"]       # 8 MiB of heap were already there


# --- graphs with memory nodes ---------------------------------------------------------------

def graph_fig(fields):
    v = kv(fields)
    return int(v["reserved"]) // MIB, int(v["used"]) // MIB


def test_captured_allocation_takes_memory_at_launch_and_is_retained():
    p = probe("init", "capture", "1g", "free", "info", "graph-attr", "graph-launch", "graph-attr",
              "info", "graph-launch", "graph-attr", "graph-trim", "graph-attr", "info",
              "graph-destroy", devices="4g")
    out = lines(p)
    assert set(codes(p)) == {"CUDA_SUCCESS"}, p.stdout
    assert kv(out[1]) == {"capturing": "1", "nodes": "2", "bytes": str(GIB), "same-ptr": "1"}
    assert kv(out[2])["free"] == str(4 * GIB)          # capture takes an address, no memory
    assert graph_fig(out[3]) == (0, 0)
    assert graph_fig(out[5]) == (1024, 0)               # freed inside the graph, kept reserved
    assert kv(out[5])["used-high"] == str(GIB)
    assert kv(out[6])["free"] == str(3 * GIB)
    assert graph_fig(out[8]) == (1024, 0)               # a relaunch reuses the reservation
    assert graph_fig(out[10]) == (0, 0)
    assert kv(out[11])["free"] == str(4 * GIB)


def test_graph_allocation_not_freed_by_the_graph_lives_on():
    p = probe("init", "capture", "3g", "graph-launch", "graph-attr", "alloc", "2g",
              "graph-launch", "free", "graph-attr", "graph-trim", "info", "graph-launch",
              "graph-destroy", "info", "free", "graph-trim", "info", "graph-attr", devices="4g")
    out = lines(p)
    assert kv(out[1])["nodes"] == "1"
    assert graph_fig(out[3]) == (3072, 3072)
    assert out[4][1] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert out[5][1] == "CUDA_ERROR_INVALID_VALUE"      # its last allocation still lives
    assert out[6][1] == "CUDA_SUCCESS"                  # cuMemFreeAsync of the graph's pointer
    assert graph_fig(out[7]) == (3072, 0)
    assert kv(out[9])["free"] == str(4 * GIB)           # trimmed
    assert out[10][1] == "CUDA_SUCCESS"
    assert kv(out[12])["free"] == str(GIB)              # the allocation outlives its graph
    assert out[13][1] == "CUDA_SUCCESS"
    assert kv(out[15])["free"] == str(4 * GIB)
    assert kv(out[16])["reserved-high"] == str(3 * GIB)


def test_graph_launch_out_of_memory_changes_nothing():
    p = probe("init", "alloc", "3g", "capture", "2g", "free", "graph-launch", "graph-attr", "info",
              devices="4g")
    out = lines(p)
    assert out[3][1] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert graph_fig(out[4]) == (0, 0) and kv(out[5])["free"] == str(GIB)


def test_phys_counts_graph_memory(tmp_path, holders):
    f = tmp_path / "phys"
    env = {"FAKECUDA_PHYS": str(f)}
    holders("init", "capture", "3g", "free", "graph-launch", "graph-destroy", "hold",
            devices="4g", env_extra=env)
    assert phys(f)[0][1] == 3 * GIB
    p = probe("init", "alloc", "2g", devices="4g", env_extra=env)
    assert codes(p) == ["CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY"]


def test_phys_forked_child_has_its_own_slot(tmp_path, holders):
    f = tmp_path / "phys"
    env = {"FAKECUDA_PHYS": str(f)}
    parent = holders("init", "alloc", "1g", "fork-hold", "2g", "hold", devices="4g",
                     env_extra=env)
    assert parent.out[2][:2] == ["fork-hold", "CUDA_SUCCESS"]
    child = int(kv(parent.out[2])["pid"])
    try:
        assert phys(f)[0][1] == 3 * GIB
        parent.kill()                           # the child must not keep the parent's share
        assert phys(f)[0][1] == 2 * GIB
    finally:
        os.kill(child, signal.SIGKILL)
    deadline = time.monotonic() + scaled(10)
    while phys(f)[0][1] != 0:
        assert time.monotonic() < deadline, phys(f)
        time.sleep(0.01)
    assert phys(f)[0][2] == 3 * GIB


def test_pool_destroy_and_high_mark_reset():
    p = probe("init", "set-mempool", 0, "async", "1g", "free", "async", "512m", "pool-attr",
              "pool-reset-high", "pool-attr", "pool-destroy", "pool-attr", "info", "free",
              "info", "async", "1m", "pool-attr", devices="4g", env_extra=RETAIN)
    out = lines(p)
    assert set(codes(p)) == {"CUDA_SUCCESS"}, p.stdout
    assert (kv(out[5])["reserved-high"], kv(out[5])["used-high"]) == (str(GIB), str(GIB))
    assert kv(out[6])["set-current"] == "CUDA_ERROR_INVALID_VALUE"   # read-only
    assert (kv(out[7])["reserved-high"], kv(out[7])["used-high"]) == (str(GIB), str(512 * MIB))
    # Destroyed: the device's current pool is the default again, the cache
    # goes back, the outstanding 512m stays until freed.
    assert pool_fig(out[9]) == (0, 0)
    assert kv(out[10])["free"] == str(4 * GIB - 512 * MIB)
    assert kv(out[12])["free"] == str(4 * GIB)
    assert pool_fig(out[14]) == (1, 1)
