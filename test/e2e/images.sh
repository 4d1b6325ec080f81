#!/usr/bin/env bash
# Test images without a registry: a busybox image and a pause (sandbox)
# image, both one layer made from Debian's /bin/busybox (busybox-static),
# written as docker-archive tarballs and imported into the suite's containerd.
#
#   images.sh build    write $K8S_CACHE/images/{busybox,pause}.tar (skipped when current)
#   images.sh import   import both into containerd's k8s.io namespace (containerd must run)
#   images.sh          both
#   images.sh cudaprobe BUILD_DIR
#                      the glibc probe image ($CUDAPROBE_IMAGE) for the isolation
#                      checks: build $K8S_CACHE/images/cudaprobe.tar (skipped when
#                      current) and import it (containerd must run)
#   images.sh draplugin BUILD_DIR
#                      $DRAPLUGIN_IMAGE: gpupool-dra-plugin and libgpupool-cuda at
#                      the device plugin image's paths (dra.sh's apply -k check)
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

# The probe image: a dynamically linked world, which the static busybox image
# is not (no ld.so there, so /etc/ld.so.preload would never be read). One layer
# from host files: the dynamic loader and every library `ldd` lists for the
# probe, the fake driver and libgpupool-cuda (the plugin mounts the library;
# its dependencies must be in the image), each at the path ldd names;
# BUILD/test/fakecuda/libcuda.so.1 next to libc.so.6 (a directory on the
# loader's built-in search path: the image has no ld.so.cache);
# /usr/local/bin/gpupool-cudaprobe; busybox for the shell. Nothing from the
# CUDA toolkit. The fake NVML at /usr/local/fakenvml/libnvidia-ml.so.1, off
# the loader's path: only a process started with LD_LIBRARY_PATH there (11f's
# NVML queries inside the container) loads it.
cudaprobe() {
  local build=$1 bb=/bin/busybox probe cuda lib nvml stamp f
  probe=$build/test/cuda/gpupool-cudaprobe
  cuda=$build/test/fakecuda/libcuda.so.1
  lib=$build/lib/libgpupool-cuda.so
  nvml=$build/test/fakenvml/libnvidia-ml.so.1
  for f in "$probe" "$cuda" "$lib" "$nvml" "$bb"; do
    [[ -f $f ]] || e2e_die "cudaprobe image: $f missing (build the project; apt-get install busybox-static)"
  done
  # "NAME => PATH (addr)" and the loader's "PATH (addr)": the paths, once each.
  local -a libs
  mapfile -t libs < <(for f in "$probe" "$cuda" "$lib" "$nvml"; do ldd "$f"; done |
    awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $2 ~ /^\(/ {print $1}' | sort -u)
  ((${#libs[@]} > 0)) || e2e_die "cudaprobe image: ldd found no libraries for $probe"
  stamp="$(cat "$probe" "$cuda" "$nvml" "$bb" "${libs[@]}" | sha256sum | cut -c1-16) $CUDAPROBE_IMAGE ${libs[*]} v3"
  mkdir -p "$IMG_DIR"
  if [[ -f $IMG_DIR/cudaprobe.stamp && "$(cat "$IMG_DIR/cudaprobe.stamp")" == "$stamp" && -f $IMG_DIR/cudaprobe.tar ]]; then
    e2e_log "images: $IMG_DIR/cudaprobe.tar cached"
  else
    /usr/bin/python3 - "$IMG_DIR/cudaprobe.spec.json" "$bb" "$probe" "$cuda" "$nvml" "${libs[@]}" <<'PY' &&
import json, os, subprocess, sys

out, bb, probe, cuda, nvml = sys.argv[1:6]
libs = sys.argv[6:]
applets = subprocess.run([bb, "--list-full"], check=True, capture_output=True,
                         text=True).stdout.split()
libc = [lib for lib in libs if os.path.basename(lib) == "libc.so.6"]
if not libc:
    sys.exit("cudaprobe image: ldd listed no libc.so.6")
spec = {
    "dirs": ["bin", "sbin", "usr", "usr/bin", "usr/sbin", "usr/local", "usr/local/bin",
             "etc", "proc", "sys", "dev", "var", "var/run", "run", "root", "tmp"],
    "files": [["bin/busybox", bb]] + [[lib.lstrip("/"), lib] for lib in libs] + [
        [os.path.dirname(libc[0]).lstrip("/") + "/libcuda.so.1", cuda],
        ["usr/local/bin/gpupool-cudaprobe", probe],
        ["usr/local/fakenvml/libnvidia-ml.so.1", nvml]],
    "symlinks": [[a, "../" * a.count("/") + "bin/busybox"] for a in sorted(set(applets))
                 if a != "bin/busybox" and not a.startswith("usr/local/")],
    "text": [["etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"],
             ["etc/group", "root:x:0:\nnogroup:x:65534:\n"]],
    "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "Cmd": ["sh"]},
    "created_by": "gpupool test/e2e/images.sh cudaprobe",
}
with open(out, "w") as f:
    json.dump(spec, f)
PY
      /usr/bin/python3 "$E2E_DIR/oci_image.py" "$IMG_DIR/cudaprobe.tar" "$CUDAPROBE_IMAGE" \
        "$(dpkg --print-architecture)" "$IMG_DIR/cudaprobe.spec.json" ||
      e2e_die "cudaprobe image: not built"
    echo "$stamp" >"$IMG_DIR/cudaprobe.stamp"
    e2e_log "images: built $IMG_DIR/cudaprobe.tar ($(du -k "$IMG_DIR/cudaprobe.tar" | cut -f1) KiB: ${libs[*]}, libcuda.so.1, libnvidia-ml.so.1, gpupool-cudaprobe, busybox)"
  fi
  # Re-imported on every call: the tag may name an older build's image.
  ctr_ images import --platform "linux/$(dpkg --print-architecture)" "$IMG_DIR/cudaprobe.tar" >/dev/null
  ctr_ images ls -q | grep -xF "$CUDAPROBE_IMAGE" | sed 's/^/  image: /'
}

# A stand-in for the device plugin's image where `make image` has not run
# (or its image lacks the DRA plugin): gpupool-dra-plugin at
# /usr/bin/gpupool-dra-plugin and libgpupool-cuda at
# /usr/lib/gpupool/libgpupool-cuda.so, the image's paths, over the host's
# loader and the libraries ldd lists; no shell. For dra.sh's apply -k check
# of deploy/overlays/dra: the manifests, RBAC and the program in a pod.
draplugin() {
  local build=$1 bin lib stamp
  bin=$build/bin/gpupool-dra-plugin
  lib=$build/lib/libgpupool-cuda.so
  [[ -f $bin && -f $lib ]] || e2e_die "draplugin image: $bin or $lib missing (build the project)"
  # What it loads at run time as well (libcurl: the API client dlopens it),
  # as scripts/image.sh finds it: sonames in the binary, NVIDIA's aside.
  local -a libs objs=("$bin")
  local so d arch
  arch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
  for so in $(strings -n 6 "$bin" | grep -E '^lib[A-Za-z0-9_+.-]*\.so(\.[0-9]+)+$' | grep -vE '^lib(nvidia|cuda|nvcuvid|nvoptix)' | sort -u); do
    for d in "/usr/lib/$arch" "/lib/$arch"; do
      [[ -e $d/$so ]] && { objs+=("$d/$so"); break; }
    done
  done
  mapfile -t libs < <(for so in "${objs[@]:1}"; do echo "$so"; done
    for so in "${objs[@]}"; do ldd "$so"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $2 ~ /^\(/ {print $1}' | sort -u)
  ((${#libs[@]} > 0)) || e2e_die "draplugin image: ldd found no libraries for $bin"
  stamp="$(cat "$bin" "$lib" "${libs[@]}" | sha256sum | cut -c1-16) $DRAPLUGIN_IMAGE v2"
  mkdir -p "$IMG_DIR"
  if [[ ! -f $IMG_DIR/draplugin.stamp || "$(cat "$IMG_DIR/draplugin.stamp")" != "$stamp" || ! -f $IMG_DIR/draplugin.tar ]]; then
    /usr/bin/python3 - "$IMG_DIR/draplugin.spec.json" "$bin" "$lib" "${libs[@]}" <<'PY' &&
import json, sys

out, binary, cudalib = sys.argv[1:4]
libs = sys.argv[4:]
spec = {
    "dirs": ["etc", "proc", "sys", "dev", "var", "run", "root", "tmp"],
    "files": [[lib.lstrip("/"), lib] for lib in libs] + [
        ["usr/bin/gpupool-dra-plugin", binary],
        ["usr/lib/gpupool/libgpupool-cuda.so", cudalib]],
    "text": [["etc/passwd", "root:x:0:0:root:/root:/sbin/nologin\n"], ["etc/group", "root:x:0:\n"]],
    "config": {"Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"], "Entrypoint": ["/usr/bin/gpupool-dra-plugin"]},
    "created_by": "gpupool test/e2e/images.sh draplugin",
}
with open(out, "w") as f:
    json.dump(spec, f)
PY
      /usr/bin/python3 "$E2E_DIR/oci_image.py" "$IMG_DIR/draplugin.tar" "$DRAPLUGIN_IMAGE" \
        "$(dpkg --print-architecture)" "$IMG_DIR/draplugin.spec.json" ||
      e2e_die "draplugin image: not built"
    echo "$stamp" >"$IMG_DIR/draplugin.stamp"
    e2e_log "images: built $IMG_DIR/draplugin.tar ($(du -k "$IMG_DIR/draplugin.tar" | cut -f1) KiB)"
  fi
  ctr_ images import --platform "linux/$(dpkg --print-architecture)" "$IMG_DIR/draplugin.tar" >/dev/null
  ctr_ images ls -q | grep -xF "$DRAPLUGIN_IMAGE" | sed 's/^/  image: /'
}

case "${1:-all}" in
  build) build ;;
  import) do_import ;;
  all) build; do_import ;;
  cudaprobe) [[ $# -eq 2 ]] || e2e_die "usage: $0 cudaprobe BUILD_DIR"; cudaprobe "$2" ;;
  draplugin) [[ $# -eq 2 ]] || e2e_die "usage: $0 draplugin BUILD_DIR"; draplugin "$2" ;;
  *) e2e_die "usage: $0 [build|import|cudaprobe BUILD_DIR|draplugin BUILD_DIR]" ;;
esac
