"""sharing.mps: NVIDIA's config accepted, replicas advertised, Allocate hands out the MPS
client side (issue 25 item 1; research nvidia-device-plugin.md section 5.4)."""

import os

import pytest

from conftest import RESOURCE

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


def envs(r):
    return dict(r.envs)


def mounts(r):
    return {m.container_path: (m.host_path, m.read_only) for m in r.mounts}


def test_replicas_advertised_like_time_slicing(plugin, kubelet, workdir):
    p = plugin(config=mps_config(os.path.join(workdir, "mps")), args=["--isolation=none"])
    ids = kubelet.endpoint().snapshots[0].ids
    assert sorted(ids) == sorted("%s::%d" % (u, k) for u in p.inventory.uuids for k in range(4))
    assert '"mps": {' in p.log() and '"failRequestsGreaterThanOne": true' in p.log()


def test_allocate_gives_pipe_shm_share_and_pinned_limit(plugin, kubelet, workdir):
    root = os.path.join(workdir, "mps")
    p = plugin(config=mps_config(root), args=["--isolation=none"])
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
    p = plugin(config=mps_config(os.path.join(workdir, "mps")), args=["--isolation=none"])
    u = p.inventory.uuids
    with pytest.raises(grpc.RpcError) as e:
        kubelet.allocate(RESOURCE, [u[0] + "::0", u[0] + "::1"])
    assert "maximum request size for shared resources is 1; found 2" in e.value.details()


def test_two_replicas_get_twice_the_share_when_allowed(plugin, kubelet, workdir):
    p = plugin(config=mps_config(os.path.join(workdir, "mps"),
                                 extra="    failRequestsGreaterThanOne: false\n"),
               args=["--isolation=none"])
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
