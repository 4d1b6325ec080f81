"""Time-slicing replicas (issue 3 item 4; research section 5.3, 5.6)."""

import collections
import re

import grpc
import pytest

from conftest import RESOURCE

TS = """version: v1
sharing:
  timeSlicing:
{extra}    resources:
    - name: nvidia.com/gpu
      replicas: {replicas}
"""


def ts_config(replicas=4, extra=""):
    return TS.format(replicas=replicas, extra=extra)


def gpu_of(rid):
    return rid.split("::", 1)[0]


def test_replicas_4_on_8_gpus(plugin, kubelet):
    p = plugin("8gpu-nvlink.json", config=ts_config(4))
    snap = kubelet.endpoint().snapshots[0]
    want = ["%s::%d" % (u, k) for u in p.inventory.uuids for k in range(4)]
    assert len(snap.ids) == 32
    assert sorted(snap.ids) == sorted(want)
    assert set(snap.health.values()) == {"Healthy"}
    numa = snap.numa()
    for g in p.inventory.gpus:
        for k in range(4):
            assert numa["%s::%d" % (g.uuid, k)] == ([] if g.numa is None else [g.numa])
    assert kubelet.registrations_for(RESOURCE)[0].endpoint == "gpupool-nvidia-gpu.sock"


def test_nvidia_readme_example_unchanged(plugin, kubelet):
    """NVIDIA README, "Shared Access to GPUs with CUDA Time-Slicing"."""
    cfg = """version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""
    p = plugin("8gpu-nvlink.json", config=cfg)
    assert len(kubelet.endpoint().snapshots[0].ids) == 10 * len(p.inventory.uuids)


def test_rename_by_default(plugin, kubelet):
    p = plugin("8gpu-nvlink.json", config=ts_config(4, "    renameByDefault: true\n"),
               wait="nvidia.com/gpu.shared")
    regs = kubelet.registrations_for("nvidia.com/gpu.shared")
    assert regs[0].endpoint == "gpupool-nvidia-gpu.shared.sock"
    assert kubelet.registrations_for(RESOURCE) == []
    assert len(kubelet.endpoint("nvidia.com/gpu.shared").snapshots[0].ids) == 32
    u = p.inventory.uuids[0]
    r = kubelet.allocate("nvidia.com/gpu.shared", [u + "::1"])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == u


def test_rename(plugin, kubelet):
    cfg = """version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      rename: gpu-ts
      replicas: 2
"""
    p = plugin("4gpu.json", config=cfg, wait="nvidia.com/gpu-ts")
    ids = kubelet.endpoint("nvidia.com/gpu-ts").snapshots[0].ids
    assert sorted(ids) == sorted("%s::%d" % (u, k) for u in p.inventory.uuids for k in range(2))


def test_devices_subset(plugin, kubelet):
    """gpupool implements per-device `devices` (NVIDIA ignores it, issue #1786).
    ASSUMPTION: the listed GPUs are shared under the renamed resource."""
    cfg = """version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      rename: gpu-ts
      replicas: 3
      devices: [0, 1]
"""
    p = plugin("4gpu.json", config=cfg, wait="nvidia.com/gpu-ts")
    ids = kubelet.endpoint("nvidia.com/gpu-ts").snapshots[0].ids
    g = p.inventory.gpus
    assert sorted(ids) == sorted("%s::%d" % (x.uuid, k) for x in g[:2] for k in range(3))


def test_devices_absent_from_node_warn(plugin, kubelet):
    """Issue 7: one ConfigMap serves every node, so a UUID or an index this node does not
    have is a warning naming it, and the listed GPUs that are here are shared."""
    absent = "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff"
    cfg = """version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      rename: gpu-ts
      replicas: 2
      devices: [%s, 9, 1]
""" % absent
    p = plugin("4gpu.json", config=cfg, wait="nvidia.com/gpu-ts")
    g = p.inventory.gpus[1]
    assert sorted(kubelet.endpoint("nvidia.com/gpu-ts").snapshots[0].ids) == \
        [g.uuid + "::0", g.uuid + "::1"]
    log = p.log()
    for ref in (absent, "9"):
        assert re.search(r'(?m)^W.*device "%s" of resource nvidia.com/gpu is not a device of '
                         r'this node' % ref, log), log


def test_devices_malformed_is_fatal(plugin, kubelet):
    """A reference that is no GPU index, "gpu:mig" index or GPU-/MIG- UUID is a configuration
    error naming the file, the line and the value."""
    cfg = ts_config(2).rstrip("\n") + "\n      devices: [0, not-a-gpu]\n"
    p = plugin("4gpu.json", config=cfg, wait=None)
    assert p.wait_exit(5) == 1
    assert re.search(r'%s:7: invalid value "not-a-gpu"' % re.escape(p.config_path), p.log()), \
        p.log()
    assert kubelet.registrations == []


def test_two_replicas_same_gpu_one_uuid(plugin, kubelet):
    p = plugin("8gpu-nvlink.json", config=ts_config(4))
    u = p.inventory.uuids
    r = kubelet.allocate(RESOURCE, [u[2] + "::0", u[2] + "::3"])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == u[2]
    r = kubelet.allocate(RESOURCE, [u[2] + "::0", u[5] + "::1", u[2] + "::2"])
    assert sorted(r.envs["NVIDIA_VISIBLE_DEVICES"].split(",")) == sorted([u[2], u[5]])


def test_replicas_with_index_strategy(plugin, kubelet):
    p = plugin("8gpu-nvlink.json", config=ts_config(4), args=["--device-id-strategy", "index"])
    g = p.inventory.gpus[3]
    r = kubelet.allocate(RESOURCE, [g.uuid + "::1", g.uuid + "::2"])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == str(g.index)


def test_plain_uuid_is_unknown_when_replicated(plugin, kubelet):
    p = plugin("4gpu.json", config=ts_config(2))
    with pytest.raises(grpc.RpcError) as e:
        kubelet.allocate(RESOURCE, [p.inventory.uuids[0]])
    assert p.inventory.uuids[0] in e.value.details()


def test_fail_requests_greater_than_one(plugin, kubelet):
    p = plugin("8gpu-nvlink.json", config=ts_config(4, "    failRequestsGreaterThanOne: true\n"))
    u = p.inventory.uuids
    with pytest.raises(grpc.RpcError) as e:
        kubelet.allocate(RESOURCE, [u[0] + "::0", u[1] + "::0"])
    assert "maximum request size for shared resources is 1; found 2" in e.value.details()
    assert kubelet.allocate(RESOURCE, [u[0] + "::0"]).envs["NVIDIA_VISIBLE_DEVICES"] == u[0]


def test_preferred_spreads_by_default(plugin, kubelet):
    p = plugin("8gpu-nvlink.json", config=ts_config(4))
    all_ids = kubelet.endpoint().snapshots[0].ids
    got = kubelet.get_preferred_allocation(RESOURCE, all_ids, [], 4)
    assert len(got) == 4 and len({gpu_of(x) for x in got}) == 4, got
    got = kubelet.get_preferred_allocation(RESOURCE, all_ids, [], 8)
    assert len({gpu_of(x) for x in got}) == 8, got


def test_preferred_least_loaded(plugin, kubelet):
    p = plugin("8gpu-nvlink.json", config=ts_config(4))
    u = p.inventory.uuids
    # GPU 0 has 3 replicas in use, GPU 1 has 2, GPU 2 has 1, the rest none.
    used = {u[0] + "::0", u[0] + "::1", u[0] + "::2", u[1] + "::0", u[1] + "::1", u[2] + "::0"}
    avail = [x for x in kubelet.endpoint().snapshots[0].ids if x not in used]
    got = kubelet.get_preferred_allocation(RESOURCE, avail, [], 5)
    assert {gpu_of(x) for x in got} == set(u[3:8]), got
    got = kubelet.get_preferred_allocation(RESOURCE, avail, [], 7)
    gpus = collections.Counter(gpu_of(x) for x in got)
    assert gpus[u[0]] == 0 and gpus[u[1]] == 0 and gpus[u[2]] <= 1, got
    assert len(got) == 7


def test_preferred_must_include_replica(plugin, kubelet):
    p = plugin("8gpu-nvlink.json", config=ts_config(4))
    u = p.inventory.uuids
    all_ids = kubelet.endpoint().snapshots[0].ids
    got = kubelet.get_preferred_allocation(RESOURCE, all_ids, [u[6] + "::2"], 3)
    assert u[6] + "::2" in got and len(got) == 3
    assert len({gpu_of(x) for x in got}) == 3, got


@pytest.mark.parametrize("how", ["flag", "config"])
def test_preferred_packed(plugin, kubelet, how):
    if how == "flag":
        p = plugin("8gpu-nvlink.json", config=ts_config(4),
                   args=["--shared-devices-allocation-policy", "packed"])
    else:
        cfg = "version: v1\nflags:\n  plugin:\n    sharedDevicesAllocationPolicy: packed\n" + \
              ts_config(4).split("\n", 1)[1]
        p = plugin("8gpu-nvlink.json", config=cfg)
    u = p.inventory.uuids
    all_ids = kubelet.endpoint().snapshots[0].ids
    got = kubelet.get_preferred_allocation(RESOURCE, all_ids, [], 4)
    assert len({gpu_of(x) for x in got}) == 1, got
    # the most loaded GPU is filled first
    avail = [x for x in all_ids if x not in (u[4] + "::0", u[4] + "::1")]
    got = kubelet.get_preferred_allocation(RESOURCE, avail, [], 2)
    assert sorted(got) == sorted([u[4] + "::2", u[4] + "::3"]), got


def test_preferred_not_enough(plugin, kubelet):
    p = plugin("4gpu.json", config=ts_config(2))
    ids = kubelet.endpoint().snapshots[0].ids
    try:
        got = kubelet.get_preferred_allocation(RESOURCE, ids[:2], [], 3)
        assert len(got) < 3
    except grpc.RpcError as e:
        assert e.code() != grpc.StatusCode.OK
        assert "3" in e.details()


def test_replicas_must_be_at_least_2(plugin, kubelet):
    p = plugin("4gpu.json", config=ts_config(1), wait=None)
    assert p.wait_exit(5) != 0
    assert "replicas" in p.log()
