"""GFD-compatible node labels written by the device plugin, --node-labels (issue 10 item 5).

The fake API server records the PATCH; the expected values follow NVIDIA's gpu-feature-discovery
(product with spaces -> '-', '-SHARED' for a time-sliced resource that is not renamed, MIG
profile labels under the mixed strategy)."""

import json
import os
import signal
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "test", "fakeapi"))
from fake_apiserver import FakeApiServer  # noqa: E402

NODE = "gpu-node-1"
OWNED = "gpupool.io/node-labels"

TS4 = """version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""


@pytest.fixture
def api():
    srv = FakeApiServer(fixture={"nodes": [{"metadata": {"name": NODE, "labels": {
        "kubernetes.io/hostname": NODE, "nvidia.com/gpu.driver.major": "550"}}}]}).start()
    yield srv
    srv.stop()


@pytest.fixture
def labelled(plugin, api, workdir):
    def start(inventory, args=(), config=None, wait_written=True):
        kc = os.path.join(workdir, "kubeconfig")
        with open(kc, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "t",
                       "clusters": [{"name": "c", "cluster": {"server": api.url}}],
                       "contexts": [{"name": "t", "context": {"cluster": "c"}}]}, f)
        p = plugin(inventory, config=config, wait="nvidia.com/gpu" if "mixed" not in
                   " ".join(args) else None,
                   args=["--node-labels", "--node-name", NODE, "--kubeconfig", kc] + list(args))
        if wait_written:
            p.wait_log(r"Node labels written to node %s" % NODE)
        return p
    return start


def node_labels(api):
    node = api.store.get("nodes", None, NODE)
    return node["metadata"].get("labels", {}), node["metadata"].get("annotations", {})


def patches(api):
    return [r for r in api.requests() if r["method"] == "PATCH"]


def test_whole_gpus(labelled, api):
    labelled("4gpu.json")
    labels, annotations = node_labels(api)
    assert patches(api)[0]["path"] == "/api/v1/nodes/" + NODE
    assert patches(api)[0]["headers"]["Content-Type"] == "application/merge-patch+json"
    ours = {k: v for k, v in labels.items() if k in annotations[OWNED].split(",")}
    assert ours == {
        "nvidia.com/gpu.product": "NVIDIA-A10",
        "nvidia.com/gpu.count": "4",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": "23028",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "6",
        "nvidia.com/mig.capable": "false",
    }
    # Labels of others are left alone.
    assert labels["kubernetes.io/hostname"] == NODE
    assert labels["nvidia.com/gpu.driver.major"] == "550"


def test_time_slicing(labelled, api):
    labelled("4gpu.json", config=TS4)
    labels, _ = node_labels(api)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A10-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.count"] == "4"


def test_mig_mixed(labelled, api):
    labelled("8a100-mig-mixed.json", args=["--mig-strategy", "mixed"])
    labels, _ = node_labels(api)
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig.capable"] == "true"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.replicas"] == "0"      # MIG-enabled GPUs are never shared whole
    expect = {"3g.20gb": ("8", "19968", "3"), "2g.10gb": ("10", "9856", "2"),
              "1g.5gb": ("10", "4864", "1")}
    for profile, (count, memory, slices) in expect.items():
        key = "nvidia.com/mig-" + profile
        assert labels[key + ".product"] == "NVIDIA-A100-SXM4-40GB-MIG-" + profile
        assert labels[key + ".count"] == count
        assert labels[key + ".memory"] == memory
        assert labels[key + ".slices.gi"] == slices
        assert labels[key + ".replicas"] == "1"


def test_stale_labels_removed_on_reload(labelled, api):
    p = labelled("4gpu.json", config=TS4)
    assert node_labels(api)[0]["nvidia.com/gpu.product"] == "NVIDIA-A10-SHARED"

    # As if an earlier run had also written a MIG profile label.
    def add_stale(node):
        meta = node["metadata"]
        meta["labels"]["nvidia.com/mig-1g.5gb.count"] = "7"
        meta["annotations"][OWNED] += ",nvidia.com/mig-1g.5gb.count"
        return node
    api.store.update("nodes", None, NODE, add_stale)
    with open(p.config_path, "w") as f:
        f.write("version: v1\n")
    api.clear_requests()
    p.signal(signal.SIGHUP)
    p.wait_log(r"(?s)SIGHUP.*Node labels written to node %s" % NODE)
    labels, annotations = node_labels(api)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A10"
    assert labels["nvidia.com/gpu.replicas"] == "1"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert "nvidia.com/mig-1g.5gb.count" not in labels
    assert "nvidia.com/mig-1g.5gb.count" not in annotations[OWNED]
    assert labels["nvidia.com/gpu.driver.major"] == "550"   # not ours: kept


def test_api_errors_retried_while_serving(labelled, api, kubelet):
    api.add_fault(method="PATCH", path="/api/v1/nodes/", status=500, count=2)
    p = labelled("4gpu.json", wait_written=False)
    # The kubelet-facing server answers while the labels are still failing.
    assert kubelet.endpoints["nvidia.com/gpu"].snapshots
    p.wait_log(r"Cannot write the node labels of %s: HTTP 500" % NODE)
    p.wait_log(r"Node labels written to node %s" % NODE, timeout=10)
    assert len(patches(api)) == 3
    assert node_labels(api)[0]["nvidia.com/gpu.product"] == "NVIDIA-A10"
    kubelet.allocate("nvidia.com/gpu", [p.inventory.gpus[0].uuid])


def test_node_labels_need_a_node_name(plugin):
    p = plugin("4gpu.json", args=["--node-labels"], env={"NODE_NAME": ""}, wait=None)
    assert p.wait_exit() != 0
    assert "needs this node's name" in p.log()


def test_mps_sharing_strategy(labelled, api, workdir):
    """sharing.mps labels the resource as NVIDIA's GFD does: sharing-strategy mps."""
    from test_mps import fake_control, mps_config
    labelled("4gpu.json", config=mps_config(os.path.join(workdir, "mps")),
             args=["--isolation=none", "--mps-control", fake_control(workdir)])
    labels, _ = node_labels(api)
    assert labels["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A10-SHARED"
