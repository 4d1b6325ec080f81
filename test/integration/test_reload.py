"""SIGHUP builds the new state first and keeps the running one when the new one fails
(issue 7 section 3: configuration, NVML inventory and resources are all built before the
running servers are touched)."""

import os
import re
import shutil
import signal

import pytest

from conftest import RESOURCE
from test_cdi import load_spec, start_cdi

MIG_NONUNIFORM = "mig-mixed-nonuniform.json"
MIG_RESOURCE = "nvidia.com/mig-1g.5gb"
KEEPING = r"(?m)^E.*SIGHUP: keeping the running configuration and devices: "


def unhealthy(snap):
    return {i for i, h in snap.health.items() if h != "Healthy"}


def write_config(p, text):
    with open(p.config_path, "w") as f:
        f.write(text)


def assert_still_serving(p, kubelet, resource, registrations):
    """Same process, same sockets, no new registration, RPCs answer, health still pushes."""
    assert p.alive(), p.log()
    ep = kubelet.endpoint(resource)
    assert os.path.exists(p.socket(ep.registration.endpoint))
    assert len(kubelet.registrations) == registrations
    dev = ep.snapshots[-1].ids[0]
    reply = kubelet.allocate(resource, [dev])
    assert reply.envs or reply.cdi_devices  # cdi-cri names the device in cdi_devices only
    n = len(ep.snapshots)
    p.control("xid 0 48")
    kubelet.wait_for(lambda: len(ep.snapshots) > n, 3, "a snapshot after an XID")
    assert unhealthy(ep.snapshots[n])


FAIL_ON_INIT = [pytest.param({}, id="fail-on-init-error"),
                pytest.param({"FAIL_ON_INIT_ERROR": "false"}, id="no-fail-on-init-error")]


@pytest.mark.parametrize("env", FAIL_ON_INIT)
def test_config_that_does_not_apply_keeps_serving(plugin, kubelet, env):
    """`single` on mixed MIG partitions parses but cannot be served on this node: the running
    `mixed` resources stay served and registered, with an error naming why."""
    p = plugin(MIG_NONUNIFORM, config="version: v1\nflags:\n  migStrategy: mixed\n", env=env,
               wait=MIG_RESOURCE).health_ready()
    kubelet.wait_for(lambda: len(kubelet.resources()) == 3, 5, "the 3 MIG profiles registered")
    regs = len(kubelet.registrations)
    write_config(p, "version: v1\nflags:\n  migStrategy: single\n")
    p.signal(signal.SIGHUP)
    p.wait_log(KEEPING + r"the new configuration does not apply to this node: "
               r"mig-strategy single needs")
    assert_still_serving(p, kubelet, MIG_RESOURCE, regs)


@pytest.mark.parametrize("env", FAIL_ON_INIT)
def test_inventory_failure_keeps_serving(plugin, kubelet, env):
    """NVML cannot list the GPUs when the SIGHUP comes: the running devices stay served."""
    p = plugin("4gpu.json", env=env).health_ready()
    regs = len(kubelet.registrations)
    p.control("fail nvmlDeviceGetCount NVML_ERROR_UNKNOWN")
    p.signal(signal.SIGHUP)
    p.wait_log(KEEPING + r"cannot enumerate GPUs: nvmlDeviceGetCount\w* failed: Unknown Error")
    p.control("unfail nvmlDeviceGetCount")
    assert_still_serving(p, kubelet, RESOURCE, regs)


def test_malformed_devices_entry_keeps_serving(plugin, kubelet):
    """A `devices:` entry that is no GPU reference at all is a configuration error: the
    running configuration stays (this path needs no inventory)."""
    p = plugin("4gpu.json", config="version: v1\n").health_ready()
    regs = len(kubelet.registrations)
    write_config(p, "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                    "    - name: nvidia.com/gpu\n      replicas: 2\n      devices: [GPU-xyz]\n")
    p.signal(signal.SIGHUP)
    p.wait_log(r"(?m)^E.*SIGHUP: keeping the running configuration, the new one is invalid: "
               r".*GPU-xyz")
    assert_still_serving(p, kubelet, RESOURCE, regs)


def test_absent_device_applies_with_warning(plugin, kubelet):
    """A well-formed reference to a GPU this node does not have (one ConfigMap, many nodes)
    is only a warning: the new configuration applies to the GPUs that are here."""
    p = plugin("4gpu.json", config="version: v1\n")
    g = p.inventory.gpus[1]
    absent = "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff"
    write_config(p, "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                    "    - name: nvidia.com/gpu\n      replicas: 2\n"
                    "      devices: [%s, 1]\n" % absent)
    n = len(kubelet.registrations_for(RESOURCE))
    p.signal(signal.SIGHUP)
    snap = kubelet.wait_snapshot(
        RESOURCE, lambda s: g.uuid + "::1" in s.ids, 5, "replicas of GPU 1 after SIGHUP")
    assert len(kubelet.registrations_for(RESOURCE)) > n
    assert sorted(snap.ids) == sorted([u for u in p.inventory.uuids if u != g.uuid] +
                                      [g.uuid + "::0", g.uuid + "::1"])
    # The resources are built once per SIGHUP (not once to check, once to serve): one warning.
    warnings = re.findall(r"(?m)^W.*device \"%s\" of resource nvidia.com/gpu is not a device "
                          r"of this node" % absent, p.log())
    assert len(warnings) == 1, p.log()


def test_cdi_spec_unwritable_keeps_serving(plugin, kubelet, workdir):
    """With a cdi-* strategy the new spec is written before the running state is touched: when
    it cannot be (a file where the spec directory was), the running devices stay served and
    registered, with an error naming the directory; once the directory is back, a SIGHUP
    applies and writes the spec again."""
    p, tree, spec_dir = start_cdi(plugin, workdir)
    p.health_ready()
    regs = len(kubelet.registrations)
    shutil.rmtree(spec_dir)
    open(spec_dir, "w").close()
    p.signal(signal.SIGHUP)
    p.wait_log(KEEPING + r"cannot write the CDI spec \(--device-list-strategy cdi-\*\): "
               r"cannot create a file in %s: Not a directory" % re.escape(spec_dir))
    assert_still_serving(p, kubelet, RESOURCE, regs)
    os.unlink(spec_dir)
    os.mkdir(spec_dir)
    n = len(kubelet.registrations_for(RESOURCE))
    p.signal(signal.SIGHUP)
    kubelet.wait_for(lambda: len(kubelet.registrations_for(RESOURCE)) > n, 5,
                     "re-registration after the second SIGHUP")
    assert sorted(d["name"] for d in load_spec(spec_dir)["devices"]) == \
        sorted(p.inventory.uuids)


def test_gpu_lost_before_sighup(plugin, kubelet):
    """A GPU that fell off the bus does not make the reload fail: the new state lists it
    Unhealthy (under a derived ID, NVML no longer gives its UUID) and serves the others."""
    p = plugin("4gpu.json").health_ready()
    g = p.inventory.gpus[1]
    p.control("lost %d" % g.index)
    kubelet.wait_snapshot(RESOURCE, lambda s: unhealthy(s) == {g.uuid}, 3)
    n = len(kubelet.registrations_for(RESOURCE))
    p.signal(signal.SIGHUP)
    kubelet.wait_for(lambda: len(kubelet.registrations_for(RESOURCE)) > n and
                     kubelet.endpoint().snapshots, 5, "re-registration after SIGHUP")
    snap = kubelet.endpoint().snapshots[-1]
    assert unhealthy(snap) == {"GPU-unknown-index-1"}
    assert sorted(snap.ids) == sorted([u for u in p.inventory.uuids if u != g.uuid] +
                                      ["GPU-unknown-index-1"])
