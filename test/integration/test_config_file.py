"""NVIDIA-compatible config file, precedence, validation (issue 3 item 1; research section 2)."""

import json
import os
import re
import signal
import time

import pytest

from conftest import RESOURCE, scaled

# NVIDIA README, "Configuration File" example, unchanged (driver root made harmless below).
NVIDIA_EXAMPLE = """version: v1
flags:
  migStrategy: "none"
  failOnInitError: true
  nvidiaDriverRoot: "/"
  plugin:
    passDeviceSpecs: false
    deviceListStrategy: envvar
    deviceIDStrategy: uuid
"""


def test_nvidia_example_loads_unchanged(plugin, kubelet):
    p = plugin(config=NVIDIA_EXAMPLE)
    u = p.inventory.uuids
    assert sorted(kubelet.endpoint().snapshots[0].ids) == sorted(u)
    assert kubelet.allocate(RESOURCE, u[:1]).envs["NVIDIA_VISIBLE_DEVICES"] == u[0]


def test_config_via_env(plugin, kubelet, workdir):
    import os
    path = os.path.join(workdir, "env-config.yaml")
    open(path, "w").write("version: v1\nflags:\n  plugin:\n    deviceIDStrategy: index\n")
    p = plugin(env={"CONFIG_FILE": path})
    g = p.inventory.gpus[1]
    assert kubelet.allocate(RESOURCE, [g.uuid]).envs["NVIDIA_VISIBLE_DEVICES"] == str(g.index)


def test_device_list_strategy_as_list(plugin, kubelet):
    cfg = """version: v1
flags:
  plugin:
    deviceListStrategy:
    - envvar
    - cdi-cri
"""
    p = plugin(config=cfg)
    u = p.inventory.uuids[:2]
    r = kubelet.allocate(RESOURCE, u)
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(u)
    assert [c.name for c in r.cdi_devices] == ["k8s.device-plugin.nvidia.com/gpu=" + x for x in u]


def test_empty_version_is_v1(plugin, kubelet):
    p = plugin(config="flags:\n  plugin:\n    deviceIDStrategy: index\n")
    g = p.inventory.gpus[0]
    assert kubelet.allocate(RESOURCE, [g.uuid]).envs["NVIDIA_VISIBLE_DEVICES"] == str(g.index)


FILE_INDEX = "version: v1\nflags:\n  plugin:\n    deviceIDStrategy: index\n"
FILE_UUID = "version: v1\nflags:\n  plugin:\n    deviceIDStrategy: uuid\n"


@pytest.mark.parametrize("cfg,args,env,want", [
    (FILE_INDEX, [], {}, "index"),                                              # file > default
    (FILE_INDEX, ["--device-id-strategy", "uuid"], {}, "uuid"),                 # flag > file
    (FILE_UUID, [], {"DEVICE_ID_STRATEGY": "index"}, "index"),                  # env > file
    (FILE_UUID, ["--device-id-strategy", "uuid"], {"DEVICE_ID_STRATEGY": "index"}, "uuid"),  # flag > env
], ids=["file", "flag>file", "env>file", "flag>env"])
def test_precedence(plugin, kubelet, cfg, args, env, want):
    p = plugin(config=cfg, args=args, env=env)
    g = p.inventory.gpus[2]
    got = kubelet.allocate(RESOURCE, [g.uuid]).envs["NVIDIA_VISIBLE_DEVICES"]
    assert got == (str(g.index) if want == "index" else g.uuid)


def test_merged_config_logged_as_json(plugin, kubelet):
    p = plugin(config=FILE_INDEX)
    p.wait_log(r"deviceIDStrategy", 3)
    time.sleep(scaled(0.1))   # let the rest of a multi-line JSON block land
    log = p.log()
    # find a JSON object in the log that carries the merged flags
    for m in re.finditer(r"\{", log):
        try:
            obj, _ = json.JSONDecoder().raw_decode(log[m.start():])
        except ValueError:
            continue
        text = json.dumps(obj)
        if "deviceIDStrategy" in text:
            assert '"index"' in text
            return
    raise AssertionError("merged configuration not logged as JSON:\n" + log)


@pytest.mark.parametrize("cfg,line,word", [
    ("version: v1\nflags:\n  migStrategy: none\n  bogusKey: 1\n", 4, "bogusKey"),
    ("version: v1\nflags:\n  plugin:\n    deviceIDStrategy: serial\n", 4, "serial"),
    ("version: v1\nflags:\n  failOnInitError: maybe\n", 3, "maybe"),
    ("version: v2\n", 1, "version"),
    ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
     "      replicas: many\n", 6, "many"),
    ("version: v1\nflags:\n  plugin:\n    deviceListStrategy: [envvar, nope]\n", 4, "nope"),
    ("version: v1\nflags: [\n", None, None),
], ids=["unknown-key", "bad-enum", "bad-bool", "bad-version", "bad-int", "bad-list-item", "syntax"])
def test_invalid_config_rejected(plugin, kubelet, cfg, line, word):
    p = plugin(config=cfg, wait=None)
    rc = p.wait_exit(5)
    assert rc != 0
    log = p.log()
    path = re.escape(p.config_path)
    if line is None:
        assert re.search(path + r":\d+:", log), log
    else:
        assert re.search(path + r":%d:" % line, log), log
        assert word in log, log
    assert kubelet.registrations == []


def test_missing_config_file(plugin, kubelet):
    p = plugin(args=["--config-file", "/nonexistent/gpupool.yaml"], wait=None)
    assert p.wait_exit(5) != 0
    assert "/nonexistent/gpupool.yaml" in p.log()


def test_resources_gpus_pattern(plugin, kubelet):
    """gpupool implements resources.gpus (NVIDIA drops it, issue #1786).
    ASSUMPTION: a pattern matching every GPU name renames the whole-GPU resource."""
    cfg = """version: v1
resources:
  gpus:
  - pattern: "*"
    name: gpu-any
"""
    p = plugin(config=cfg, wait="nvidia.com/gpu-any")
    assert sorted(kubelet.endpoint("nvidia.com/gpu-any").snapshots[0].ids) == sorted(p.inventory.uuids)


def test_sighup_reloads_config(plugin, kubelet):
    import signal
    p = plugin(config=FILE_UUID)
    g = p.inventory.gpus[0]
    assert kubelet.allocate(RESOURCE, [g.uuid]).envs["NVIDIA_VISIBLE_DEVICES"] == g.uuid
    open(p.config_path, "w").write(FILE_INDEX)
    p.signal(signal.SIGHUP)
    kubelet.wait_for(lambda: len(kubelet.registrations_for(RESOURCE)) >= 2 and
                     kubelet.endpoint().snapshots, 3, "re-registration after SIGHUP")
    assert kubelet.allocate(RESOURCE, [g.uuid]).envs["NVIDIA_VISIBLE_DEVICES"] == str(g.index)


# NVIDIA's documented example files (test/configs/nvidia/), loaded unchanged.
# (file, inventory, args, {resource: device count} or None for "must be rejected")
def _mig_counts(inv_name, replicas):
    from inventory import Inventory
    inv = Inventory(inv_name)
    out = {}
    for m in inv.migs():
        if m.full_profile:
            r = "nvidia.com/mig-" + m.profile
            out[r] = out.get(r, 0) + replicas.get(r, 1)
    return out


NVIDIA_FILES = [
    ("flags-only.yaml", "4gpu.json", {"nvidia.com/gpu": 4}),
    ("time-slicing.yaml", "8gpu-nvlink.json", {"nvidia.com/gpu": 80}),
    ("time-slicing-operator.yaml", "8gpu-nvlink.json", {"nvidia.com/gpu": 32}),
    ("rename-by-default.yaml", "8gpu-nvlink.json", {"nvidia.com/gpu.shared": 80}),
    ("mig-mixed.yaml", "8a100-mig-mixed.json", "mig"),
    ("multiple-resources-mig-mixed.yaml", "8a100-mig-mixed.json", "mig-replicas"),
    ("mps.yaml", "4gpu.json", None),  # NVIDIA's example has no mpsRoot: refused as NVIDIA does
]


@pytest.mark.parametrize("fname,inventory,want", NVIDIA_FILES, ids=[f[0] for f in NVIDIA_FILES])
def test_nvidia_config_files(plugin, kubelet, fname, inventory, want):
    import os
    from conftest import ROOT
    path = os.path.join(ROOT, "test", "configs", "nvidia", fname)
    if not os.path.exists(path):
        pytest.skip("missing " + path)
    p = plugin(inventory, args=["--config-file", path], wait=None)
    if want is None:
        assert p.wait_exit(5) != 0
        assert "using MPS requires --mps-root" in p.log()
        return
    if want == "mig":
        want = _mig_counts(inventory, {})
    elif want == "mig-replicas":
        want = _mig_counts(inventory, {"nvidia.com/mig-1g.5gb": 2, "nvidia.com/mig-2g.10gb": 2,
                                       "nvidia.com/mig-3g.20gb": 3})
    kubelet.wait_for(lambda: all(kubelet.endpoints.get(r) and kubelet.endpoints[r].snapshots
                                 for r in want), 5, "registration of %s" % sorted(want))
    assert set(kubelet.resources()) == set(want)
    for r, n in want.items():
        assert len(kubelet.endpoint(r).snapshots[0].ids) == n, r


def test_mps_root_in_file(plugin, kubelet):
    """flags.mpsRoot is accepted as NVIDIA accepts it; unused without sharing.mps."""
    p = plugin(config="version: v1\nflags:\n  mpsRoot: /run/nvidia/mps\n")
    p.wait_log(r'"mpsRoot": "/run/nvidia/mps"')
    p.stop()
    # The kubelet already holds the first one's registration: wait for the second's own
    # start, not for a registration (stopping it before its handlers were set was a race).
    p = plugin(config="version: v1\nflags:\n  mpsRoot: /srv/mps\n")
    p.wait_log(r'"mpsRoot": "/srv/mps"')


# -- D8 of the reliability review: a config file cannot hang or stall start-up ---------------

def deep_config(workdir, depth, name="deep.yaml"):
    path = os.path.join(workdir, name)
    with open(path, "w") as f:
        f.write("version: v1\nflags: " + "[" * depth + "]" * depth + "\n")
    return path


def test_deep_nesting_refused_at_once(plugin, kubelet, workdir):
    """40,000 nested flow sequences (78 KB) took libyaml 7 s (its time grows with the square of
    the depth); the plugin now refuses anything nested deeper than 64 levels, at once."""
    path = deep_config(workdir, 40000)
    t0 = time.monotonic()
    p = plugin(args=["--config-file", path], wait=None)
    assert p.wait_exit(3) != 0
    assert time.monotonic() - t0 < scaled(2), "took %.1fs" % (time.monotonic() - t0)
    assert re.search(re.escape(path) + r":2: invalid YAML: nested deeper than 64 levels", p.log()), p.log()
    assert kubelet.registrations == []


def test_nesting_at_the_limit_parses(plugin, kubelet, workdir):
    """64 levels is still YAML the schema judges (a list where a mapping belongs), not a depth error."""
    path = deep_config(workdir, 63)
    p = plugin(args=["--config-file", path], wait=None)
    assert p.wait_exit(3) != 0
    assert "nested deeper" not in p.log() and "flags" in p.log(), p.log()


def test_sigterm_while_parsing_config(plugin, kubelet, workdir):
    """SIGTERM during start-up with a large config ends the process promptly (signals used to be
    blocked before the parse, so it ran to the end: 6 s for this file)."""
    path = deep_config(workdir, 40000)
    p = plugin(args=["--config-file", path], wait=None)
    time.sleep(0.3)
    p.proc.send_signal(signal.SIGTERM)
    p.wait_exit(1)
    p.expect_clean_exit = False


@pytest.mark.parametrize("kind", ["fifo", "oversize", "chardev"])
def test_non_regular_or_oversize_config_refused(plugin, kubelet, workdir, kind):
    """A FIFO as --config-file blocked forever in open(); a device or a file over 4 MiB (a
    ConfigMap holds 1 MiB) is refused too, with one line naming the file."""
    if kind == "fifo":
        path = os.path.join(workdir, "config.fifo")
        os.mkfifo(path)
        want = "it is a FIFO, not a regular file"
    elif kind == "oversize":
        path = os.path.join(workdir, "big.yaml")
        with open(path, "w") as f:
            f.write("version: v1\n" + "#" * (5 << 20) + "\n")
        want = "config file larger than 4194304 bytes"
    else:
        path = "/dev/zero"
        want = "it is a device, not a regular file"
    p = plugin(args=["--config-file", path], wait=None)
    assert p.wait_exit(2) != 0
    assert path + ": cannot read config file: " + want in p.log() or want in p.log(), p.log()
