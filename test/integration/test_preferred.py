"""GetPreferredAllocation on whole GPUs (issue 2 item 5; research section 5.6)."""

import itertools
import re

import grpc
import pytest

from conftest import RESOURCE, scaled

FAIL_TOPOLOGY = "fail nvmlDeviceGetTopologyCommonAncestor NVML_ERROR_UNKNOWN %s"


def pref(kubelet, available, must=(), size=1):
    return kubelet.get_preferred_allocation(RESOURCE, available, must, size)


def test_size_one(plugin, kubelet):
    p = plugin()
    got = pref(kubelet, p.inventory.uuids, size=1)
    assert len(got) == 1 and got[0] in p.inventory.uuids


def test_must_include_honoured(plugin, kubelet):
    p = plugin("8gpu-nvlink.json")
    u = p.inventory.uuids
    for must in ([u[5]], [u[1], u[6]], [u[7]]):
        for size in range(len(must), 5):
            got = pref(kubelet, u, must, size)
            assert len(got) == size and len(set(got)) == size, (must, size, got)
            assert set(must) <= set(got), (must, size, got)
            assert set(got) <= set(u)


def test_only_available_devices(plugin, kubelet):
    p = plugin("8gpu-nvlink.json")
    u = p.inventory.uuids
    avail = [u[0], u[3], u[4], u[7]]
    got = pref(kubelet, avail, [u[3]], 3)
    assert len(got) == 3 and set(got) <= set(avail) and u[3] in got


def test_must_include_equals_size(plugin, kubelet):
    p = plugin()
    u = p.inventory.uuids
    assert sorted(pref(kubelet, u, [u[2], u[0]], 2)) == sorted([u[0], u[2]])


def test_all_available_all_requested(plugin, kubelet):
    p = plugin()
    assert sorted(pref(kubelet, p.inventory.uuids, size=4)) == sorted(p.inventory.uuids)


def test_nvlink_pairs_preferred(plugin, kubelet):
    p = plugin("8gpu-nvlink.json")
    inv = p.inventory
    pairs = [(a, b) for a, b in itertools.combinations(inv.uuids, 2) if inv.nvlinked(a, b)]
    if not pairs or len(pairs) == len(list(itertools.combinations(inv.uuids, 2))):
        pytest.skip("8gpu-nvlink.json does not describe a partial NVLink topology (parsed %d pairs)"
                    % len(pairs))
    got = pref(kubelet, inv.uuids, size=2)
    assert inv.nvlinked(*got), "pair %s not NVLink-connected" % got
    # with one GPU pinned, its partner must be an NVLink peer when it has one
    for g in inv.gpus:
        peers = [inv.gpus[i].uuid for i in g.nvlink] if g.nvlink else []
        if not peers:
            continue
        got = pref(kubelet, inv.uuids, [g.uuid], 2)
        other = [x for x in got if x != g.uuid]
        assert len(other) == 1 and other[0] in peers, (g.index, got, g.nvlink)


def test_nvlink_partner_preferred_over_numa_neighbour(plugin, kubelet):
    """Remove the best peer from the available set: the answer is still an NVLink peer if
    one remains available."""
    p = plugin("8gpu-nvlink.json")
    inv = p.inventory
    g0 = inv.gpus[0]
    if len(g0.nvlink) < 2:
        pytest.skip("GPU 0 has fewer than 2 NVLink peers in this inventory")
    best = max(g0.nvlink, key=lambda i: g0.nvlink[i])
    avail = [u for u in inv.uuids if u != inv.gpus[best].uuid]
    got = pref(kubelet, avail, [g0.uuid], 2)
    other = [x for x in got if x != g0.uuid][0]
    assert inv.by_uuid(other).index in g0.nvlink, got


def test_same_numa_preferred(plugin, kubelet):
    p = plugin("4gpu.json")
    inv = p.inventory
    nodes = {g.numa for g in inv.gpus}
    if len(nodes) < 2 or None in nodes:
        pytest.skip("4gpu.json puts all GPUs on one NUMA node (or none)")
    for g in inv.gpus:
        same = [x.uuid for x in inv.gpus if x.numa == g.numa and x is not g]
        if not same:
            continue
        got = pref(kubelet, inv.uuids, [g.uuid], 2)
        other = [x for x in got if x != g.uuid]
        assert other and other[0] in same, "GPU %d (NUMA %s) paired with %s" % (g.index, g.numa, got)
    got = pref(kubelet, inv.uuids, size=2)
    assert inv.by_uuid(got[0]).numa == inv.by_uuid(got[1]).numa, got


def test_size_larger_than_available(plugin, kubelet):
    """An impossible size is the caller's error: INVALID_ARGUMENT saying both numbers (the
    kubelet then makes its own choice). The plugin keeps serving."""
    p = plugin()
    u = p.inventory.uuids
    with pytest.raises(grpc.RpcError) as e:
        pref(kubelet, u[:2], size=3)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "allocation size 3 with 2 available devices" in e.value.details()
    assert len(pref(kubelet, u, size=2)) == 2


def vm_peak_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"(?m)^VmPeak:\s+(\d+) kB", f.read()).group(1))


def test_huge_size_refused_before_allocating(plugin, kubelet):
    """Issue 7: allocation_size comes from the wire (up to 2^31-1) and used to size two
    arrays (16 GiB each) before it was checked. It is refused first: INVALID_ARGUMENT, and the
    process's peak address space does not grow by gigabytes (without the check the arrays
    are either mapped, raising VmPeak, or fail, answering RESOURCE_EXHAUSTED)."""
    p = plugin()
    u = p.inventory.uuids
    before = vm_peak_kib(p.pid)
    with pytest.raises(grpc.RpcError) as e:
        pref(kubelet, u, size=2**31 - 1)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
    assert "allocation size 2147483647 with 4 available devices" in e.value.details()
    assert vm_peak_kib(p.pid) - before < 1024 * 1024, "VmPeak grew by 1 GiB or more"
    assert len(pref(kubelet, u, size=2)) == 2


def test_unknown_available_id(plugin, kubelet):
    """An unknown ID in available is refused (INVALID_ARGUMENT naming it), never answered."""
    p = plugin()
    u = p.inventory.uuids
    bogus = "GPU-ffffffff-0000-0000-0000-000000000000"
    with pytest.raises(grpc.RpcError) as e:
        pref(kubelet, u + [bogus], size=2)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bogus in e.value.details()


def test_multiple_container_requests(plugin, kubelet):
    from kubelet_sim import pb
    p = plugin()
    u = p.inventory.uuids
    req = pb.PreferredAllocationRequest(container_requests=[
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=u, allocation_size=1),
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=u, must_include_deviceIDs=[u[3]],
                                               allocation_size=2)])
    resp = kubelet.endpoint().stub.GetPreferredAllocation(req, timeout=scaled(5))
    assert [len(c.deviceIDs) for c in resp.container_responses] == [1, 2]
    assert u[3] in resp.container_responses[1].deviceIDs


@pytest.mark.parametrize("gpu", ["1", "all"])
def test_topology_failure_does_not_fail_call(plugin, kubelet, gpu):
    line = FAIL_TOPOLOGY % ("" if gpu == "all" else gpu)
    p = plugin("8gpu-nvlink.json", control=[line.strip()])
    p.control(line.strip())   # also at run time, in case topology is read per call
    u = p.inventory.uuids
    got = pref(kubelet, u, [u[1]], 2)
    assert len(got) == 2 and u[1] in got
    got = pref(kubelet, u, size=3)
    assert len(got) == 3 and len(set(got)) == 3
