"""Memory limits inside containers (issue 15 item 2): what the device plugin injects.

The plugin installs the libgpupool-cuda.so it is given (any file: it is copied as it is) and
ld.so.preload into --isolation-dir, gives each gpu-mem container the contract's three mounts,
CUDA_DEVICE_MEMORY_LIMIT_<i> per GPU and CUDA_DEVICE_MEMORY_SHARED_CACHE, a region directory
<isolation-dir>/containers/<pod-uid>_<n>, and removes a pod's directories once the pod is gone
from the API. Time-sliced replicas get the same with sharing.timeSlicing.memoryLimit.
Pieces: the real plugin (fake NVML), kubelet_sim, the gpu-mem kubelet model, fake_apiserver.
"""

import os
import stat
import time

import grpc
import pytest

from conftest import RESOURCE as GPU_RESOURCE, scaled
from test_gpumem import (FAKE_LIBRARY, RESOURCE, api, create, gpu_uuids,  # noqa: F401
                         gpumem, make_pod, envs)
from gpumem_kubelet import AdmissionError

GIB = 1 << 30
LIB_IN_CONTAINER = "/usr/local/gpupool/libgpupool-cuda.so"
PRELOAD_IN_CONTAINER = "/etc/ld.so.preload"
REGION_IN_CONTAINER = "/run/gpupool-cuda"
PRIORITY_IN_CONTAINER = "/run/gpupool-priority"


def iso_dir(workdir):
    return os.path.join(workdir, "state", "isolation")   # the default: <state-dir>/isolation


def mounts(r):
    return {m.container_path: (m.host_path, m.read_only) for m in r.mounts}


def limits(r):
    e = envs(r)
    return [int(e["CUDA_DEVICE_MEMORY_LIMIT_%d" % i])
            for i in range(len(e)) if "CUDA_DEVICE_MEMORY_LIMIT_%d" % i in e]


def wait_gone(path, timeout=10):
    deadline = time.monotonic() + scaled(timeout)
    while os.path.lexists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not os.path.lexists(path)


def uid_of(api, name, ns="default"):
    return api.store.get("pods", ns, name)["metadata"]["uid"]


# ---------------------------------------------------------------- start: installed files

def test_installed_files_contents_and_modes(gpumem, workdir):
    os.umask(0o077)   # the plugin must not depend on a friendly umask
    try:
        gpumem()
    finally:
        os.umask(0o022)
    d = iso_dir(workdir)
    lib = os.path.join(d, "libgpupool-cuda.so")
    with open(lib, "rb") as f:
        assert f.read() == FAKE_LIBRARY
    assert stat.S_IMODE(os.stat(lib).st_mode) == 0o755
    with open(os.path.join(d, "ld.so.preload")) as f:
        assert f.read() == LIB_IN_CONTAINER + "\n"
    assert stat.S_IMODE(os.stat(os.path.join(d, "ld.so.preload")).st_mode) == 0o644
    assert os.path.isdir(os.path.join(d, "containers"))
    # The node's priority directory: every container user writes its busy files there.
    assert stat.S_IMODE(os.stat(os.path.join(d, "priority")).st_mode) == 0o777
    assert not [n for n in os.listdir(d) if n.endswith(".tmp")]


def test_identical_library_is_left_alone_a_changed_one_replaced(gpumem, workdir):
    p, _ = gpumem()
    lib = os.path.join(iso_dir(workdir), "libgpupool-cuda.so")
    preload = os.path.join(iso_dir(workdir), "ld.so.preload")
    before = (os.stat(lib).st_ino, os.stat(preload).st_ino)
    p.stop()
    p.close()
    p, _ = gpumem()
    assert (os.stat(lib).st_ino, os.stat(preload).st_ino) == before   # running containers keep it
    p.stop()
    p.close()
    with open(os.path.join(workdir, "libgpupool-cuda.so"), "ab") as f:
        f.write(b"v2\n")
    gpumem()
    assert os.stat(lib).st_ino != before[0]
    with open(lib, "rb") as f:
        assert f.read() == FAKE_LIBRARY + b"v2\n"
    assert os.stat(preload).st_ino == before[1]


def test_missing_library_fails_start_clearly(gpumem, workdir):
    missing = os.path.join(workdir, "nope", "libgpupool-cuda.so")
    p, _ = gpumem(env={"GP_ISOLATION_LIBRARY": missing}, wait=False)
    assert p.wait_exit(10) == 1
    log = p.log()
    assert "Cannot enforce GPU-memory limits (--isolation=memory)" in log
    assert "--isolation-library (GP_ISOLATION_LIBRARY, flags.isolationLibrary)" in log
    assert missing in log and "No such file or directory" in log
    assert "--isolation=none" in log


def test_bad_isolation_value_names_flag_env_and_key(gpumem):
    p, _ = gpumem(env={"GP_ISOLATION": "hard"}, wait=False)
    assert p.wait_exit(10) == 1
    assert "GP_ISOLATION" in p.log() and "hard" in p.log()


def test_relative_isolation_dir_is_refused(gpumem):
    p, _ = gpumem(args=["--isolation-dir=rel/dir"], wait=False)
    assert p.wait_exit(10) == 1
    assert "--isolation-dir (GP_ISOLATION_DIR, flags.isolationDir)" in p.log()


# ---------------------------------------------------------------- Allocate

def test_single_gpu_container_gets_mounts_env_and_directory(gpumem, api, workdir):
    p, k = gpumem()
    create(api, make_pod("one", 4, idx=2))
    (_, _, r), = k.admit("default", "one")
    d = iso_dir(workdir)
    region = os.path.join(d, "containers", uid_of(api, "one") + "_0")
    assert mounts(r)[LIB_IN_CONTAINER] == (os.path.join(d, "libgpupool-cuda.so"), True)
    assert mounts(r)[PRELOAD_IN_CONTAINER] == (os.path.join(d, "ld.so.preload"), True)
    assert mounts(r)[REGION_IN_CONTAINER] == (region, False)
    assert limits(r) == [4 * GIB]
    assert envs(r)["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/run/gpupool-cuda/region"
    assert envs(r)["ALIYUN_COM_GPU_MEM_CONTAINER"] == "4"   # gpushare's variables stay
    assert os.path.isdir(region) and not os.path.islink(region)
    assert stat.S_IMODE(os.stat(region).st_mode) == 0o777


def priority_pod(name, value, idx=0, units=2):
    pod = make_pod(name, units, idx=idx)
    if value is not None:
        pod["metadata"]["annotations"]["gpupool.io/priority"] = value
    return pod


def test_every_container_shares_the_priority_directory_high_ones_are_marked(gpumem, api, workdir):
    p, k = gpumem()
    create(api, priority_pod("hi", "high"), priority_pod("plain", None, idx=1),
           priority_pod("norm", "normal", idx=2))
    got = {}
    for name in ("hi", "plain", "norm"):
        (_, _, r), = k.admit("default", name)
        got[name] = r
    host = os.path.join(iso_dir(workdir), "priority")
    for name, r in got.items():
        assert mounts(r)[PRIORITY_IN_CONTAINER] == (host, False), name   # read-write, one per node
        assert envs(r)["GPUPOOL_PRIORITY_DIR"] == PRIORITY_IN_CONTAINER, name
    assert envs(got["hi"])["CUDA_TASK_PRIORITY"] == "0"
    assert "CUDA_TASK_PRIORITY" not in envs(got["plain"])   # normal is the library's default
    assert "CUDA_TASK_PRIORITY" not in envs(got["norm"])


def test_every_container_of_a_high_pod_is_high(gpumem, api):
    p, k = gpumem()
    pod = make_pod("mch", containers=[("a", 2), ("b", 3)], init_containers=[("i", 1)], idx=3)
    pod["metadata"]["annotations"]["gpupool.io/priority"] = "high"
    create(api, pod)
    res = k.admit("default", "mch")
    assert {name: envs(r).get("CUDA_TASK_PRIORITY") for name, _, r in res} == \
        {"i": "0", "a": "0", "b": "0"}


def test_unknown_priority_fails_the_allocate_clearly(gpumem, api):
    p, k = gpumem()
    create(api, priority_pod("typo", "hihg"))
    with pytest.raises(AdmissionError) as e:
        k.admit("default", "typo")
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert 'gpupool.io/priority must be "high" or "normal"' in e.value.details
    create(api, priority_pod("after", "high", idx=1))   # and the plugin keeps serving
    (_, _, r), = k.admit("default", "after")
    assert envs(r)["CUDA_TASK_PRIORITY"] == "0"


def test_mib_unit_limit_is_exact_bytes(gpumem, api):
    p, k = gpumem(inventory="2gpu-16gb.json", args=["--memory-unit=MiB"])
    create(api, make_pod("mib", 1500, idx=1))
    (_, _, r), = k.admit("default", "mib", timeout=20)
    assert limits(r) == [1500 << 20]


def test_multi_gpu_pod_splits_the_container_units(gpumem, api):
    p, k = gpumem()
    create(api, make_pod("two", 7, idx="0,1"))
    (_, _, r), = k.admit("default", "two")
    assert limits(r) == [7 * GIB // 2, 7 * GIB // 2]   # floor of 7 GiB / 2, per GPU in order


def test_multi_container_pod_ordinals(gpumem, api, workdir):
    p, k = gpumem()
    create(api, make_pod("mc", containers=[("a", 2), ("b", 3)], init_containers=[("i", 1)],
                         idx=3))
    res = k.admit("default", "mc")
    uid = uid_of(api, "mc")
    got = {name: (mounts(r)[REGION_IN_CONTAINER][0], limits(r)) for name, _, r in res}
    base = os.path.join(iso_dir(workdir), "containers", uid)
    assert got == {"i": (base + "_0", [1 * GIB]), "a": (base + "_1", [2 * GIB]),
                   "b": (base + "_2", [3 * GIB])}
    for n in range(3):
        assert os.path.isdir("%s_%d" % (base, n))


def test_repeated_allocate_gets_the_same_directory(gpumem, api, kubelet, workdir):
    p, k = gpumem()
    create(api, make_pod("r1", containers=[("a", 2), ("b", 3)], idx=0))
    first = {name: mounts(r)[REGION_IN_CONTAINER][0] for name, _, r in k.admit("default", "r1")}
    order = k.restart(keep_checkpoint=False)
    kubelet.wait_registered(RESOURCE, count=2)
    assert order == [("default", "r1")]
    again = {name: mounts(r)[REGION_IN_CONTAINER][0] for name, _, r in k.admit("default", "r1")}
    assert again == first
    assert first["a"] != first["b"]
    assert "repeated by the kubelet" in p.log()


def test_isolation_none_injects_nothing(gpumem, api, workdir):
    p, k = gpumem(args=["--isolation=none"], env={"GP_ISOLATION_LIBRARY": "/does/not/exist"})
    create(api, make_pod("plain", 4, idx=0))
    (_, _, r), = k.admit("default", "plain")
    assert not [m for m in r.mounts if m.container_path in
                (LIB_IN_CONTAINER, PRELOAD_IN_CONTAINER, REGION_IN_CONTAINER)]
    assert not [key for key in envs(r) if key.startswith("CUDA_DEVICE_MEMORY")]
    assert PRIORITY_IN_CONTAINER not in mounts(r)
    assert "GPUPOOL_PRIORITY_DIR" not in envs(r) and "CUDA_TASK_PRIORITY" not in envs(r)
    assert not os.path.exists(iso_dir(workdir))


def test_uncreatable_directory_fails_the_allocate_and_the_plugin_keeps_serving(gpumem, api,
                                                                               workdir):
    p, k = gpumem()
    containers = os.path.join(iso_dir(workdir), "containers")
    os.rmdir(containers)
    with open(containers, "w") as f:   # a file where the directory should be: mkdir fails
        f.write("in the way\n")
    create(api, make_pod("nodir", 2, idx=0))
    with pytest.raises(AdmissionError) as e:
        k.admit("default", "nodir")
    assert e.value.code == grpc.StatusCode.INTERNAL
    msg = e.value.details
    assert "no GPU-memory limit can be given to this container" in msg
    assert containers in msg
    os.unlink(containers)
    os.mkdir(containers)
    create(api, make_pod("after", 2, idx=1))
    (_, _, r), = k.admit("default", "after")
    assert limits(r) == [2 * GIB]


# ---------------------------------------------------------------- removal

def test_directories_removed_after_the_pod_is_deleted(gpumem, api, workdir):
    p, k = gpumem()
    create(api, make_pod("gone", containers=[("a", 1), ("b", 1)], idx=0),
           make_pod("stays", 1, idx=1))
    k.admit("default", "gone")
    k.admit("default", "stays")
    base = os.path.join(iso_dir(workdir), "containers")
    gone = [os.path.join(base, "%s_%d" % (uid_of(api, "gone"), n)) for n in range(2)]
    stays = os.path.join(base, uid_of(api, "stays") + "_0")
    with open(os.path.join(gone[0], "region.GPU-x"), "w") as f:
        f.write("region")
    os.mkdir(os.path.join(gone[1], "sub"))
    unrelated = os.path.join(base, "not-a-pod-key")
    os.mkdir(unrelated)
    api.store.delete("pods", "default", "gone")
    assert wait_gone(gone[0]) and wait_gone(gone[1]), p.log()
    assert os.path.isdir(stays) and os.path.isdir(unrelated)


def test_removal_never_follows_a_symlink(gpumem, api, workdir):
    p, k = gpumem()
    outside = os.path.join(workdir, "outside")
    os.makedirs(os.path.join(outside, "deep"))
    with open(os.path.join(outside, "deep", "precious"), "w") as f:
        f.write("keep me")
    create(api, make_pod("evil", 1, idx=0))
    k.admit("default", "evil")
    region = os.path.join(iso_dir(workdir), "containers", uid_of(api, "evil") + "_0")
    os.symlink(outside, os.path.join(region, "escape"))          # what a container can plant
    os.mkdir(os.path.join(region, "nested"))
    os.symlink(os.path.join(outside, "deep"), os.path.join(region, "nested", "link"))
    os.symlink(os.path.join(outside, "deep", "precious"), os.path.join(region, "file-link"))
    api.store.delete("pods", "default", "evil")
    assert wait_gone(region), p.log()
    with open(os.path.join(outside, "deep", "precious")) as f:
        assert f.read() == "keep me"


def test_directories_of_pods_gone_while_the_plugin_was_down_are_removed_at_start(gpumem, api,
                                                                                 workdir):
    base = os.path.join(iso_dir(workdir), "containers")
    os.makedirs(os.path.join(base, "0f0e0d0c-dead-beef-0000-000000000000_0", "x"))
    create(api, make_pod("alive", 1, idx=0, uid="11111111-2222-3333-4444-555555555555"))
    os.makedirs(os.path.join(base, "11111111-2222-3333-4444-555555555555_0"))
    p, k = gpumem()
    assert wait_gone(os.path.join(base, "0f0e0d0c-dead-beef-0000-000000000000_0")), p.log()
    time.sleep(scaled(0.5))
    assert os.path.isdir(os.path.join(base, "11111111-2222-3333-4444-555555555555_0"))


# ---------------------------------------------------------------- time-slicing opt-in

TS = """version: v1
sharing:
  timeSlicing:
{extra}    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""


def ts_plugin(plugin, workdir, extra, args=(), wait=GPU_RESOURCE):
    lib = os.path.join(workdir, "libgpupool-cuda.so")
    with open(lib, "wb") as f:
        f.write(FAKE_LIBRARY)
    return plugin("4gpu.json", config=TS.format(extra=extra), wait=wait,
                  args=["--isolation-dir", os.path.join(workdir, "iso"),
                        "--isolation-library", lib] + list(args))


def test_time_slicing_memory_limit_opt_in(plugin, kubelet, workdir):
    p = ts_plugin(plugin, workdir, "    memoryLimit: true\n")
    g = p.inventory.gpus[1]
    u = p.inventory.uuids
    r = kubelet.allocate(GPU_RESOURCE, [u[1] + "::2", u[1] + "::3", u[3] + "::0"])
    assert envs(r)["NVIDIA_VISIBLE_DEVICES"] == u[1] + "," + u[3]
    mem3 = p.inventory.gpus[3].memory_mib << 20
    assert limits(r) == [(g.memory_mib << 20) // 4 * 2, mem3 // 4]
    region = os.path.join(workdir, "iso", "containers", "ts_%s__2" % u[1])
    assert mounts(r)[REGION_IN_CONTAINER] == (region, False)
    assert mounts(r)[LIB_IN_CONTAINER] == (os.path.join(workdir, "iso", "libgpupool-cuda.so"),
                                           True)
    assert stat.S_IMODE(os.stat(region).st_mode) == 0o777


def test_time_slicing_without_opt_in_gets_no_limit(plugin, kubelet, workdir):
    p = ts_plugin(plugin, workdir, "")
    u = p.inventory.uuids
    r = kubelet.allocate(GPU_RESOURCE, [u[0] + "::0"])
    assert not [key for key in envs(r) if key.startswith("CUDA_DEVICE_MEMORY")]
    assert not r.mounts
    assert not os.path.exists(os.path.join(workdir, "iso"))


def test_time_slicing_opt_in_with_isolation_none_is_refused(plugin, workdir):
    p = ts_plugin(plugin, workdir, "    memoryLimit: true\n", args=["--isolation=none"],
                  wait=None)
    assert p.wait_exit(10) == 1
    assert "sharing.timeSlicing.memoryLimit asks for memory limits but --isolation" in p.log()
