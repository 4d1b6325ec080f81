"""Allocate: every device-list strategy, ID strategy, device specs, bad requests (issue 2 item 5)."""

import os
import re

import grpc
import pytest

from conftest import RESOURCE
from kubelet_sim import pb

CDI_KIND = "k8s.device-plugin.nvidia.com/gpu"
UUID4 = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"


def test_envvar_uuid(plugin, kubelet):
    p = plugin()
    ids = p.inventory.uuids[:2]
    r = kubelet.allocate(RESOURCE, ids)
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(ids)
    assert len(r.mounts) == 0 and len(r.devices) == 0 and len(r.cdi_devices) == 0


def test_envvar_single(plugin, kubelet):
    p = plugin()
    u = p.inventory.uuids[3]
    assert kubelet.allocate(RESOURCE, [u]).envs["NVIDIA_VISIBLE_DEVICES"] == u


def test_device_id_strategy_index(plugin, kubelet):
    p = plugin(args=["--device-id-strategy", "index"])
    g = p.inventory.gpus
    # ListAndWatch keeps UUIDs; only the runtime IDs become indexes.
    assert sorted(kubelet.endpoint().snapshots[0].ids) == sorted(p.inventory.uuids)
    r = kubelet.allocate(RESOURCE, [g[2].uuid, g[0].uuid])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == "%d,%d" % (g[2].index, g[0].index)


def test_device_id_strategy_env(plugin, kubelet):
    p = plugin(env={"DEVICE_ID_STRATEGY": "index"})
    g = p.inventory.gpus[1]
    assert kubelet.allocate(RESOURCE, [g.uuid]).envs["NVIDIA_VISIBLE_DEVICES"] == str(g.index)


def test_volume_mounts(plugin, kubelet):
    p = plugin(args=["--device-list-strategy", "volume-mounts"])
    ids = p.inventory.uuids[:2]
    r = kubelet.allocate(RESOURCE, ids)
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == "/var/run/nvidia-container-devices"
    got = [(m.host_path, m.container_path, m.read_only) for m in r.mounts]
    assert got == [("/dev/null", "/var/run/nvidia-container-devices/" + i, False) for i in ids]


def test_cdi_annotations(plugin, kubelet):
    p = plugin(args=["--device-list-strategy", "cdi-annotations"])
    ids = p.inventory.uuids[1:3]
    r = kubelet.allocate(RESOURCE, ids)
    assert len(r.annotations) == 1, dict(r.annotations)
    (key, value), = r.annotations.items()
    assert re.fullmatch(r"cdi\.k8s\.io/nvidia-device-plugin_" + UUID4, key), key
    assert len(key) <= 63 + len("cdi.k8s.io/")
    assert value == ",".join("%s=%s" % (CDI_KIND, i) for i in ids)
    assert len(r.mounts) == 0 and len(r.cdi_devices) == 0


def test_cdi_annotations_key_is_random(plugin, kubelet):
    p = plugin(args=["--device-list-strategy", "cdi-annotations"])
    u = p.inventory.uuids[0]
    k1 = list(kubelet.allocate(RESOURCE, [u]).annotations)
    k2 = list(kubelet.allocate(RESOURCE, [u]).annotations)
    assert k1 != k2


def test_cdi_annotation_prefix(plugin, kubelet):
    p = plugin(args=["--device-list-strategy", "cdi-annotations",
                     "--cdi-annotation-prefix", "example.com/"])
    (key,) = kubelet.allocate(RESOURCE, p.inventory.uuids[:1]).annotations
    assert re.fullmatch(r"example\.com/nvidia-device-plugin_" + UUID4, key), key


def test_cdi_cri(plugin, kubelet):
    p = plugin(args=["--device-list-strategy", "cdi-cri"])
    ids = p.inventory.uuids[:3]
    r = kubelet.allocate(RESOURCE, ids)
    assert [c.name for c in r.cdi_devices] == ["%s=%s" % (CDI_KIND, i) for i in ids]
    assert len(r.annotations) == 0


def test_cdi_cri_with_index_ids(plugin, kubelet):
    p = plugin(args=["--device-list-strategy", "cdi-cri", "--device-id-strategy", "index"])
    g = p.inventory.gpus[:2]
    r = kubelet.allocate(RESOURCE, [x.uuid for x in g])
    assert [c.name for c in r.cdi_devices] == ["%s=%d" % (CDI_KIND, x.index) for x in g]


@pytest.mark.parametrize("form", ["comma", "repeat", "env"])
def test_several_strategies(plugin, kubelet, form):
    strategies = ["envvar", "volume-mounts", "cdi-cri"]
    if form == "comma":
        p = plugin(args=["--device-list-strategy", ",".join(strategies)])
    elif form == "repeat":
        args = []
        for s in strategies:
            args += ["--device-list-strategy", s]
        p = plugin(args=args)
    else:
        p = plugin(env={"DEVICE_LIST_STRATEGY": ",".join(strategies)})
    ids = p.inventory.uuids[:2]
    r = kubelet.allocate(RESOURCE, ids)
    # envvar and volume-mounts both set NVIDIA_VISIBLE_DEVICES; NVIDIA applies
    # volume-mounts last, so the list comes from the mounts.
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == "/var/run/nvidia-container-devices"
    assert [m.container_path for m in r.mounts] == \
        ["/var/run/nvidia-container-devices/" + i for i in ids]
    assert [c.name for c in r.cdi_devices] == ["%s=%s" % (CDI_KIND, i) for i in ids]


def test_envvar_and_cdi_annotations(plugin, kubelet):
    p = plugin(args=["--device-list-strategy", "envvar,cdi-annotations"])
    ids = p.inventory.uuids[:2]
    r = kubelet.allocate(RESOURCE, ids)
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(ids)
    assert len(r.annotations) == 1


def test_pass_device_specs(plugin, kubelet, workdir):
    devroot = os.path.join(workdir, "devroot")
    os.makedirs(os.path.join(devroot, "dev"))
    present = ["/dev/nvidiactl", "/dev/nvidia-uvm"]          # uvm-tools, modeset absent
    for n in present:
        open(devroot + n, "w").close()
    p = plugin(args=["--pass-device-specs", "--dev-root", devroot])
    g = p.inventory.gpus[:2]
    r = kubelet.allocate(RESOURCE, [x.uuid for x in g])
    specs = [(d.container_path, d.host_path, d.permissions) for d in r.devices]
    want_ctl = [(n, devroot + n, "rw") for n in present]
    want_gpu = [("/dev/nvidia%d" % x.minor, "%s/dev/nvidia%d" % (devroot, x.minor), "rw") for x in g]
    assert sorted(specs) == sorted(want_ctl + want_gpu)
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(x.uuid for x in g)


def test_pass_device_specs_all_control_nodes(plugin, kubelet, workdir):
    devroot = os.path.join(workdir, "devroot")
    os.makedirs(os.path.join(devroot, "dev"))
    ctl = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]
    for n in ctl:
        open(devroot + n, "w").close()
    p = plugin(env={"PASS_DEVICE_SPECS": "true", "NVIDIA_DEV_ROOT": devroot})
    g = p.inventory.gpus[3]
    paths = {d.container_path for d in kubelet.allocate(RESOURCE, [g.uuid]).devices}
    assert paths == set(ctl) | {"/dev/nvidia%d" % g.minor}


def test_no_device_specs_by_default(plugin, kubelet):
    p = plugin()
    assert len(kubelet.allocate(RESOURCE, p.inventory.uuids[:1]).devices) == 0


def test_unknown_id_is_named(plugin, kubelet):
    p = plugin()
    bad = "GPU-00000000-dead-beef-0000-000000000000"
    with pytest.raises(grpc.RpcError) as e:
        kubelet.allocate(RESOURCE, [p.inventory.uuids[0], bad])
    assert e.value.code() != grpc.StatusCode.OK
    assert bad in e.value.details()
    # still serving
    assert kubelet.allocate(RESOURCE, p.inventory.uuids[:1]).envs


def test_replica_id_without_sharing_is_unknown(plugin, kubelet):
    p = plugin()
    bad = p.inventory.uuids[0] + "::0"
    with pytest.raises(grpc.RpcError) as e:
        kubelet.allocate(RESOURCE, [bad])
    assert bad in e.value.details()


def test_empty_container_request(plugin, kubelet):
    """A ContainerAllocateRequest listing no device is refused with INVALID_ARGUMENT naming
    the container; the plugin keeps serving."""
    p = plugin()
    with pytest.raises(grpc.RpcError) as e:
        kubelet.allocate(RESOURCE, [])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "container request 0 lists no devices" in e.value.details()
    assert kubelet.allocate(RESOURCE, p.inventory.uuids[:1]).envs


def test_no_container_requests(plugin, kubelet):
    p = plugin()
    resp = kubelet.allocate_raw(RESOURCE, pb.AllocateRequest())
    assert len(resp.container_responses) == 0
    assert kubelet.allocate(RESOURCE, p.inventory.uuids[:1]).envs


def test_oversized_request(plugin, kubelet):
    p = plugin()
    big = pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=["x" * 1024] * (5 * 1024))])
    assert big.ByteSize() > 5 << 20
    with pytest.raises(grpc.RpcError) as e:
        kubelet.allocate_raw(RESOURCE, big)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert kubelet.allocate(RESOURCE, p.inventory.uuids[:1]).envs


def test_large_but_legal_request_names_unknown_id(plugin, kubelet):
    p = plugin()
    req = pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=["bogus-%06d" % i for i in range(20000)])])
    assert req.ByteSize() < 1 << 20
    with pytest.raises(grpc.RpcError) as e:
        kubelet.allocate_raw(RESOURCE, req)
    assert "bogus-" in e.value.details()
    assert kubelet.allocate(RESOURCE, p.inventory.uuids[:1]).envs


def test_many_containers(plugin, kubelet):
    p = plugin("8gpu-nvlink.json")
    u = p.inventory.uuids
    groups = [[u[0]], [u[1], u[2]], [u[3]], [u[4], u[5], u[6]], [u[7]]]
    req = pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=g) for g in groups])
    resp = kubelet.allocate_raw(RESOURCE, req)
    assert [c.envs["NVIDIA_VISIBLE_DEVICES"] for c in resp.container_responses] == \
        [",".join(g) for g in groups]


def test_many_allocations(plugin, kubelet):
    p = plugin()
    u = p.inventory.uuids
    for i in range(300):
        ids = [u[i % len(u)]]
        assert kubelet.allocate(RESOURCE, ids).envs["NVIDIA_VISIBLE_DEVICES"] == ids[0]


def test_bad_strategy_flag_rejected(plugin):
    p = plugin(args=["--device-list-strategy", "bogus"], wait=None)
    assert p.wait_exit() != 0
    assert "bogus" in p.log()
