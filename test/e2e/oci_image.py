#!/usr/bin/env python3
"""One-layer image archive (docker-archive, what `ctr images import` reads) from host files.

    oci_image.py OUT REF ARCH SPEC.json

SPEC: {"dirs": [path, ...],                  directories (mode 0755; "tmp" is made 1777)
       "files": [[path, host_file], ...],    content of host_file (links resolved), mode 0755
       "symlinks": [[path, target], ...],
       "text": [[path, content], ...],       mode 0644
       "config": {...},                      the image config's "config" (Env, Cmd, Entrypoint)
       "created_by": "..."}
Paths are inside the image, without a leading "/"; a file's parents are made as
directories. Everything is owned by root with mtime 0, so the same inputs give the same
archive (images.sh caches it by a stamp). Used by images.sh for the cudaprobe and
draplugin images.
"""

import hashlib
import io
import json
import os
import sys
import tarfile


class Layer:
    def __init__(self, tf):
        self.tf = tf
        self.done = set()

    def add(self, name, kind, data=b"", link="", mode=0o755):
        if name in self.done:
            return
        self.done.add(name)
        ti = tarfile.TarInfo(name)
        ti.mtime = 0
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = "root"
        ti.mode = mode
        if kind == "dir":
            ti.type = tarfile.DIRTYPE
            self.tf.addfile(ti)
        elif kind == "sym":
            ti.type = tarfile.SYMTYPE
            ti.linkname = link
            self.tf.addfile(ti)
        else:
            ti.size = len(data)
            self.tf.addfile(ti, io.BytesIO(data))

    def parents(self, name):
        parts = name.strip("/").split("/")
        for i in range(1, len(parts)):
            self.add("/".join(parts[:i]), "dir")
        return "/".join(parts)

    def add_file(self, name, src, mode=0o755):
        """src's content: links resolved (/lib64 may be a link on the host, a directory here)."""
        name = self.parents(name)
        with open(os.path.realpath(src), "rb") as f:
            self.add(name, "file", f.read(), mode=mode)


def main():
    out, ref, arch, spec_path = sys.argv[1:5]
    with open(spec_path) as f:
        spec = json.load(f)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        layer = Layer(tf)
        for d in spec.get("dirs", []):
            layer.add(layer.parents(d), "dir", mode=0o1777 if d == "tmp" else 0o755)
        for name, src in spec.get("files", []):
            layer.add_file(name, src)
        for name, target in spec.get("symlinks", []):
            layer.add(layer.parents(name), "sym", link=target)
        for name, content in spec.get("text", []):
            layer.add(layer.parents(name), "file", content.encode(), mode=0o644)
    data = buf.getvalue()
    diff_id = "sha256:" + hashlib.sha256(data).hexdigest()
    config = {
        "architecture": arch, "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": spec.get("config", {}),
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": spec.get("created_by", "")}],
    }
    cj = json.dumps(config, sort_keys=True).encode()
    csum = hashlib.sha256(cj).hexdigest()
    ldir = diff_id.split(":")[1]
    manifest = [{"Config": csum + ".json", "RepoTags": [ref], "Layers": [ldir + "/layer.tar"]}]
    tmp = out + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tf:
        archive = Layer(tf)
        archive.add(ldir, "dir")
        archive.add(ldir + "/layer.tar", "file", data, mode=0o644)
        archive.add(csum + ".json", "file", cj, mode=0o644)
        archive.add("manifest.json", "file", json.dumps(manifest).encode(), mode=0o644)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
