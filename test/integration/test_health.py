"""XID health checking, recovery, lost GPUs (issue 3 item 2; research section 4)."""

import re
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


def probe_rounds_ran(p, kubelet, g):
    """Barrier for "nothing changed": an XID on the healthy GPU g, then its recovery. Recovery
    takes --health-recovery-probes probe rounds, so every GPU's probing had its chances
    meanwhile; what is still Unhealthy afterwards stayed so through those rounds."""
    n = len(kubelet.endpoint().snapshots)
    p.control("xid %d 48" % g.index)
    assert g.uuid in unhealthy(first_change(kubelet, n))
    kubelet.wait_snapshot(RESOURCE, lambda s: g.uuid not in unhealthy(s), 5,
                          "GPU %d back to Healthy" % g.index)


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
    p.control("xid %d 48" % g.index)
    assert unhealthy(first_change(kubelet, n)) == {g.uuid}
    kubelet.wait_snapshot(RESOURCE, lambda s: not unhealthy(s), 5, "recovery to Healthy")
    # after the number of probes asked for, not a wall-clock guess (slow under valgrind)
    p.wait_log(r"GPU 0 .*answered 2 health probes in a row")
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
    probe_rounds_ran(p, kubelet, inv.gpus[0])   # a lost GPU must not come back by probing
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
    assert sorted(snap.ids) == sorted(inv.uuids)
    assert unhealthy(snap) == {g.uuid}


def test_lost_gpu_needs_restart(plugin, kubelet):
    """A lost GPU does not come back by probing, even once NVML answers again
    (`recover`); a restart (SIGHUP) rebuilds the plugin from NVML and it is Healthy again."""
    import signal
    p = ready(plugin("4gpu.json", args=["--health-recovery-probes", "2", "--health-probe-interval", "100ms"]))
    g = p.inventory.gpus[1]
    p.control("lost %d" % g.index)
    kubelet.wait_snapshot(RESOURCE, lambda s: unhealthy(s) == {g.uuid}, 3)
    p.control("recover %d" % g.index)
    probe_rounds_ran(p, kubelet, p.inventory.gpus[0])
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
    """The kubelet decides what is available; Allocate of an Unhealthy ID (an XID, the GPU is
    still there) by a kubelet that raced the update still answers, as NVIDIA's does."""
    p = ready(plugin("4gpu.json"))
    g = p.inventory.gpus[0]
    p.control("xid %d 48" % g.index)
    kubelet.wait_snapshot(RESOURCE, lambda s: unhealthy(s) == {g.uuid}, 3)
    assert kubelet.allocate(RESOURCE, [g.uuid]).envs["NVIDIA_VISIBLE_DEVICES"] == g.uuid


@pytest.mark.parametrize("config", [None, TS4], ids=["whole", "replicas"])
def test_allocate_of_lost_gpu_is_refused(plugin, kubelet, config):
    """Issue 7: a device whose GPU fell off the bus cannot run a container: Allocate answers
    FAILED_PRECONDITION naming the device; the other GPUs still allocate."""
    p = ready(plugin("4gpu.json", config=config))
    g, other = p.inventory.gpus[2], p.inventory.gpus[3]
    suffix = "::1" if config else ""
    p.control("lost %d" % g.index)
    kubelet.wait_snapshot(RESOURCE, lambda s: g.uuid + suffix in unhealthy(s), 3)
    with pytest.raises(grpc.RpcError) as e:
        kubelet.allocate(RESOURCE, [other.uuid + suffix, g.uuid + suffix])
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert g.uuid + suffix in e.value.details()
    assert kubelet.allocate(RESOURCE, [other.uuid + suffix]).envs["NVIDIA_VISIBLE_DEVICES"] == \
        other.uuid


# ---- health monitoring that cannot start, or breaks (issue 7) ----------------------------

RETRY_RE = r"retrying in (\d+) ms"


def test_event_set_create_failure_recovers(plugin, kubelet):
    """nvmlEventSetCreate fails at start: every device is Unhealthy (unmonitored GPUs are not
    trusted) from the first snapshot on, the plugin retries with backoff, and once the event
    set exists the devices are Healthy and XIDs are seen again."""
    p = plugin("4gpu.json", control=["fail nvmlEventSetCreate NVML_ERROR_UNKNOWN"])
    first = kubelet.endpoint().snapshots[0]
    assert unhealthy(first) == set(p.inventory.uuids)
    p.wait_log(r"(?m)^E.*nvmlEventSetCreate failed: Unknown Error.*" + RETRY_RE)
    p.wait_log(r"(?m)^W.*Health checks not ready.*" + RETRY_RE)   # a retry that failed too
    p.control("unfail nvmlEventSetCreate")
    kubelet.wait_snapshot(RESOURCE, lambda s: not unhealthy(s), 10, "all Healthy once monitored")
    p.health_ready()
    g = p.inventory.gpus[1]
    n = len(kubelet.endpoint().snapshots)
    p.control("xid %d 48" % g.index)
    assert unhealthy(first_change(kubelet, n)) == {g.uuid}


def test_register_events_failure_recovers(plugin, kubelet):
    """One GPU's nvmlDeviceRegisterEvents fails: that GPU alone is Unhealthy until a retry
    registers it, even with --health-recovery-probes 0 (a monitoring failure is not a device
    failure); then its XIDs count."""
    p = plugin("4gpu.json", args=["--health-recovery-probes", "0"],
               control=["fail nvmlDeviceRegisterEvents NVML_ERROR_UNKNOWN 1"])
    g = p.inventory.gpus[1]
    assert unhealthy(kubelet.endpoint().snapshots[0]) == {g.uuid}
    p.wait_log(r"(?m)^E.*GPU 1 .*cannot register for XID events: Unknown Error.*" + RETRY_RE)
    p.control("unfail nvmlDeviceRegisterEvents")
    kubelet.wait_snapshot(RESOURCE, lambda s: not unhealthy(s), 10, "GPU 1 Healthy once registered")
    p.health_ready()
    n = len(kubelet.endpoint().snapshots)
    p.control("xid %d 48" % g.index)
    assert unhealthy(first_change(kubelet, n)) == {g.uuid}


def test_event_wait_failure_backs_off_and_recovers(plugin, kubelet):
    """nvmlEventSetWait starts failing: all devices Unhealthy, one error, then retries whose
    delay doubles (not an error every 250 ms); when waiting works again all are Healthy."""
    p = ready(plugin("4gpu.json"))
    p.control("fail nvmlEventSetWait NVML_ERROR_UNKNOWN")
    kubelet.wait_snapshot(RESOURCE, lambda s: unhealthy(s) == set(p.inventory.uuids), 3,
                          "all Unhealthy while events cannot be read")
    p.wait_log(r"still fails.*retrying in 1000 ms", 10)
    log = p.log()
    delays = [int(d) for d in re.findall(r"waiting for NVML events.*" + RETRY_RE, log)]
    assert delays[:3] == [250, 500, 1000], delays
    assert len(re.findall(r"(?m)^E.*waiting for NVML events failed", log)) == 1, log
    p.control("unfail nvmlEventSetWait")
    kubelet.wait_snapshot(RESOURCE, lambda s: not unhealthy(s), 10, "all Healthy again")
    g = p.inventory.gpus[3]
    n = len(kubelet.endpoint().snapshots)
    p.control("xid %d 48" % g.index)
    assert unhealthy(first_change(kubelet, n)) == {g.uuid}


# ---- recovery probes check memory repairs (issue 7) --------------------------------------

@pytest.mark.parametrize("state,why", [
    ("remap 0 pending", "a row remapping is pending"),
    ("remap 0 failed", "a row remapping failed"),
    ("retired-pages 0 pending", "retired pages are pending")])
def test_recovery_waits_for_memory_repairs(plugin, kubelet, state, why):
    """A GPU that answers NVML but has a row remap pending (or failed) or retired pages
    pending is not Healthy yet: the probe says why; once the driver is done it recovers."""
    p = ready(plugin("4gpu.json", args=["--health-recovery-probes", "1",
                                        "--health-probe-interval", "100ms"]))
    g = p.inventory.gpus[0]
    p.control(state)
    n = len(kubelet.endpoint().snapshots)
    p.control("xid %d 48" % g.index)
    assert unhealthy(first_change(kubelet, n)) == {g.uuid}
    p.wait_log(r"GPU 0 .*fails its health probe: %s" % re.escape(why))
    assert unhealthy(kubelet.endpoint().snapshots[-1]) == {g.uuid}
    p.control(state.split()[0] + " 0 clear")
    kubelet.wait_snapshot(RESOURCE, lambda s: not unhealthy(s), 5, "recovery once repaired")


@pytest.mark.parametrize("error", ["NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND"])
def test_recovery_without_memory_repair_queries(plugin, kubelet, error):
    """Old drivers lack the two queries: recovery then works as before."""
    p = ready(plugin("4gpu.json", args=["--health-recovery-probes", "2",
                                        "--health-probe-interval", "100ms"],
                     control=["fail nvmlDeviceGetRemappedRows %s" % error,
                              "fail nvmlDeviceGetRetiredPagesPendingStatus %s" % error]))
    g = p.inventory.gpus[2]
    n = len(kubelet.endpoint().snapshots)
    p.control("xid %d 48" % g.index)
    assert unhealthy(first_change(kubelet, n)) == {g.uuid}
    kubelet.wait_snapshot(RESOURCE, lambda s: not unhealthy(s), 5, "recovery")
