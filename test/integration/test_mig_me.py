"""MIG profiles with media extensions are named as NVIDIA names them (issue 7): a GPU instance
of profile 1_SLICE_REV1 is "1g.5gb+me"; in mixed strategy its resource is
nvidia.com/mig-1g.5gb.me (Kubernetes forbids "+" in resource names; NVIDIA's plugin replaces it
with ".")."""

import json
import os

from inventory import INVENTORY_DIR

PROFILE_1_SLICE_REV1 = 0x7
PROFILE_1_SLICE_NO_ME = 0xD


def media_inventory(workdir):
    with open(os.path.join(INVENTORY_DIR, "8a100-mig-mixed.json")) as f:
        raw = json.load(f)
    migs = raw["gpus"][0]["migs"]
    assert [m["gi_slices"] for m in migs[2:4]] == [1, 1]
    migs[2]["gi_profile_id"] = PROFILE_1_SLICE_REV1
    migs[3]["gi_profile_id"] = PROFILE_1_SLICE_NO_ME
    path = os.path.join(workdir, "mig-me.json")
    with open(path, "w") as f:
        json.dump(raw, f)
    return path, migs[2]["uuid"], migs[3]["uuid"]


def test_media_extensions_resource(plugin, kubelet, workdir):
    path, me_uuid, no_me_uuid = media_inventory(workdir)
    plugin(inventory=path, args=["--mig-strategy", "mixed"], wait="nvidia.com/mig-1g.5gb.me")
    assert kubelet.endpoint("nvidia.com/mig-1g.5gb.me").snapshots[-1].ids == [me_uuid]
    kubelet.wait_for(lambda: kubelet.endpoints.get("nvidia.com/mig-1g.5gb-me") is not None and
                     kubelet.endpoints["nvidia.com/mig-1g.5gb-me"].snapshots, 5,
                     "the -me resource")
    assert kubelet.endpoint("nvidia.com/mig-1g.5gb-me").snapshots[-1].ids == [no_me_uuid]
    # The plain 1g.5gb resource no longer holds them.
    plain = kubelet.endpoints.get("nvidia.com/mig-1g.5gb")
    if plain is not None and plain.snapshots:
        assert me_uuid not in plain.snapshots[-1].ids
        assert no_me_uuid not in plain.snapshots[-1].ids
    r = kubelet.allocate("nvidia.com/mig-1g.5gb.me", [me_uuid])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == me_uuid


def test_media_extensions_pattern(plugin, kubelet, workdir):
    """resources.mig patterns match the profile with its "+me"."""
    path, me_uuid, _ = media_inventory(workdir)
    cfg = ("version: v1\nflags:\n  migStrategy: mixed\nresources:\n  mig:\n"
           "  - pattern: \"1g.5gb+me\"\n    name: media\n  - pattern: \"*\"\n    name: other\n")
    plugin(inventory=path, config=cfg, wait="nvidia.com/media")
    assert kubelet.endpoint("nvidia.com/media").snapshots[-1].ids == [me_uuid]
