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


def test_none_strategy_xid_on_mig_device_marks_gpu(plugin, kubelet):
    """Issue 7: with --mig-strategy none a MIG-enabled GPU is served whole; an XID the driver
    attributes to one of its MIG devices (GI/CI set) must mark that whole GPU, not vanish."""
    p = plugin(MIXED).health_ready()
    m = next(x for x in p.inventory.migs() if len(x.parent.mig) >= 2)
    n = len(kubelet.endpoint().snapshots)
    p.control("xid %s 48" % m.uuid)
    kubelet.wait_for(lambda: len(kubelet.endpoint().snapshots) > n, 3, "a snapshot after the XID")
    health = kubelet.endpoint().snapshots[n].health
    assert {u for u, h in health.items() if h != "Healthy"} == {m.parent.uuid}


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
@pytest.mark.parametrize("fail_on_init", [True, False])
def test_single_on_mixed_partition_is_clear_error(plugin, kubelet, inventory, fail_on_init):
    """Issue 3: `single` needs uniformly partitioned GPUs. At start that is a configuration
    error, fatal whatever --fail-on-init-error says (that flag is about a node without
    NVML): exit 1, nothing registered, an error naming the strategy and the fix."""
    args = ["--mig-strategy", "single"] + ([] if fail_on_init else ["--fail-on-init-error=false"])
    p = plugin(inventory, args=args, wait=None)
    assert p.wait_exit(5) == 1
    assert re.search(r"(?m)^E.*mig-strategy single needs .*use --mig-strategy mixed", p.log()), \
        p.log()
    assert kubelet.registrations == []


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


# ---- --pass-device-specs for MIG devices: capability minors from the real /proc file ----

MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"
# In a private mount namespace: a tmpfs over /proc/driver holding our mig-minors, then exec
# the plugin (same pid, so signals and the exit status are the plugin's).
NS_SETUP = ('mount -t tmpfs -o mode=0755 tmpfs /proc/driver && mkdir /proc/driver/nvidia-caps && '
            'cp "$1" %s && shift && exec "$@"' % MIG_MINORS)


def mig_minors_table(n_gpus):
    """The driver's layout: config, monitor, then per GPU 15 GIs x (GI access + 8 CIs)."""
    lines, minor, table = ["config 1", "monitor 2"], 3, {}
    for gpu in range(n_gpus):
        for gi in range(15):
            for ci in [None] + list(range(8)):
                key = "gpu%d/gi%d" % (gpu, gi) + ("" if ci is None else "/ci%d" % ci)
                lines.append("%s/access %d" % (key, minor))
                table[(gpu, gi, ci)] = minor
                minor += 1
    return "\n".join(lines) + "\n", table


def private_proc_driver_or_skip():
    import os
    import shutil
    import subprocess
    if os.geteuid() != 0:
        pytest.skip("needs root: mounts a tmpfs over /proc/driver in a private mount namespace")
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) not installed (util-linux)")
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        "mount -t tmpfs tmpfs /proc/driver && mkdir /proc/driver/nvidia-caps"],
                       capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs over /proc/driver in a private mount namespace: %s"
                    % (r.stderr.strip() or "exit %d" % r.returncode))


@pytest.mark.parametrize("minors", ["as-inventory", "permuted"])
def test_mixed_pass_device_specs_mig_caps(plugin, kubelet, workdir, minors):
    """Allocate of MIG devices with --pass-device-specs: the parent's /dev/nvidia<minor> and the
    GI and CI access capability nodes named by /proc/driver/nvidia-caps/mig-minors, rw, under
    --dev-root. "permuted" gives GPUs minors unlike their indices (minor 7 - index), so a
    lookup by index instead of minor shows."""
    import json
    import os
    private_proc_driver_or_skip()
    inventory = MIXED
    if minors == "permuted":
        raw = json.load(open(Inventory(MIXED).path))
        for i, g in enumerate(raw["gpus"]):
            g["minor"] = len(raw["gpus"]) - 1 - i
        inventory = os.path.join(workdir, "mig-permuted.json")
        json.dump(raw, open(inventory, "w"))
    inv = Inventory(inventory)
    assert any(g.index != g.minor for g in inv.gpus) == (minors == "permuted")
    text, table = mig_minors_table(max(g.minor for g in inv.gpus) + 1)
    minors_file = os.path.join(workdir, "mig-minors")
    open(minors_file, "w").write(text)
    devroot = os.path.join(workdir, "devroot")
    os.makedirs(os.path.join(devroot, "dev", "nvidia-caps"))
    open(devroot + "/dev/nvidiactl", "w").close()
    for g in inv.gpus:
        open(devroot + "/dev/nvidia%d" % g.minor, "w").close()
    for m in table.values():
        open(devroot + "/dev/nvidia-caps/nvidia-cap%d" % m, "w").close()

    want = expected_mixed(inv)
    plugin(inventory, wait=None,
           args=["--mig-strategy", "mixed", "--pass-device-specs", "--dev-root", devroot],
           prefix=["unshare", "--mount", "--propagation", "private", "sh", "-c", NS_SETUP, "sh",
                   minors_file])
    wait_resources(kubelet, want)

    def spec(path):
        return (path, devroot + path, "rw")

    def mig_specs(m):
        return {spec("/dev/nvidia%d" % m.parent.minor),
                spec("/dev/nvidia-caps/nvidia-cap%d" % table[(m.parent.minor, m.gi, None)]),
                spec("/dev/nvidia-caps/nvidia-cap%d" % table[(m.parent.minor, m.gi, m.ci)])}

    checked = 0
    for res in sorted(r for r in want if r != RESOURCE):
        ids = set(want[res])
        for m in (x for x in inv.migs() if x.uuid in ids):
            r = kubelet.allocate(res, [m.uuid])
            got = [(d.container_path, d.host_path, d.permissions) for d in r.devices]
            assert len(got) == len(set(got)), got
            assert set(got) == mig_specs(m) | {spec("/dev/nvidiactl")}, (res, m.uuid, m.parent.minor, m.gi, m.ci)
            checked += 1
    assert checked == sum(1 for m in inv.migs() if m.full_profile)
    # Two MIG devices of one GPU: the parent node once, both instances' capabilities.
    migs = {m.uuid: m for m in inv.migs()}
    pairs = []
    for res in sorted(r for r in want if r != RESOURCE):
        by_parent = collections.defaultdict(list)
        for u in sorted(want[res]):
            by_parent[migs[u].parent.index].append(migs[u])
        pairs += [(res, v[:2]) for v in by_parent.values() if len(v) >= 2]
    assert pairs, "inventory has no GPU with two MIG devices of one profile"
    res, pair = pairs[0]
    r = kubelet.allocate(res, [m.uuid for m in pair])
    got = [(d.container_path, d.host_path, d.permissions) for d in r.devices]
    assert len(got) == len(set(got)), got
    assert set(got) == mig_specs(pair[0]) | mig_specs(pair[1]) | {spec("/dev/nvidiactl")}
