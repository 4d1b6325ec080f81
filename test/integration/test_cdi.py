"""CDI spec writing (issue 7: with a cdi-* strategy the plugin writes the spec itself), the
host checks of --imex-required and the refusal of options gpupool cannot honour."""

import json
import os
import re

from conftest import RESOURCE

CDI_VENDOR_CLASS = "k8s.device-plugin.nvidia.com/gpu"
SPEC_NAME = "k8s.device-plugin.nvidia.com-gpu.json"
LIBDIR = "/usr/lib/x86_64-linux-gnu"


def driver_version(inventory):
    with open(inventory.path) as f:
        return json.load(f)["driver_version"]


def make_driver_tree(root, version):
    """A driver root as the plugin's container sees it: versioned libraries with their
    soname links, one library without a link, binaries and some device nodes."""
    lib = os.path.join(root, LIBDIR.lstrip("/"))
    os.makedirs(lib)
    for name in ("libnvidia-ml.so", "libcuda.so"):
        real = "%s.%s" % (name, version)
        open(os.path.join(lib, real), "w").write("fake library\n")
        os.symlink(real, os.path.join(lib, name + ".1"))
    open(os.path.join(lib, "libnvidia-ptxjitcompiler.so.1"), "w").write("fake\n")
    os.makedirs(os.path.join(root, "usr", "bin"))
    for b in ("nvidia-smi", "nvidia-debugdump"):
        open(os.path.join(root, "usr", "bin", b), "w").write("#!/bin/sh\n")
    os.makedirs(os.path.join(root, "dev"))
    for node in ("nvidiactl", "nvidia-uvm"):
        open(os.path.join(root, "dev", node), "w").close()
    return root


def load_spec(spec_dir):
    with open(os.path.join(spec_dir, SPEC_NAME)) as f:
        return json.load(f)


def start_cdi(plugin, workdir, extra_args=(), inventory="4gpu.json", strategy="cdi-cri",
              wait=RESOURCE):
    tree = os.path.join(workdir, "driver-root")
    if not os.path.exists(tree):
        from inventory import Inventory
        make_driver_tree(tree, driver_version(Inventory(inventory)))
    spec_dir = os.path.join(workdir, "cdi")
    # The NVML library is found on LD_LIBRARY_PATH (fake NVML): the driver root stays "/",
    # the files are looked for under the container driver root.
    args = ["--device-list-strategy", strategy, "--container-driver-root", tree,
            "--dev-root", tree, "--cdi-spec-dir", spec_dir] + list(extra_args)
    return plugin(inventory=inventory, args=args, wait=wait), tree, spec_dir


def test_spec_written_with_cdi_cri(plugin, kubelet, workdir):
    p, tree, spec_dir = start_cdi(plugin, workdir)
    spec = load_spec(spec_dir)
    version = driver_version(p.inventory)
    assert spec["cdiVersion"] == "0.5.0"
    assert spec["kind"] == CDI_VENDOR_CLASS
    # One device per served ID, with its /dev/nvidia<minor> under the dev root.
    by_name = {d["name"]: d for d in spec["devices"]}
    assert sorted(by_name) == sorted(p.inventory.uuids)
    for g in p.inventory.gpus:
        nodes = by_name[g.uuid]["containerEdits"]["deviceNodes"]
        assert nodes == [{"path": "/dev/nvidia%d" % g.minor,
                          "hostPath": "%s/dev/nvidia%d" % (tree, g.minor)}]
    edits = spec["containerEdits"]
    assert edits["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    # Control nodes: nvidiactl, and only the optional ones that exist.
    assert [n["path"] for n in edits["deviceNodes"]] == ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    assert edits["deviceNodes"][0]["hostPath"] == tree + "/dev/nvidiactl"
    # Libraries: the file a soname resolves to, read-only, host path under the driver root.
    mounts = {m["containerPath"]: m for m in edits["mounts"]}
    for want in ("%s/libcuda.so.%s" % (LIBDIR, version), "%s/libnvidia-ml.so.%s" % (LIBDIR, version),
                 LIBDIR + "/libnvidia-ptxjitcompiler.so.1", "/usr/bin/nvidia-smi",
                 "/usr/bin/nvidia-debugdump"):
        assert want in mounts, sorted(mounts)
        assert mounts[want]["hostPath"] == want  # driver root "/"
        assert "ro" in mounts[want]["options"] and "bind" in mounts[want]["options"]
    assert "/usr/bin/nvidia-persistenced" not in mounts  # absent from the tree
    assert not any(m.endswith("libnvidia-opencl.so.1") for m in mounts)
    # Hooks: links for the sonames, CUDA compat with the driver version, ldcache folder.
    hooks = {h["args"][2]: h for h in edits["hooks"]}
    assert all(h["path"] == "/usr/bin/nvidia-ctk" and h["hookName"] == "createContainer"
               and h["args"][:2] == ["nvidia-ctk", "hook"] for h in edits["hooks"])
    links = hooks["create-symlinks"]["args"][3:]
    assert "libcuda.so.%s::%s/libcuda.so.1" % (version, LIBDIR) in links
    assert "libnvidia-ml.so.%s::%s/libnvidia-ml.so.1" % (version, LIBDIR) in links
    assert hooks["enable-cuda-compat"]["args"][3:] == ["--host-driver-version=" + version]
    assert hooks["update-ldcache"]["args"][3:] == ["--folder", LIBDIR]
    # Allocate names devices that the spec defines.
    r = kubelet.allocate(RESOURCE, p.inventory.uuids[:2])
    names = [c.name for c in r.cdi_devices]
    assert names == ["%s=%s" % (CDI_VENDOR_CLASS, u) for u in p.inventory.uuids[:2]]
    for n in names:
        assert n.split("=", 1)[1] in by_name
    # Written atomically: no temporary file is left next to it.
    assert os.listdir(spec_dir) == [SPEC_NAME]


def test_spec_hooks_disabled_and_hook_path(plugin, kubelet, workdir):
    p, tree, spec_dir = start_cdi(plugin, workdir, [
        "--cdi-disable-hooks", "update-ldcache,enable-cuda-compat",
        "--nvidia-cdi-hook-path", "/opt/bin/nvidia-cdi-hook"])
    hooks = load_spec(spec_dir)["containerEdits"]["hooks"]
    assert [h["args"][:2] for h in hooks] == [["nvidia-cdi-hook", "create-symlinks"]]
    assert hooks[0]["path"] == "/opt/bin/nvidia-cdi-hook"


def test_spec_all_hooks_disabled(plugin, kubelet, workdir):
    p, tree, spec_dir = start_cdi(plugin, workdir, ["--cdi-disable-hooks", "all"])
    assert "hooks" not in load_spec(spec_dir)["containerEdits"]


def test_spec_index_strategy_with_annotations(plugin, kubelet, workdir):
    p, tree, spec_dir = start_cdi(plugin, workdir, ["--device-id-strategy", "index"],
                                  strategy="cdi-annotations")
    names = sorted(d["name"] for d in load_spec(spec_dir)["devices"])
    assert names == sorted(str(g.index) for g in p.inventory.gpus)
    g = p.inventory.gpus[1]
    (value,) = kubelet.allocate(RESOURCE, [g.uuid]).annotations.values()
    assert value == "%s=%d" % (CDI_VENDOR_CLASS, g.index)


def test_spec_mig_devices(plugin, kubelet, workdir):
    p, tree, spec_dir = start_cdi(plugin, workdir, ["--mig-strategy", "mixed"],
                                  inventory="8a100-mig-mixed.json", wait=None)
    kubelet.wait_for(lambda: kubelet.registrations, 5, "a MIG resource's registration")
    spec = load_spec(spec_dir)
    migs = [m.uuid for g in p.inventory.gpus for m in g.mig]
    assert migs and sorted(d["name"] for d in spec["devices"]) == sorted(migs)
    by_name = {d["name"]: d for d in spec["devices"]}
    for g in p.inventory.gpus:
        for m in g.mig:
            nodes = by_name[m.uuid]["containerEdits"]["deviceNodes"]
            assert nodes[0]["path"] == "/dev/nvidia%d" % g.minor


def test_no_spec_without_cdi_strategy(plugin, kubelet, workdir):
    spec_dir = os.path.join(workdir, "cdi")
    plugin(args=["--cdi-spec-dir", spec_dir])
    assert not os.path.exists(spec_dir)


def test_spec_dir_unwritable_fails_start(plugin, kubelet, workdir):
    blocker = os.path.join(workdir, "not-a-dir")
    open(blocker, "w").close()
    p = plugin(args=["--device-list-strategy", "cdi-cri", "--cdi-spec-dir", blocker + "/cdi"],
               wait=None)
    assert p.wait_exit(5) != 0
    assert "Failed to write the CDI spec" in p.log()
    assert kubelet.registrations == []


def test_imex_required_without_channel_fails_start(plugin, kubelet, workdir):
    devroot = os.path.join(workdir, "devroot")
    os.makedirs(os.path.join(devroot, "dev"))
    p = plugin(args=["--imex-channel-ids", "0", "--imex-required", "--dev-root", devroot],
               wait=None)
    assert p.wait_exit(5) != 0
    log = p.log()
    assert devroot + "/dev/nvidia-caps-imex-channels/channel0 does not exist" in log, log
    assert kubelet.registrations == []


def test_imex_channel_present_is_injected(plugin, kubelet, workdir):
    devroot = os.path.join(workdir, "devroot")
    os.makedirs(os.path.join(devroot, "dev", "nvidia-caps-imex-channels"))
    open(os.path.join(devroot, "dev", "nvidia-caps-imex-channels", "channel0"), "w").close()
    p = plugin(args=["--imex-channel-ids", "0", "--imex-required", "--dev-root", devroot])
    r = kubelet.allocate(RESOURCE, p.inventory.uuids[:1])
    assert r.envs["NVIDIA_IMEX_CHANNELS"] == "0"


def test_imex_channel_missing_not_required_is_dropped(plugin, kubelet, workdir):
    devroot = os.path.join(workdir, "devroot")
    os.makedirs(os.path.join(devroot, "dev"))
    p = plugin(args=["--imex-channel-ids", "0", "--dev-root", devroot])
    r = kubelet.allocate(RESOURCE, p.inventory.uuids[:1])
    assert "NVIDIA_IMEX_CHANNELS" not in r.envs
    assert "containers get no IMEX channel" in p.log()


def test_unknown_cdi_feature_flag_refused(plugin, kubelet):
    p = plugin(env={"CDI_FEATURE_FLAGS": "enable-explicit-driver-libraries"}, wait=None)
    assert p.wait_exit(5) != 0
    assert "does not implement this nvidia-ctk feature" in p.log()


def test_read_only_spec_dir_keeps_serving(plugin, kubelet, workdir):
    """issue 17 item 4: the spec directory read-only (a bind mount remounted ro; root ignores
    modes) with last run's spec in it: the plugin starts, registers and answers Allocate with an
    error naming the directory and gpupool_deviceplugin_file_write_errors_total counting it; the
    old spec stays whole; a SIGHUP meanwhile keeps serving too."""
    import signal
    import subprocess
    import urllib.request

    import pytest
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root (CI runs as root)")
    p, tree, spec_dir = start_cdi(plugin, workdir)
    before = open(os.path.join(spec_dir, SPEC_NAME)).read()
    assert p.stop() == 0
    subprocess.run(["mount", "--bind", spec_dir, spec_dir], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", spec_dir], check=True)
        n = len(kubelet.registrations_for(RESOURCE))
        p2, _, _ = start_cdi(plugin, workdir, extra_args=["--metrics-addr", "127.0.0.1:0"],
                             wait=None)
        kubelet.wait_for(lambda: len(kubelet.registrations_for(RESOURCE)) > n, 5,
                         "registration with a read-only CDI spec directory")
        p2.wait_log(r"Cannot replace the CDI spec \(--device-list-strategy cdi-\*\): cannot "
                    r"create a file in %s: Read-only file system; serving with the spec already "
                    r"in" % re.escape(spec_dir))
        u = p2.inventory.uuids[0]
        resp = kubelet.allocate(RESOURCE, [u])
        assert [c.name for c in resp.cdi_devices] == [CDI_VENDOR_CLASS + "=" + u], resp
        url = "http://%s/metrics" % p2.wait_log(
            r"Serving Prometheus metrics on http://(\S+)/metrics").group(1)

        def write_errors():
            text = urllib.request.urlopen(url, timeout=5).read().decode()
            return int(re.search(r"(?m)^gpupool_deviceplugin_file_write_errors_total (\d+)",
                                 text).group(1))
        assert write_errors() >= 1
        p2.signal(signal.SIGHUP)
        p2.wait_log(r"cannot write the CDI spec .*Read-only file system")
        assert write_errors() >= 2 and p2.alive()
        assert kubelet.allocate(RESOURCE, [u]) is not None
        assert open(os.path.join(spec_dir, SPEC_NAME)).read() == before
        assert os.listdir(spec_dir) == [SPEC_NAME]
    finally:
        subprocess.run(["umount", "-l", spec_dir], check=False)
