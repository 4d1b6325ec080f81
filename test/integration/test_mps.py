"""sharing.mps: NVIDIA's config accepted, replicas advertised, Allocate hands out the MPS
client side (issue 25 item 1; research nvidia-device-plugin.md section 5.4)."""

import json
import os
import shutil
import signal
import time

import pytest

from conftest import RESOURCE, ROOT

FAKE = os.path.join(ROOT, "test", "fakemps", "nvidia-cuda-mps-control")

MPS = """version: v1
flags:
  mpsRoot: {root}
sharing:
  mps:
{extra}    resources:
    - name: nvidia.com/gpu
      replicas: {replicas}
"""


def mps_config(root, replicas=4, extra=""):
    return MPS.format(root=root, replicas=replicas, extra=extra)


def fake_control(workdir):
    """The fake control binary copied into a driver root of the test's own."""
    d = os.path.join(workdir, "driver", "usr", "bin")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "nvidia-cuda-mps-control")
    shutil.copy(FAKE, path)
    return path


def mps_plugin(plugin, workdir, replicas=4, extra="", args=(), wait=RESOURCE, **kw):
    root = os.path.join(workdir, "mps")
    return plugin(config=mps_config(root, replicas, extra), wait=wait,
                  args=["--isolation=none", "--mps-control", fake_control(workdir)] + list(args),
                  **kw)


def told(workdir, resource="nvidia.com/gpu"):
    path = os.path.join(workdir, "mps", resource, "log", "fake-record.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f]


def wait_for(cond, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def envs(r):
    return dict(r.envs)


def mounts(r):
    return {m.container_path: (m.host_path, m.read_only) for m in r.mounts}


def test_replicas_advertised_like_time_slicing(plugin, kubelet, workdir):
    p = mps_plugin(plugin, workdir)
    ids = kubelet.endpoint().snapshots[0].ids
    assert sorted(ids) == sorted("%s::%d" % (u, k) for u in p.inventory.uuids for k in range(4))
    p.wait_log('"failRequestsGreaterThanOne": true')  # the config is logged after registering
    assert '"mps": {' in p.log()


def test_allocate_gives_pipe_shm_share_and_pinned_limit(plugin, kubelet, workdir):
    root = os.path.join(workdir, "mps")
    p = mps_plugin(plugin, workdir)
    u = p.inventory.uuids
    r = kubelet.allocate(RESOURCE, [u[1] + "::2"])
    e = envs(r)
    assert e["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu/pipe"
    assert e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    mib = p.inventory.gpus[1].memory_mib
    assert e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=%dM" % (mib // 4)
    m = mounts(r)
    assert m["/mps/nvidia.com/gpu/pipe"] == (os.path.join(root, "nvidia.com/gpu/pipe"), False)
    assert m["/dev/shm"] == (os.path.join(root, "shm"), False)


def test_more_than_one_replica_refused_by_default(plugin, kubelet, workdir):
    import grpc
    p = mps_plugin(plugin, workdir)
    u = p.inventory.uuids
    with pytest.raises(grpc.RpcError) as e:
        kubelet.allocate(RESOURCE, [u[0] + "::0", u[0] + "::1"])
    assert "maximum request size for shared resources is 1; found 2" in e.value.details()


def test_two_replicas_get_twice_the_share_when_allowed(plugin, kubelet, workdir):
    p = mps_plugin(plugin, workdir, extra="    failRequestsGreaterThanOne: false\n")
    u = p.inventory.uuids
    r = kubelet.allocate(RESOURCE, [u[0] + "::0", u[0] + "::1"])
    assert envs(r)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    mib = p.inventory.gpus[0].memory_mib
    assert envs(r)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=%dM" % ((mib << 20) // 4 * 2 >> 20)


@pytest.mark.parametrize("cfg,args,msg", [
    (MPS.replace("  mpsRoot: {root}\n", "  migStrategy: none\n"), [],
     "using MPS requires --mps-root"),
    (MPS, ["--mig-strategy", "mixed"], "using --mig-strategy=mixed with MPS is not supported"),
    (MPS + "  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n", [],
     "sharing.timeSlicing and sharing.mps cannot both be configured"),
], ids=["no-root", "mig-mixed", "both-sharings"])
def test_refused_as_nvidia_refuses(plugin, kubelet, workdir, cfg, args, msg):
    text = cfg.format(root=os.path.join(workdir, "mps"), extra="", replicas=4)
    p = plugin(config=text, args=["--isolation=none"] + args, wait=None)
    assert p.wait_exit(5) != 0
    assert msg in p.log()
    assert kubelet.registrations == []


# ---------------------------------------------------------------- the control daemons


def test_daemon_started_with_its_dirs_and_told_the_shares(plugin, kubelet, workdir):
    p = mps_plugin(plugin, workdir)
    ev = told(workdir)
    start = [e for e in ev if e.get("event") == "start"]
    assert len(start) == 1
    env = start[0]["env"]
    root = os.path.join(workdir, "mps", "nvidia.com", "gpu")
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == os.path.join(root, "pipe")
    assert env["CUDA_MPS_LOG_DIRECTORY"] == os.path.join(root, "log")
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(p.inventory.uuids)
    cmds = [e["command"] for e in ev if "command" in e]
    assert "set_default_active_thread_percentage 25" in cmds
    for i, g in enumerate(p.inventory.gpus):
        assert "set_default_device_pinned_mem_limit %d %dM" % (i, g.memory_mib // 4) in cmds
    assert os.path.exists(os.path.join(root, ".started"))
    assert os.path.isdir(os.path.join(workdir, "mps", "shm"))


def test_killed_daemon_is_started_again(plugin, kubelet, workdir):
    p = mps_plugin(plugin, workdir)
    pidfile = os.path.join(workdir, "mps", "nvidia.com", "gpu", "pipe", "fake.pid")
    with open(pidfile) as f:
        first = int(f.read())
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: len([e for e in told(workdir) if e.get("event") == "start"]) == 2, 10,
             "a second start")
    assert "MPS control daemon of nvidia.com/gpu is gone" in p.log()
    wait_for(lambda: told(workdir)[-1].get("command", "").startswith("set_default") or
             "get_default" in told(workdir)[-1].get("command", ""), 5, "its defaults again")
    assert "set_default_active_thread_percentage 25" in [
        e.get("command") for e in told(workdir)[2:]]


def test_clean_stop_sends_quit(plugin, kubelet, workdir):
    p = mps_plugin(plugin, workdir)
    p.signal(signal.SIGTERM)
    assert p.wait_exit(10) == 0
    assert "quit" in [e.get("command") for e in told(workdir)]
    assert not os.path.exists(os.path.join(workdir, "mps", "nvidia.com", "gpu", ".started"))
    assert "MPS control daemon of nvidia.com/gpu stopped" in p.log()


def test_missing_binary_is_a_clear_error(plugin, kubelet, workdir):
    p = plugin(config=mps_config(os.path.join(workdir, "mps")), wait=None,
               args=["--isolation=none", "--driver-root", os.path.join(workdir, "nodriver")])
    assert p.wait_exit(5) != 0
    assert "nvidia-cuda-mps-control not found under the driver root" in p.log()
    assert kubelet.registrations == []


def test_exclusive_mode_held_elsewhere_is_a_clear_error(plugin, kubelet, workdir):
    open(os.path.join(os.path.dirname(fake_control(workdir)), "refuse"), "w").close()
    p = mps_plugin(plugin, workdir, wait=None)
    assert p.wait_exit(5) != 0
    assert "EXCLUSIVE_PROCESS compute mode" in p.log()
    assert "MPS cannot run (sharing.mps)" in p.log()
    assert kubelet.registrations == []


def test_mig_enabled_gpu_is_a_clear_error(plugin, kubelet, workdir):
    p = mps_plugin(plugin, workdir, wait=None, inventory="8a100-mig-mixed.json",
                   args=["--mig-strategy", "none"])
    assert p.wait_exit(5) != 0
    assert "has MIG enabled" in p.log()


def test_isolation_memory_adds_the_librarys_limit(plugin, kubelet, workdir):
    """With --isolation=memory the pinned limit that MPS asks for is also held by
    libgpupool-cuda (docs/mps.md)."""
    lib = os.path.join(workdir, "libgpupool-cuda.so")
    with open(lib, "wb") as f:
        f.write(b"\x7fELF stand-in\n")
    p = plugin(config=mps_config(os.path.join(workdir, "mps")),
               args=["--mps-control", fake_control(workdir), "--isolation-dir",
                     os.path.join(workdir, "iso"), "--isolation-library", lib])
    u = p.inventory.uuids
    r = kubelet.allocate(RESOURCE, [u[2] + "::1"])
    e = envs(r)
    assert int(e["CUDA_DEVICE_MEMORY_LIMIT_0"]) == (p.inventory.gpus[2].memory_mib << 20) // 4
    assert e["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu/pipe"
    assert os.path.isdir(os.path.join(workdir, "iso", "containers", "ts_%s__1" % u[2]))


def test_reload_quits_and_starts_the_daemon_again(plugin, kubelet, workdir):
    p = mps_plugin(plugin, workdir)
    p.signal(signal.SIGHUP)
    wait_for(lambda: len([e for e in told(workdir) if e.get("event") == "start"]) == 2, 10,
             "a start after the reload")
    cmds = [e.get("command") for e in told(workdir)]
    assert "quit" in cmds
    assert cmds.index("quit") < len(cmds) - 1
    assert p.alive()


def test_without_fail_on_init_error_it_idles_advertising_nothing(plugin, kubelet, workdir):
    p = plugin(config=mps_config(os.path.join(workdir, "mps")), wait=None,
               args=["--isolation=none", "--fail-on-init-error=false", "--driver-root",
                     os.path.join(workdir, "nodriver")])
    p.wait_log("No devices found. Waiting indefinitely.")
    assert "nvidia-cuda-mps-control not found under the driver root" in p.log()
    assert p.alive()
    assert kubelet.registrations == []
