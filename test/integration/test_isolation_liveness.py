"""libgpupool-cuda's shared region through the driver ABI: whose charge is
alive (docs/isolation.md, "Accounting that cannot over-commit"; issue 23,
D1 D5 D7 D8 D9 D11).

The probe (test/cuda/cudaprobe.c) runs over the fake libcuda.so.1 with the
library preloaded, as in test_isolation.py. The fake also records the memory
every live process physically holds (FAKECUDA_PHYS); every test ends by
checking that the peak of that never went past the limit. Restarted
containers are new pid namespaces (`unshare --pid --fork --mount-proc`,
which needs root).
"""

import os
import re
import shlex
import shutil
import signal
import struct
import subprocess
import time

import pytest

from conftest import scaled

from test_isolation import FAKECUDA, LIB, PRELOAD, PROBE, UUID0, GiB

PHYS_TOOL = os.path.join(FAKECUDA, "gpupool-fakecuda-phys")

pytestmark = pytest.mark.skipif(
    not all(os.path.exists(p) for p in (LIB, PROBE, PHYS_TOOL)),
    reason="libgpupool-cuda, the probe or gpupool-fakecuda-phys is not built")


def can_unshare():
    if shutil.which("unshare") is None:
        return False
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                       capture_output=True, timeout=scaled(10))
    return r.returncode == 0


needs_pidns = pytest.mark.skipif(os.geteuid() != 0 or not can_unshare(),
                                 reason="needs root and unshare --pid (new pid namespaces)")


class Container:
    """One container's view: a region directory, a limit, the fake's
    physical-use file. Processes started by run/spawn preload the library;
    with pidns=True each runs as pid 1 of a new pid namespace."""

    def __init__(self, tmp):
        self.tmp = str(tmp)
        self.prefix = os.path.join(self.tmp, "region")
        self.phys = os.path.join(self.tmp, "phys")
        self.started = []

    def env(self, limit="4g", preload=True):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CUDA_DEVICE_MEMORY", "ALIYUN_COM_GPU_MEM", "FAKECUDA"))}
        env.update({"LD_LIBRARY_PATH": FAKECUDA, "FAKECUDA_DEVICES": "%s=16g" % UUID0,
                    "FAKECUDA_PHYS": self.phys, "CUDA_DEVICE_MEMORY_SHARED_CACHE": self.prefix,
                    "CUDA_DEVICE_MEMORY_LIMIT": limit})
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:exitcode=23:verify_asan_link_order=0")
        if preload:
            env["LD_PRELOAD"] = PRELOAD
        return env

    def argv(self, script, pidns=False):
        argv = [PROBE] + shlex.split(script)
        if pidns:
            # unshare itself runs without the preload; env puts it back for the probe.
            argv = ["unshare", "--pid", "--fork", "--mount-proc", "env",
                    "LD_PRELOAD=" + PRELOAD] + argv
        return argv

    def run(self, script, pidns=False, limit="4g"):
        p = subprocess.run(self.argv(script, pidns), env=self.env(limit, preload=not pidns),
                           capture_output=True, text=True, timeout=scaled(60))
        assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
        assert "ERROR: AddressSanitizer" not in p.stderr, p.stderr
        assert "runtime error:" not in p.stderr, p.stderr
        return [l.split() for l in p.stdout.splitlines() if l.strip()]

    def spawn(self, script, pidns=False, limit="4g", until="holding"):
        """A process left running at `until` (the probe's hold or zombie)."""
        p = subprocess.Popen(self.argv(script, pidns), env=self.env(limit, preload=not pidns),
                             stdout=subprocess.PIPE, text=True)
        self.started.append(p)
        out = []
        while True:
            line = p.stdout.readline()
            assert line, ("ended before %r" % until, out)
            out.append(line.split())
            if line.strip() == until:
                return p, out

    def kill(self, p, pidns=False):
        """SIGKILL of the probe; with pidns, of pid 1 inside (unshare's
        child), which takes the whole namespace with it."""
        target = p.pid
        if pidns:
            with open("/proc/%d/task/%d/children" % (p.pid, p.pid)) as f:
                target = int(f.read().split()[0])
        os.kill(target, signal.SIGKILL)
        p.wait(timeout=scaled(10))

    def peak(self):
        """The highest physical use the fake ever saw on the GPU."""
        r = subprocess.run([PHYS_TOOL, self.phys], capture_output=True, text=True,
                           timeout=scaled(10))
        assert r.returncode == 0, (r.stdout, r.stderr)
        m = re.search(r"uuid=%s current=(\d+) peak=(\d+)" % UUID0, r.stdout)
        assert m, r.stdout
        return int(m.group(2))

    def close(self):
        for p in self.started:
            if p.poll() is None:
                for child in children(p.pid):
                    os.kill(child, signal.SIGKILL)
                p.kill()
            p.wait()
            p.stdout.close()


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


@pytest.fixture
def box(tmp_path):
    c = Container(tmp_path)
    yield c
    c.close()


def codes(lines):
    return [l[1] for l in lines if len(l) > 1]


def value(lines, cmd, key, nth=0):
    found = [l for l in lines if l[0] == cmd]
    for tok in found[nth][2:]:
        if tok.startswith(key + "="):
            return int(tok.split("=", 1)[1])
    raise AssertionError((cmd, key, lines))


def state_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


# ---- D1: a restarted container starts at zero -----------------------------------

@needs_pidns
@pytest.mark.parametrize("end", ["exit", "sigkill"])
def test_restarted_container_starts_at_zero(box, end):
    """Pid 1 of one pid namespace takes 3 of 4 GiB and exits (frameworks
    never free at exit) or is SIGKILLed; pid 1 of a new namespace on the same
    region sees all 4 GiB free at its first cuMemGetInfo and gets them."""
    if end == "exit":
        assert codes(box.run("init alloc 3g", pidns=True)) == ["CUDA_SUCCESS"] * 2
    else:
        p, out = box.spawn("init alloc 3g hold", pidns=True)
        assert codes(out) == ["CUDA_SUCCESS"] * 2
        box.kill(p, pidns=True)
    out = box.run("init info alloc 4g", pidns=True)
    assert codes(out) == ["CUDA_SUCCESS"] * 3, out
    assert value(out, "info", "free") == 4 * GiB
    # and a process of the host's namespace too
    out = box.run("init info alloc 4g")
    assert codes(out) == ["CUDA_SUCCESS"] * 3, out
    assert box.peak() <= 4 * GiB


# ---- D5: a zombie leader keeps its charge ------------------------------------------

def test_zombie_leader_keeps_its_charge(box):
    """The main thread exits while a worker holds 3 GiB: the process is alive
    and keeps its share; another process gets only the last GiB."""
    p, out = box.spawn("init zombie 3g")
    assert ["zombie", "CUDA_SUCCESS"] in out
    deadline = time.monotonic() + scaled(10)
    while state_of(p.pid) != "Z":
        assert time.monotonic() < deadline, "the main thread did not exit"
        time.sleep(0.01)
    out = box.run("init alloc 2g sleep 300 info alloc 1g alloc 1m")
    assert codes(out) == ["CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY", "CUDA_SUCCESS",
                          "CUDA_SUCCESS", "CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY"], out
    assert value(out, "info", "free") == GiB
    box.kill(p)
    out = box.run("init alloc 4g")
    assert codes(out) == ["CUDA_SUCCESS"] * 2, out
    assert box.peak() <= 4 * GiB


# ---- D8: exec gives back the old image's charge ------------------------------------

def test_exec_gives_back_the_old_images_charge(box):
    """A process takes 3 of 4 GiB and execs itself: the new image (same pid)
    sees 4 GiB free and gets them."""
    out = box.run("init alloc 3g exec-self init info alloc 4g")
    assert codes(out) == ["CUDA_SUCCESS"] * 5, out
    assert value(out, "info", "free") == 4 * GiB
    assert box.peak() <= 4 * GiB


# ---- D9: a dead process's slot with the caller's own pid ---------------------------

@needs_pidns
def test_dead_slot_with_the_callers_pid_is_reaped(box):
    """In one pid namespace, pid 2 takes 3 GiB and exits; the next process is
    given pid 2 again (ns_last_pid) and gets all 4 GiB."""
    probe = "env LD_PRELOAD=%s %s" % (shlex.quote(PRELOAD), PROBE)   # not into sh (pid 1)
    script = ("{probe} init alloc 3g && echo 1 > /proc/sys/kernel/ns_last_pid && "
              "sh -c 'echo pid $$; exec {probe} init info alloc 4g'").format(probe=probe)
    p = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script],
                       env=box.env(preload=False), capture_output=True, text=True,
                       timeout=scaled(60))
    assert p.returncode == 0, (p.stdout, p.stderr)
    out = [l.split() for l in p.stdout.splitlines()]
    assert out[2] == ["pid", "2"], out
    assert codes(out[:2] + out[3:]) == ["CUDA_SUCCESS"] * 5, out
    assert value(out, "info", "free") == 4 * GiB
    assert box.peak() <= 4 * GiB


# ---- D7: a killed process's share is back promptly ---------------------------------

def test_killed_process_share_is_back_within_a_second(box):
    """A running process reports 1 GiB free while another holds 3; the holder
    is SIGKILLed: the same process's cuMemGetInfo shows 4 GiB within 1 s, and
    an allocation that needs the memory gets it at once."""
    holder, _ = box.spawn("init alloc 3g hold")
    script = "init info " + "sleep 100 info " * 12 + "alloc 4g"
    watcher = subprocess.Popen(box.argv(script), env=box.env(), stdout=subprocess.PIPE, text=True)
    box.started.append(watcher)
    first = watcher.stdout.readline().split(), watcher.stdout.readline().split()
    assert first[1][:2] == ["info", "CUDA_SUCCESS"] and first[1][2] == "free=%d" % GiB, first
    box.kill(holder)
    killed = time.monotonic()
    seen = None
    for line in watcher.stdout:
        l = line.split()
        if l[0] == "info" and l[2] == "free=%d" % (4 * GiB) and seen is None:
            seen = time.monotonic() - killed
        last = l
    assert watcher.wait(timeout=scaled(30)) == 0
    assert seen is not None and seen <= scaled(1.0), seen
    assert last == ["alloc", "CUDA_SUCCESS"]
    # A charge that needs a just-killed process's memory does not wait for a report.
    holder, _ = box.spawn("init alloc 3g hold")
    charger = subprocess.Popen(box.argv("init info sleep 200 alloc 4g"), env=box.env(),
                               stdout=subprocess.PIPE, text=True)
    box.started.append(charger)
    first = charger.stdout.readline().split(), charger.stdout.readline().split()
    assert first[1][2] == "free=%d" % GiB, first
    box.kill(holder)
    rest = [l.split() for l in charger.stdout]
    assert charger.wait(timeout=scaled(30)) == 0
    assert rest == [["sleep", "CUDA_SUCCESS"], ["alloc", "CUDA_SUCCESS"]], rest
    assert box.peak() <= 4 * GiB


# ---- D11: a process is held to min(region limit, its own) ---------------------------

def test_own_limit_is_the_smaller(box):
    """The region is made by a process limited to 8 GiB; a process limited to
    4 GiB sees and gets only 4; one limited to 12 is held to the region's 8."""
    holder, out = box.spawn("init alloc 1g hold", limit="8g")
    out = box.run("init info total alloc 3g alloc 1m", limit="4g")
    assert codes(out) == ["CUDA_SUCCESS"] * 4 + ["CUDA_ERROR_OUT_OF_MEMORY"], out
    assert value(out, "info", "total") == 4 * GiB
    assert value(out, "info", "free") == 3 * GiB
    assert value(out, "total", "bytes") == 4 * GiB
    out = box.run("init info alloc 7g alloc 1m", limit="12g")
    assert codes(out) == ["CUDA_SUCCESS"] * 3 + ["CUDA_ERROR_OUT_OF_MEMORY"], out
    assert value(out, "info", "total") == 8 * GiB
    box.kill(holder)
    assert box.peak() <= 8 * GiB


# ---- layout versions ----------------------------------------------------------------

def test_older_region_version_is_made_anew(box):
    """A version 1 region (left by a container instance that is gone: the
    library cannot change under running processes) holding 3 GiB with a
    16 GiB limit is made anew: the process sees its own 4 GiB, all free."""
    v1 = bytearray(32904)
    struct.pack_into("<IIIIqII", v1, 0, 0x52435047, 1, 32904, 1024, 16 * GiB, 1, 0)
    struct.pack_into("<q", v1, 72, 3 * GiB)
    with open("%s.%s" % (box.prefix, UUID0), "wb") as f:
        f.write(v1)
    out = box.run("init info alloc 4g")
    assert codes(out) == ["CUDA_SUCCESS"] * 3, out
    assert value(out, "info", "total") == 4 * GiB
    assert value(out, "info", "free") == 4 * GiB
    assert box.peak() <= 4 * GiB
