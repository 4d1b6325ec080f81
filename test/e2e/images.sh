#!/usr/bin/env bash
# Test images without a registry: a busybox image and a pause (sandbox)
# image, both one layer made from Debian's /bin/busybox (busybox-static),
# written as docker-archive tarballs and imported into the suite's containerd.
#
#   images.sh build    write $K8S_CACHE/images/{busybox,pause}.tar (skipped when current)
#   images.sh import   import both into containerd's k8s.io namespace (containerd must run)
#   images.sh          both
set -euo pipefail
. "$(dirname "$0")/lib.sh"

IMG_DIR=$K8S_CACHE/images

build() {
  local bb=/bin/busybox stamp
  [[ -x $bb ]] || e2e_die "$bb missing (apt-get install busybox-static)"
  stamp="$(sha256sum "$bb" | cut -c1-16) $BUSYBOX_IMAGE $PAUSE_IMAGE $(dpkg --print-architecture) v2"
  if [[ -f $IMG_DIR/stamp && "$(cat "$IMG_DIR/stamp")" == "$stamp" &&
        -f $IMG_DIR/busybox.tar && -f $IMG_DIR/pause.tar ]]; then
    e2e_log "images: cached in $IMG_DIR"
    return 0
  fi
  mkdir -p "$IMG_DIR"
  /usr/bin/python3 - "$bb" "$IMG_DIR" "$BUSYBOX_IMAGE" "$PAUSE_IMAGE" "$(dpkg --print-architecture)" <<'PY'
import hashlib, io, json, os, subprocess, sys, tarfile

bb, outdir, busybox_ref, pause_ref, arch = sys.argv[1:6]
applets = subprocess.run([bb, "--list-full"], check=True, capture_output=True,
                         text=True).stdout.split()

def add(tf, name, kind, data=b"", link="", mode=0o755):
    ti = tarfile.TarInfo(name)
    ti.mtime = 0
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = "root"
    ti.mode = mode
    if kind == "dir":
        ti.type = tarfile.DIRTYPE
        tf.addfile(ti)
    elif kind == "sym":
        ti.type = tarfile.SYMTYPE
        ti.linkname = link
        tf.addfile(ti)
    else:
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))

buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
    for d in ["bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "proc", "sys",
              "dev", "var", "var/run", "run", "root"]:
        add(tf, d, "dir")
    add(tf, "tmp", "dir", mode=0o1777)
    with open(bb, "rb") as f:
        add(tf, "bin/busybox", "file", f.read())
    for a in sorted(set(applets)):
        if a == "bin/busybox":
            continue
        depth = a.count("/")
        add(tf, a, "sym", link="../" * depth + "bin/busybox")
    add(tf, "etc/passwd", "file", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n", mode=0o644)
    add(tf, "etc/group", "file", b"root:x:0:\nnogroup:x:65534:\n", mode=0o644)
layer = buf.getvalue()
diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()

def image(path, ref, cfg):
    config = {
        "architecture": arch, "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": dict({"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}, **cfg),
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "gpupool test/e2e/images.sh"}],
    }
    cj = json.dumps(config, sort_keys=True).encode()
    csum = hashlib.sha256(cj).hexdigest()
    ldir = diff_id.split(":")[1]
    manifest = [{"Config": csum + ".json", "RepoTags": [ref], "Layers": [ldir + "/layer.tar"]}]
    tmp = path + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tf:
        add(tf, ldir, "dir")
        add(tf, ldir + "/layer.tar", "file", layer, mode=0o644)
        add(tf, csum + ".json", "file", cj, mode=0o644)
        add(tf, "manifest.json", "file", json.dumps(manifest).encode(), mode=0o644)
    os.replace(tmp, path)

image(os.path.join(outdir, "busybox.tar"), busybox_ref, {"Cmd": ["sh"]})
# The sandbox ("pause") container: sleeps, exits at once on TERM/INT.
image(os.path.join(outdir, "pause.tar"), pause_ref,
      {"Entrypoint": ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]})
PY
  echo "$stamp" >"$IMG_DIR/stamp"
  e2e_log "images: built $IMG_DIR/busybox.tar and $IMG_DIR/pause.tar"
}

do_import() {
  local t ref
  for t in busybox pause; do
    [[ $t == busybox ]] && ref=$BUSYBOX_IMAGE || ref=$PAUSE_IMAGE
    if ctr_ images ls -q 2>/dev/null | grep -xF "$ref" >/dev/null; then
      continue
    fi
    ctr_ images import --platform "linux/$(dpkg --print-architecture)" "$IMG_DIR/$t.tar" >/dev/null
  done
  ctr_ images ls -q | grep -F localhost/gpupool-e2e | sed 's/^/  image: /'
}

case "${1:-all}" in
  build) build ;;
  import) do_import ;;
  all) build; do_import ;;
  *) e2e_die "usage: $0 [build|import]" ;;
esac
