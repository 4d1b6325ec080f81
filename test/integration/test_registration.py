"""Registration, options and the first ListAndWatch snapshot (issue 2 items 4-5)."""

from conftest import RESOURCE, ENDPOINT
from kubelet_sim import HEALTHY


def test_register_request(plugin, kubelet):
    plugin()
    regs = kubelet.registrations_for(RESOURCE)
    assert len(regs) == 1, kubelet.registrations
    r = regs[0]
    assert r.version == "v1beta1"
    assert r.endpoint == ENDPOINT
    assert r.request_options.get_preferred_allocation_available is True
    assert r.request_options.pre_start_required is False
    assert kubelet.rejected == []


def test_get_device_plugin_options(plugin, kubelet):
    plugin()
    o = kubelet.registrations_for(RESOURCE)[0].options   # answered inside Register
    assert o.get_preferred_allocation_available is True
    assert o.pre_start_required is False
    o2 = kubelet.endpoint().options()
    assert o2 == o


def test_device_list_is_fake_uuids_all_healthy(plugin, kubelet):
    p = plugin("4gpu.json")
    snap = kubelet.endpoint().snapshots[0]
    assert sorted(snap.ids) == sorted(p.inventory.uuids)
    assert set(snap.health.values()) == {HEALTHY}


def test_numa_topology_from_inventory(plugin, kubelet):
    p = plugin("8gpu-nvlink.json")
    numa = kubelet.endpoint().snapshots[0].numa()
    for g in p.inventory.gpus:
        want = [] if g.numa is None else [g.numa]
        assert numa[g.uuid] == want, "GPU %d (%s)" % (g.index, g.uuid)


def test_device_list_8gpu(plugin, kubelet):
    p = plugin("8gpu-nvlink.json")
    assert sorted(kubelet.endpoint().snapshots[-1].ids) == sorted(p.inventory.uuids)


def test_pre_start_container_is_noop(plugin, kubelet):
    p = plugin()
    resp = kubelet.pre_start(RESOURCE, p.inventory.uuids[:1])
    assert resp.ByteSize() == 0


def test_no_duplicate_snapshots_while_idle(plugin, kubelet):
    """Nothing changes on an idle node: the first snapshot stays the only one for a while."""
    plugin()
    try:
        kubelet.wait_for(lambda: len(kubelet.endpoint().snapshots) > 1, 0.5)
    except TimeoutError:
        return
    raise AssertionError("unexpected extra snapshots: %d" % len(kubelet.endpoint().snapshots))
