"""XID health checking, recovery, lost GPUs (issue 3 item 2; research section 4)."""

import time

import grpc
import pytest

from conftest import RESOURCE, scaled
from kubelet_sim import HEALTHY, UNHEALTHY

TS4 = """version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""

# No recovery within the test unless a test asks for it.
NO_RECOVERY = []


def gpu_of(rid):
    return rid.split("::", 1)[0]


def ready(p):
    return p.health_ready()


def unhealthy(snap):
    return {i for i, h in snap.health.items() if h != HEALTHY}


def first_change(kubelet, n_before, timeout=3):
    ep = kubelet.endpoint()
    kubelet.wait_for(lambda: len(ep.snapshots) > n_before, timeout, "a new ListAndWatch snapshot")
    return ep.snapshots[n_before]


@pytest.mark.parametrize("ref", ["index", "uuid"])
def test_xid_48_marks_gpu_unhealthy(plugin, kubelet, ref):
    p = ready(plugin("4gpu.json"))
    g = p.inventory.gpus[1]
    n = len(kubelet.endpoint().snapshots)
    p.control("xid %s 48" % (g.index if ref == "index" else g.uuid))
    snap = first_change(kubelet, n)
    assert unhealthy(snap) == {g.uuid}
    assert snap.health[g.uuid] == UNHEALTHY
    assert sorted(snap.ids) == sorted(p.inventory.uuids)


def test_xid_marks_all_replicas_in_one_snapshot(plugin, kubelet):
    p = ready(plugin("8gpu-nvlink.json", config=TS4))
    g = p.inventory.gpus[5]
    n = len(kubelet.endpoint().snapshots)
    p.control("xid %d 48" % g.index)
    snap = first_change(kubelet, n)
    assert unhealthy(snap) == {"%s::%d" % (g.uuid, k) for k in range(4)}


def test_ignored_xids_change_nothing(plugin, kubelet):
    p = ready(plugin("4gpu.json"))
    g0, g3 = p.inventory.gpus[0], p.inventory.gpus[3]
    n = len(kubelet.endpoint().snapshots)
    p.control(*["xid %d %d" % (g0.index, x) for x in (13, 31, 43, 45, 68, 109)])
    p.control("xid %d 48" % g3.index)      # barrier: processed after the ignored ones
    snap = first_change(kubelet, n)
    assert unhealthy(snap) == {g3.uuid}
    assert unhealthy(kubelet.endpoint().snapshots[-1]) == {g3.uuid}


@pytest.mark.parametrize("xid", [31, 63, 79, 94, 95])
def test_other_xids_are_critical(plugin, kubelet, xid):
    env = {"DP_ENABLE_HEALTHCHECKS": "31"} if xid == 31 else {}
    p = ready(plugin("4gpu.json", env=env))
    g = p.inventory.gpus[2]
    n = len(kubelet.endpoint().snapshots)
    p.control("xid %d %d" % (g.index, xid))
    assert unhealthy(first_change(kubelet, n)) == {g.uuid}


def test_disable_healthchecks_list(plugin, kubelet):
    p = ready(plugin("4gpu.json", env={"DP_DISABLE_HEALTHCHECKS": "48,64"}))
    g0, g1 = p.inventory.gpus[0], p.inventory.gpus[1]
    n = len(kubelet.endpoint().snapshots)
    p.control("xid %d 48" % g0.index, "xid %d 64" % g0.index, "xid %d 74" % g1.index)
    snap = first_change(kubelet, n)
    assert unhealthy(snap) == {g1.uuid}


@pytest.mark.parametrize("value", ["all", "xids", "ALL"])
def test_disable_healthchecks_all(plugin, kubelet, value):
    p = plugin("4gpu.json", env={"DP_DISABLE_HEALTHCHECKS": value})
    n = len(kubelet.endpoint().snapshots)
    p.control("xid 0 48", "xid 1 79", "lost 2")
    time.sleep(scaled(0.5))
    snaps = kubelet.endpoint().snapshots
    assert all(not unhealthy(s) for s in snaps[n - 1:]), [unhealthy(s) for s in snaps]


def test_recovery_round_trip(plugin, kubelet):
    p = ready(plugin("4gpu.json", args=["--health-recovery-probes", "2", "--health-probe-interval", "100ms"]))
    g = p.inventory.gpus[0]
    n = len(kubelet.endpoint().snapshots)
    t0 = time.monotonic()
    p.control("xid %d 48" % g.index)
    assert unhealthy(first_change(kubelet, n)) == {g.uuid}
    snap = kubelet.wait_snapshot(RESOURCE, lambda s: not unhealthy(s), 5, "recovery to Healthy")
    assert snap.time - t0 >= 0.15, "recovered before 2 probes at 100ms"
    # and it can fail again
    n = len(kubelet.endpoint().snapshots)
    p.control("xid %d 48" % g.index)
    assert unhealthy(first_change(kubelet, n)) == {g.uuid}


def test_recovery_env_and_replicas(plugin, kubelet):
    p = ready(plugin("8gpu-nvlink.json", config=TS4,
               env={"GP_HEALTH_RECOVERY_PROBES": "2", "GP_HEALTH_PROBE_INTERVAL": "100ms"}))
    g = p.inventory.gpus[7]
    n = len(kubelet.endpoint().snapshots)
    p.control("xid %d 64" % g.index)
    assert len(unhealthy(first_change(kubelet, n))) == 4
    kubelet.wait_snapshot(RESOURCE, lambda s: not unhealthy(s), 5, "recovery of all replicas")


def test_lost_gpu_stays_unhealthy_and_rpcs_work(plugin, kubelet):
    p = ready(plugin("8gpu-nvlink.json", args=["--health-recovery-probes", "2",
                                         "--health-probe-interval", "100ms"]))
    inv = p.inventory
    g = inv.gpus[3]
    p.control("lost %d" % g.index)
    kubelet.wait_snapshot(RESOURCE, lambda s: unhealthy(s) == {g.uuid}, 3, "lost GPU Unhealthy")
    time.sleep(scaled(1.0))      # 10 probe intervals: a lost GPU must not come back
    assert unhealthy(kubelet.endpoint().snapshots[-1]) == {g.uuid}
    others = [x.uuid for x in inv.gpus if x is not g]
    got = kubelet.get_preferred_allocation(RESOURCE, others, [others[0]], 2)
    assert len(got) == 2 and g.uuid not in got
    got = kubelet.get_preferred_allocation(RESOURCE, others, [], 4)
    assert len(got) == 4
    r = kubelet.allocate(RESOURCE, others[:2])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(others[:2])
    assert kubelet.endpoint().options().get_preferred_allocation_available
    # kubelet restart rebuilds the plugin: the lost GPU is still Unhealthy
    kubelet.restart()
    snap = kubelet.wait_snapshot(RESOURCE, lambda s: True, 2)
    assert snap.health.get(g.uuid, UNHEALTHY) == UNHEALTHY


def test_lost_gpu_needs_restart(plugin, kubelet):
    """A lost GPU does not come back by probing, even once NVML answers again
    (`recover`); a restart (SIGHUP) rebuilds the plugin from NVML and it is Healthy again."""
    import signal
    p = ready(plugin("4gpu.json", args=["--health-recovery-probes", "2", "--health-probe-interval", "100ms"]))
    g = p.inventory.gpus[1]
    p.control("lost %d" % g.index)
    kubelet.wait_snapshot(RESOURCE, lambda s: unhealthy(s) == {g.uuid}, 3)
    p.control("recover %d" % g.index)
    time.sleep(scaled(0.5))
    assert unhealthy(kubelet.endpoint().snapshots[-1]) == {g.uuid}
    n = len(kubelet.registrations_for(RESOURCE))
    p.signal(signal.SIGHUP)
    kubelet.wait_for(lambda: len(kubelet.registrations_for(RESOURCE)) > n and
                     kubelet.endpoint().snapshots, 3, "re-registration after SIGHUP")
    kubelet.wait_snapshot(RESOURCE, lambda s: not unhealthy(s), 3, "Healthy after restart")


def test_lost_replicated_gpu(plugin, kubelet):
    p = ready(plugin("8gpu-nvlink.json", config=TS4))
    g = p.inventory.gpus[0]
    n = len(kubelet.endpoint().snapshots)
    p.control("lost %d" % g.index)
    assert unhealthy(first_change(kubelet, n)) == {"%s::%d" % (g.uuid, k) for k in range(4)}
    ids = [x for x in kubelet.endpoint().snapshots[-1].ids if gpu_of(x) != g.uuid]
    got = kubelet.get_preferred_allocation(RESOURCE, ids, [], 3)
    assert len(got) == 3


def test_allocate_of_unhealthy_gpu_still_answers(plugin, kubelet):
    """The kubelet decides what is available; Allocate of an Unhealthy ID by a kubelet that
    raced the update still answers (NVIDIA does not check health in Allocate)."""
    p = ready(plugin("4gpu.json"))
    g = p.inventory.gpus[0]
    p.control("xid %d 48" % g.index)
    kubelet.wait_snapshot(RESOURCE, lambda s: unhealthy(s) == {g.uuid}, 3)
    try:
        kubelet.allocate(RESOURCE, [g.uuid])
    except grpc.RpcError as e:
        assert g.uuid in e.details()
