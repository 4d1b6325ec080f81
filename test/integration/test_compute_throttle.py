"""The compute limit and priority of libgpupool-cuda (docs/compute.md), through
real processes over the fake driver's simulated device (FAKECUDA_TIMELINE,
test/fakecuda/README.md): one kernel at a time, first come first served across
processes, launches queued. Each "container" is a set of processes sharing a
region prefix, as a container's processes share CUDA_DEVICE_MEMORY_SHARED_CACHE.

What is asserted comes from the timeline's own accounting (each process's
device time, read by gpupool-fakecuda-timeline), never from the test's clock
alone: a share is the device time a container's processes got over a window,
divided by the window's length on the same clock the device runs on.
"""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time

import pytest

from conftest import BUILD as BUILD_DIR, TIMEOUT_SCALE

LIB = os.path.join(BUILD_DIR, "lib", "libgpupool-cuda.so")
FAKECUDA = os.path.join(BUILD_DIR, "test", "fakecuda")
FAKENVML = os.path.join(BUILD_DIR, "test", "fakenvml")
PROBE = os.path.join(BUILD_DIR, "test", "cuda", "gpupool-launchprobe")
TOOL = os.path.join(FAKECUDA, "gpupool-fakecuda-timeline")
UUID0 = "GPU-11111111-2222-3333-4444-555555555555"
TOLERANCE = 5.0  # percentage points (the goal)

pytestmark = pytest.mark.skipif(
    not os.path.exists(LIB) or not os.path.exists(PROBE) or not os.path.exists(TOOL),
    reason="libgpupool-cuda, the launch probe or the timeline tool is not built")


def _sanitizer_preloads():
    out = subprocess.run(["objdump", "-p", LIB], capture_output=True, text=True).stdout
    libs = []
    for name in ("libasan.so", "libubsan.so"):
        m = re.search(r"NEEDED\s+(%s\.\d+)" % re.escape(name), out)
        if m:
            libs.append(subprocess.run(["gcc", "-print-file-name=" + m.group(1)],
                                       capture_output=True, text=True).stdout.strip())
    return libs


PRELOAD = ":".join((_sanitizer_preloads() if os.path.exists(LIB) else []) + [LIB])


class Gpu:
    """One simulated GPU and the containers that share it."""

    def __init__(self, tmp, kernel_us=500, queue=16):
        self.tmp = str(tmp)
        self.timeline = os.path.join(self.tmp, "timeline")
        self.priority_dir = os.path.join(self.tmp, "priority")
        os.makedirs(self.priority_dir, exist_ok=True)
        inv = {"driver_version": "550.54.15", "cuda_driver_version": 12040, "gpus": [
            {"uuid": UUID0, "name": "NVIDIA H100 80GB HBM3", "minor": 0, "memory_mib": 81559,
             "pci_bus_id": "00000000:07:00.0"}]}
        self.inventory = os.path.join(self.tmp, "inv.json")
        with open(self.inventory, "w") as f:
            json.dump(inv, f)
        self.kernel_us, self.queue = kernel_us, queue
        self.procs = []  # (container, Popen)

    def env(self, container, limit=None, priority=None, preload=True, **extra):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CUDA_", "ALIYUN_COM_GPU_MEM", "FAKECUDA", "GPUPOOL_"))}
        env.update({
            "LD_LIBRARY_PATH": FAKECUDA + ":" + FAKENVML,
            "FAKECUDA_DEVICES": UUID0 + "=80g",
            "FAKE_NVML_INVENTORY": self.inventory,
            "FAKECUDA_TIMELINE": self.timeline,
            "FAKECUDA_KERNEL_US": str(self.kernel_us),
            "FAKECUDA_QUEUE": str(self.queue),
            "CUDA_DEVICE_MEMORY_SHARED_CACHE": os.path.join(self.tmp, "region-" + container),
            "ASAN_OPTIONS": "detect_leaks=1:exitcode=23:verify_asan_link_order=0",
        })
        if preload:
            env["LD_PRELOAD"] = PRELOAD
        if limit is not None:
            env["CUDA_DEVICE_SM_LIMIT"] = str(limit)
        if priority is not None:
            env["CUDA_TASK_PRIORITY"] = str(priority)
            env["GPUPOOL_PRIORITY_DIR"] = self.priority_dir
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def start(self, container, args="", n=1, **env_kw):
        """n processes of container running the probe until killed."""
        for _ in range(n):
            p = subprocess.Popen([PROBE, "--ms", "0"] + shlex.split(args),
                                 env=self.env(container, **env_kw),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.procs.append((container, p))
        for _, p in self.procs:
            if p.poll() is None and not getattr(p, "was_ready", False):
                line = p.stdout.readline()
                assert line.strip() == "ready", (line, p.stderr.read() if p.poll() else "")
                p.was_ready = True

    def run(self, container, args, timeout=30, **env_kw):
        p = subprocess.run([PROBE] + shlex.split(args), env=self.env(container, **env_kw),
                           capture_output=True, text=True, timeout=timeout * TIMEOUT_SCALE)
        assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
        assert "gpupool-cuda:" not in p.stderr, p.stderr  # no complaint: nothing fell back
        return p

    def snapshot(self):
        out = subprocess.run([TOOL, self.timeline], capture_output=True, text=True,
                             check=True).stdout
        now, procs = 0, {}
        for line in out.splitlines():
            f = line.split()
            if f[0] == "now":
                now = int(f[1])
            else:
                procs[int(f[1])] = {k: int(v) for k, v in (x.split("=") for x in f[2:])}
        return now, procs

    def shares(self, warm=0.4, window=1.5):
        """Each container's percent of the device over a window (after a warm-up)."""
        time.sleep(warm * TIMEOUT_SCALE)
        t0, a = self.snapshot()
        time.sleep(window * TIMEOUT_SCALE)
        t1, b = self.snapshot()
        out = {}
        for container, p in self.procs:
            got = b.get(p.pid, {}).get("busy", 0) - a.get(p.pid, {}).get("busy", 0)
            out[container] = out.get(container, 0.0) + 100.0 * got / (t1 - t0)
        return out

    def stop(self):
        errors = []
        for _, p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            err = p.stderr.read()
            if "AddressSanitizer" in err or "runtime error:" in err or "gpupool-cuda:" in err:
                errors.append(err)
            p.stdout.close()
            p.stderr.close()
        self.procs = []
        assert not errors, errors


@pytest.fixture
def gpu(tmp_path):
    g = Gpu(tmp_path)
    yield g
    g.stop()


def _assert_shares(got, want):
    for container, target in want.items():
        assert abs(got[container] - target) <= TOLERANCE, (container, got, want)


@pytest.mark.parametrize("a,b", [(10, 90), (30, 70), (50, 50)])
def test_two_containers_split_the_gpu(gpu, a, b):
    """Two saturating containers with limits a and b get a and b percent of the device.
    a, the smaller, runs two processes, so first come first served alone would give it
    two thirds: every split here holds only because of the limits."""
    gpu.start("a", n=2, limit=a)
    gpu.start("b", limit=b)
    _assert_shares(gpu.shares(), {"a": a, "b": b})


def test_four_containers_at_25(gpu):
    """1, 2, 3 and 4 processes: 10/20/30/40 without limits, 25 each with them."""
    for n, c in enumerate("wxyz", 1):
        gpu.start(c, n=n, limit=25)
    _assert_shares(gpu.shares(), {c: 25 for c in "wxyz"})


def test_a_container_alone_is_held_to_its_limit(gpu):
    """The device is otherwise idle: the limit is a cap, not a share of contention."""
    gpu.start("a", limit=30)
    _assert_shares(gpu.shares(), {"a": 30})


def test_a_limit_named_by_uuid_holds_a_lone_container(gpu):
    """The DRA driver's form: CUDA_DEVICE_SM_LIMIT_<UUID, '-' as '_'> (a claim's
    consumedCapacity.cores), with the claim's region prefix named by UUID too; it wins
    over the ordinal form's 90."""
    key = UUID0.replace("-", "_")
    region = os.path.join(gpu.tmp, "claim-region")
    gpu.start("a", **{"CUDA_DEVICE_SM_LIMIT": 90, "CUDA_DEVICE_SM_LIMIT_" + key: 30,
                      "CUDA_DEVICE_MEMORY_SHARED_CACHE_" + key: region})
    _assert_shares(gpu.shares(), {"a": 30})
    # the share file lives under the claim's region prefix, where its containers meet
    assert os.path.exists("%s.%s.compute" % (region, UUID0))


def test_no_limit_takes_the_whole_device(gpu):
    """Without a limit the library does not slow launches down (the old behaviour)."""
    gpu.start("a")
    assert gpu.shares()["a"] >= 90


def test_grid_size_does_not_change_the_share(gpu):
    """Small grids (64 blocks) against large ones (8192): the controller measures device
    time, not blocks, so the split holds whatever the grids (HAMi-core's 30/70 became 50/50)."""
    gpu.start("a", "--grid 64", limit=30)
    gpu.start("b", "--grid 8192", limit=70)
    _assert_shares(gpu.shares(), {"a": 30, "b": 70})


@pytest.mark.parametrize("via,kind", [("dlsym", "graph"), ("proc", "ex"), ("proc2", "coop")])
def test_every_launch_path_is_held(gpu, via, kind):
    """cuGraphLaunch (a graph of 4 kernels), cuLaunchKernelEx and cuLaunchCooperativeKernel,
    found by dlsym or cuGetProcAddress[_v2], per-thread-stream forms: a lone 30 % holds."""
    gpu.start("a", "--via %s --ptsz --kind %s" % (via, kind), limit=30)
    _assert_shares(gpu.shares(), {"a": 30})


def test_two_processes_per_container(gpu):
    """The limit is the container's: its processes' device time is summed."""
    gpu.start("a", n=2, limit=30)
    gpu.start("b", n=2, limit=70)
    _assert_shares(gpu.shares(), {"a": 30, "b": 70})


def test_sigkill_of_a_throttled_process(gpu):
    """A throttled process killed mid-run: its container's other process keeps the
    container's share, the other container is unaffected, and nothing wedges."""
    gpu.start("a", n=2, limit=30)
    gpu.start("b", limit=70)
    time.sleep(0.3 * TIMEOUT_SCALE)
    victim = [p for c, p in gpu.procs if c == "a"][0]
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    gpu.procs = [(c, p) for c, p in gpu.procs if p is not victim]
    _assert_shares(gpu.shares(), {"a": 30, "b": 70})
    # A new process of the container starts and launches at once.
    gpu.run("a", "--count 20", limit=30)


def test_high_priority_runs_as_if_alone(gpu):
    """A latency-bound high-priority container (launch, synchronise, repeat) next to a
    saturating normal one: its kernels wait behind the other's for under 10 % of their
    own device time, and the other gets the GPU back once it is idle."""
    gpu.queue = 2
    gpu.start("low", priority=1)
    time.sleep(0.2 * TIMEOUT_SCALE)
    _, before = gpu.snapshot()
    p = gpu.run("high", "--count 200 --sync-every 1", priority=0)
    _, after = gpu.snapshot()
    high = [pid for pid in after if pid not in before and pid != gpu.procs[0][1].pid]
    assert len(high) == 1, (before, after, p.stdout)
    rec = after[high[0]]
    assert rec["kernels"] == 200
    assert rec["wait"] <= 0.10 * rec["busy"], rec
    # High is idle: the normal container has the device again.
    time.sleep(0.1 * TIMEOUT_SCALE)
    assert gpu.shares(warm=0, window=0.5)["low"] >= 85


def test_without_priority_the_neighbour_slows_it_down(gpu):
    """The same pair without priorities: the latency-bound container waits behind the
    other's queue (the test above would fail without CUDA_TASK_PRIORITY)."""
    gpu.queue = 2
    gpu.start("low")
    time.sleep(0.2 * TIMEOUT_SCALE)
    _, before = gpu.snapshot()
    gpu.run("high", "--count 100 --sync-every 1")
    _, after = gpu.snapshot()
    rec = [after[pid] for pid in after if pid not in before and pid != gpu.procs[0][1].pid][0]
    assert rec["wait"] > 0.5 * rec["busy"], rec


def _pid_namespace_argv():
    """How to start a process as pid 1 of a new pid namespace, /proc left the host's:
    as root directly, else inside a user namespace; None when neither works."""
    if shutil.which("unshare") is None:
        return None
    for argv in (["unshare", "-pf"], ["unshare", "-Urpf"]):
        if argv == ["unshare", "-pf"] and os.geteuid() != 0:
            continue
        if subprocess.run(argv + ["true"], capture_output=True).returncode == 0:
            return argv
    return None


PIDNS = _pid_namespace_argv()


@pytest.mark.skipif(PIDNS is None, reason="needs unshare --pid (root, or user namespaces)")
def test_a_pid_namespace_is_reported_not_silently_unthrottled(gpu):
    """In a pid namespace NVML's pids are the host's (the fake records the host's too):
    the sampler never finds its own pid, and says so on stderr instead of silently
    leaving the container unthrottled (docs/compute.md, what a real driver gives)."""
    # LeakSanitizer cannot stop the world as pid 1 of a user namespace (a sanitized
    # build): leaks are checked by every other test.
    env = gpu.env("a", limit=30,
                  ASAN_OPTIONS="detect_leaks=0:exitcode=23:verify_asan_link_order=0")
    p = subprocess.run(PIDNS + [PROBE, "--ms", "1600"],
                       env=env, capture_output=True, text=True,
                       timeout=30 * TIMEOUT_SCALE)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert ("none of pid 1 (in a pid namespace NVML's pids are the host's, and the node agent's "
            "pid map in the region directory does not name it)") in p.stderr, p.stderr


@pytest.mark.skipif(PIDNS is None, reason="needs unshare --pid (root, or user namespaces)")
def test_a_pid_namespace_is_held_through_the_agents_pid_map(gpu):
    """With the node agent's pid map in the region directory (docs/isolation.md: host pid ->
    pid in the container, as observe/pid_map.c writes it), a process that is pid 1 of its own
    namespace finds its host pid there and is held to its share like any other."""
    env = gpu.env("a", limit=30,
                  ASAN_OPTIONS="detect_leaks=0:exitcode=23:verify_asan_link_order=0")
    # --kill-child: the probe (pid 1 there) dies with unshare, and its pipes close.
    p = subprocess.Popen(PIDNS + ["--kill-child", PROBE, "--ms", "0"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        with open("/proc/%d/task/%d/children" % (p.pid, p.pid)) as f:
            host = int(f.read().split()[0])
        with open(os.path.join(gpu.tmp, "pids"), "w") as f:   # beside region-a.<uuid>
            f.write("gpupool-pids 1\n%d 1\n" % host)
        time.sleep(1.0 * TIMEOUT_SCALE)   # the sampler looks at the map within ~100 ms
        t0, a = gpu.snapshot()
        time.sleep(1.5 * TIMEOUT_SCALE)
        t1, b = gpu.snapshot()
        share = 100.0 * (b[host]["busy"] - a[host]["busy"]) / (t1 - t0)
        assert abs(share - 30) <= TOLERANCE, share
    finally:
        p.kill()
        p.wait()
        err = p.stderr.read()
        p.stdout.close()
        p.stderr.close()
    assert "gpupool-cuda:" not in err, err


def test_a_limit_that_is_not_understood_fails_closed(gpu):
    """CUDA_DEVICE_SM_LIMIT=30% is refused like a bad memory limit: CUDA_ERROR_NOT_PERMITTED
    and one line on stderr, never a silent run without the limit."""
    p = subprocess.run([PROBE, "--count", "1"], env=gpu.env("a", limit="30%"),
                       capture_output=True, text=True, timeout=30 * TIMEOUT_SCALE)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "setup: 800" in p.stderr, p.stderr
    assert 'CUDA_DEVICE_SM_LIMIT="30%" is not a percent 0..100' in p.stderr, p.stderr


def test_capture_does_not_wait_at_the_gate(gpu):
    """A container far over its share (200 kernels of 0.5 ms queued at once, then
    synchronised, at 5 %: about 2 s of waiting owed) captures 200 launches into a graph at
    once: captured launches run nothing, and frameworks capture thousands at start-up. The
    graph's launch is what is gated."""
    gpu.queue = 200
    p = gpu.run("a", "--count 200 --then-capture 200", limit=5)
    ms = float(p.stdout.split("capture ms=")[1].split()[0])
    assert ms < 500, p.stdout
