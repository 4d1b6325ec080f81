"""Reads a fake-NVML inventory (test/fakenvml/inventories/*.json) into plain objects.

The tests derive their expectations (UUIDs, minors, NUMA nodes, NVLink peers, MIG
devices) from the same file the fake NVML serves, so a new inventory needs no
test changes. The reader accepts a few spellings of each key (the fake NVML's
format was written in parallel with these tests); fix KEYS below if it differs.
"""

import json
import math
import os

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
INVENTORY_DIR = os.environ.get("GP_INVENTORY_DIR",
                               os.path.join(ROOT, "test", "fakenvml", "inventories"))

KEYS = {
    "gpus": ("gpus", "devices", "GPUs"),
    "uuid": ("uuid", "UUID", "id"),
    "index": ("index", "idx"),
    "minor": ("minor", "minor_number", "minorNumber"),
    "numa": ("numa_node", "numa", "numaNode", "numa_id"),
    "name": ("name", "product", "model"),
    "nvlink": ("nvlink", "nvlinks", "nvlink_peers", "nvlinkPeers", "links"),
    "mig": ("migs", "mig_devices", "mig", "migDevices", "mig_instances"),
    "mig_mode": ("mig_mode", "migMode", "mig_enabled", "migEnabled"),
    "profile": ("profile", "name", "mig_profile"),
    "bus_id": ("pci_bus_id", "bus_id", "busId", "pci"),
}


def _get(d, key, default=None):
    for k in KEYS[key]:
        if isinstance(d, dict) and k in d:
            return d[k]
    return default


def mig_profile(gi_slices, ci_slices, mig_mib, total_mib):
    """go-nvlib's profile name: "<g>g.<mem>gb", or "<c>c.<g>g.<mem>gb" when C != G
    (getMigMemorySizeGB: memory fraction rounded up to 1/8, times total GB)."""
    frac = math.ceil(mig_mib / total_mib * 8) / 8
    total_gb = (total_mib + 1023) // 1024
    gb = int(round(frac * total_gb))
    if ci_slices == gi_slices:
        return "%dg.%dgb" % (gi_slices, gb)
    return "%dc.%dg.%dgb" % (ci_slices, gi_slices, gb)


class Mig:
    def __init__(self, parent, j, raw):
        self.parent = parent
        self.uuid = _get(raw, "uuid")
        self.slot = int(raw.get("slot", j))
        self.index = "%d:%d" % (parent.index, self.slot)
        self.gi = raw.get("gi")
        self.ci = raw.get("ci")
        self.gi_slices = int(raw.get("gi_slices", 1))
        self.ci_slices = int(raw.get("ci_slices", self.gi_slices))
        prof = _get(raw, "profile")
        if prof is None or "memory_mib" in raw:
            prof = mig_profile(self.gi_slices, self.ci_slices, int(raw.get("memory_mib", 0)),
                               parent.memory_mib)
        self.profile = str(prof)
        self.full_profile = self.ci_slices == self.gi_slices   # NVIDIA exposes only C == G


class Gpu:
    def __init__(self, i, raw):
        self.raw = raw
        self.index = int(_get(raw, "index", i))
        self.uuid = _get(raw, "uuid")
        self.minor = int(_get(raw, "minor", self.index))
        numa = _get(raw, "numa")
        self.numa = None if numa is None or int(numa) < 0 else int(numa)
        self.bus_id = _get(raw, "bus_id")
        self._nvlink = _get(raw, "nvlink", []) or []
        self.memory_mib = int(raw.get("memory_mib", 40960))
        migs = _get(raw, "mig", []) or []
        self.mig = [Mig(self, j, m) for j, m in enumerate(migs)]
        mode = _get(raw, "mig_mode")
        if isinstance(mode, str):
            self.mig_enabled = mode.lower() in ("enabled", "enable", "on", "true", "1")
        else:
            self.mig_enabled = bool(mode) if mode is not None else bool(self.mig)


class Inventory:
    def __init__(self, name):
        self.name = name
        self.path = name if os.path.isabs(name) else os.path.join(INVENTORY_DIR, name)
        with open(self.path) as f:
            raw = json.load(f)
        gpus = _get(raw, "gpus") if isinstance(raw, dict) else raw
        if not isinstance(gpus, list) or not gpus:
            raise ValueError("%s: no GPU list under any of %s" % (self.path, KEYS["gpus"]))
        self.gpus = [Gpu(i, g) for i, g in enumerate(gpus)]
        self.gpus.sort(key=lambda g: g.index)
        for g in self.gpus:
            if not g.uuid:
                raise ValueError("%s: GPU %d has no uuid" % (self.path, g.index))
        self._resolve_nvlink()

    def _resolve_nvlink(self):
        by_uuid = {g.uuid: g.index for g in self.gpus}
        by_bus = {str(g.bus_id).lower(): g.index for g in self.gpus if g.bus_id}
        for g in self.gpus:
            peers = {}
            items = g._nvlink
            if isinstance(items, dict):           # {"<peer>": links}
                items = [{"peer": k, "links": v} for k, v in items.items()]
            for it in items:
                links = 1
                if isinstance(it, dict):
                    links = int(it.get("links", it.get("count", 1)))
                    it = it.get("peer", it.get("remote", it.get("gpu", it.get("uuid"))))
                idx = None
                if isinstance(it, int):
                    idx = it
                elif isinstance(it, str):
                    idx = by_uuid.get(it, by_bus.get(it.lower()))
                    if idx is None and it.isdigit():
                        idx = int(it)
                if idx is not None and idx != g.index:
                    peers[idx] = peers.get(idx, 0) + links
            g.nvlink = peers
        # a pair may be listed on either GPU (the larger count wins): make it symmetric
        for g in self.gpus:
            for idx, links in list(g.nvlink.items()):
                other = next((x for x in self.gpus if x.index == idx), None)
                if other is not None:
                    n = max(links, other.nvlink.get(g.index, 0))
                    g.nvlink[idx] = other.nvlink[g.index] = n

    @property
    def uuids(self):
        return [g.uuid for g in self.gpus]

    def by_uuid(self, uuid):
        for g in self.gpus:
            if g.uuid == uuid:
                return g
        raise KeyError(uuid)

    def nvlinked(self, a, b):
        return self.by_uuid(b).index in self.by_uuid(a).nvlink or \
            self.by_uuid(a).index in self.by_uuid(b).nvlink

    def migs(self):
        return [m for g in self.gpus for m in g.mig]

    def mig_profiles(self):
        return sorted({m.profile for m in self.migs()})


def available():
    try:
        return sorted(f for f in os.listdir(INVENTORY_DIR) if f.endswith(".json"))
    except FileNotFoundError:
        return []
