"""MIG strategies (issue 3 item 3; research sections 2.1, 2.4, 3.4)."""

import collections
import re

import pytest

from conftest import RESOURCE
from inventory import Inventory, available

MIXED = "8a100-mig-mixed.json"


def mig_resource(profile):
    # NVIDIA: "mig-" + profile with "+" replaced by "."
    return "nvidia.com/mig-" + profile.replace("+", ".")


def expected_mixed(inv):
    want = collections.defaultdict(set)
    for m in inv.migs():
        if m.full_profile:
            want[mig_resource(m.profile)].add(m.uuid)
    for g in inv.gpus:
        if not g.mig_enabled:
            want[RESOURCE].add(g.uuid)
    return want


def wait_resources(kubelet, names, timeout=5):
    kubelet.wait_for(lambda: all(kubelet.endpoints.get(n) and kubelet.endpoints[n].snapshots
                                 for n in names), timeout, "registration of %s" % sorted(names))


def test_mixed_one_registration_per_profile(plugin, kubelet):
    inv = Inventory(MIXED)
    want = expected_mixed(inv)
    assert len([r for r in want if r.startswith("nvidia.com/mig-")]) >= 2, "inventory has < 2 profiles"
    p = plugin(MIXED, args=["--mig-strategy", "mixed"], wait=None)
    wait_resources(kubelet, want)
    assert set(kubelet.resources()) == set(want)
    for res, ids in want.items():
        regs = kubelet.registrations_for(res)
        assert len(regs) == 1, (res, regs)
        assert regs[0].endpoint == "gpupool-nvidia-%s.sock" % res.split("/", 1)[1]
        snap = kubelet.endpoint(res).snapshots[0]
        assert sorted(snap.ids) == sorted(ids), res
        assert set(snap.health.values()) == {"Healthy"}
    # MIG devices carry their parent's NUMA node
    for m in inv.migs():
        if not m.full_profile:
            continue
        numa = kubelet.endpoint(mig_resource(m.profile)).snapshots[0].numa()[m.uuid]
        assert numa == ([] if m.parent.numa is None else [m.parent.numa])
    assert p.alive()


def test_mixed_allocate_and_preferred(plugin, kubelet):
    inv = Inventory(MIXED)
    want = expected_mixed(inv)
    plugin(MIXED, args=["--mig-strategy", "mixed"], wait=None)
    wait_resources(kubelet, want)
    res = max((r for r in want if r != RESOURCE), key=lambda r: len(want[r]))
    ids = sorted(want[res])
    r = kubelet.allocate(res, ids[:1])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == ids[0]
    if len(ids) >= 2:
        got = kubelet.get_preferred_allocation(res, ids, [ids[-1]], 2)
        assert len(got) == 2 and ids[-1] in got


def test_mixed_index_strategy(plugin, kubelet):
    inv = Inventory(MIXED)
    want = expected_mixed(inv)
    plugin(MIXED, args=["--mig-strategy", "mixed", "--device-id-strategy", "index"], wait=None)
    wait_resources(kubelet, want)
    m = inv.migs()[0]
    r = kubelet.allocate(mig_resource(m.profile), [m.uuid])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == m.index     # "<gpu>:<mig>"


def test_mixed_xid_parent(plugin, kubelet):
    inv = Inventory(MIXED)
    want = expected_mixed(inv)
    p = plugin(MIXED, args=["--mig-strategy", "mixed"], wait=None)
    wait_resources(kubelet, want)
    p.health_ready()
    parent = next(g for g in inv.gpus if len(g.mig) >= 2)
    p.control("xid %d 48" % parent.index)

    def bad():
        return {i for r in want for i, h in kubelet.endpoint(r).snapshots[-1].health.items()
                if h != "Healthy"}
    kubelet.wait_for(lambda: bad() == {m.uuid for m in parent.mig}, 3,
                     "all MIG devices of GPU %d Unhealthy" % parent.index)


def test_none_strategy_on_mig_node(plugin, kubelet):
    """mig-strategy none: whole GPUs only, MIG mode ignored (NVIDIA)."""
    p = plugin(MIXED)
    assert sorted(kubelet.endpoint().snapshots[0].ids) == sorted(p.inventory.uuids)
    assert kubelet.resources() == [RESOURCE]


SINGLE = "2gpu-mig-single.json"
NONUNIFORM = "mig-mixed-nonuniform.json"


def test_single_uniform(plugin, kubelet):
    inv = Inventory(SINGLE)
    plugin(SINGLE, args=["--mig-strategy", "single"])
    assert sorted(kubelet.endpoint().snapshots[0].ids) == sorted(m.uuid for m in inv.migs())
    assert kubelet.resources() == [RESOURCE]
    m = inv.migs()[-1]
    assert kubelet.allocate(RESOURCE, [m.uuid]).envs["NVIDIA_VISIBLE_DEVICES"] == m.uuid


def test_single_via_env(plugin, kubelet):
    inv = Inventory(SINGLE)
    plugin(SINGLE, env={"MIG_STRATEGY": "single"})
    assert len(kubelet.endpoint().snapshots[0].ids) == len(inv.migs())


@pytest.mark.parametrize("inventory", [NONUNIFORM, MIXED])
def test_single_on_mixed_partition_is_clear_error(plugin, kubelet, inventory):
    """Issue 3: `single` needs uniformly partitioned GPUs, otherwise a clear error.
    ASSUMPTION: the plugin exits non-zero (fail-on-init-error default true) or at least never
    registers nvidia.com/gpu, and logs an error that mentions MIG."""
    p = plugin(inventory, args=["--mig-strategy", "single"], wait=None)
    try:
        rc = p.wait_exit(3)
    except AssertionError:
        rc = None
    log = p.log()
    assert re.search(r"(?im)^[EF].*mig", log) or (rc not in (None, 0) and re.search(r"(?i)mig", log)), log
    assert kubelet.registrations_for(RESOURCE) == [] or rc not in (None, 0)


def test_mixed_profiles_nonuniform(plugin, kubelet):
    inv = Inventory(NONUNIFORM)
    want = expected_mixed(inv)
    plugin(NONUNIFORM, args=["--mig-strategy", "mixed"], wait=None)
    wait_resources(kubelet, want)
    assert set(kubelet.resources()) == set(want)
    assert sorted(kubelet.endpoint("nvidia.com/mig-1g.5gb").snapshots[0].ids) == \
        sorted(want["nvidia.com/mig-1g.5gb"])


def test_invalid_mig_strategy(plugin):
    p = plugin(args=["--mig-strategy", "bogus"], wait=None)
    assert p.wait_exit() != 0
    assert "bogus" in p.log()


def test_mixed_xid_on_one_mig_device(plugin, kubelet):
    """An XID attributed to one GPU/compute instance (NVIDIA matches gi/ci) marks only that
    MIG device."""
    inv = Inventory(MIXED)
    want = expected_mixed(inv)
    p = plugin(MIXED, args=["--mig-strategy", "mixed"], wait=None)
    wait_resources(kubelet, want)
    m = next(x for x in inv.migs() if x.full_profile and len(x.parent.mig) >= 2)
    p.health_ready()
    p.control("xid %s 48" % m.uuid)

    def bad():
        return {i for r in want for i, h in kubelet.endpoint(r).snapshots[-1].health.items()
                if h != "Healthy"}
    kubelet.wait_for(lambda: bad() == {m.uuid}, 3, "MIG device %s Unhealthy" % m.uuid)
