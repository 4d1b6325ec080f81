#!/usr/bin/env bash
# image-index.sh -- joins one image built for several architectures (each an OCI
# image layout archive from scripts/image.sh) into one OCI image index, so one
# tag serves amd64 and arm64 (what `make image-index` runs):
#
#   scripts/image-index.sh OUT_DIR IMAGES_DIR...
#
# For each image (gpupool-device-plugin, gpupool-scheduler-extender) found as
# IMAGES_DIR/<image>.oci.tar in every IMAGES_DIR: the blobs of all of them in one
# layout, an image index blob (application/vnd.oci.image.index.v1+json) listing
# each manifest with its platform (os/architecture from its config), and an
# index.json naming that index with the same reference as the single-arch
# archives (org.opencontainers.image.ref.name = tag, io.containerd.image.name =
# full reference). Output: OUT_DIR/<image>.multiarch.oci.tar, packed like
# image.sh's (sorted names, owner 0, mtime SOURCE_DATE_EPOCH).
# Consumers: `skopeo copy --all oci-archive:FILE docker://REGISTRY/...` pushes
# every architecture and the index; `ctr -n k8s.io images import FILE` imports
# the node's own platform (--all-platforms: all). No tool beyond python3 and tar:
# the index is plain JSON (umoci builds one manifest per layout, not indexes).
set -euo pipefail

die() { printf 'image-index.sh: %s\n' "$*" >&2; exit 1; }

[[ $# -ge 2 ]] || die "usage: $0 OUT_DIR IMAGES_DIR..."
OUT=$1
shift
mkdir -p "$OUT"
REPO_ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
  SOURCE_DATE_EPOCH=$(git -C "$REPO_ROOT" log -1 --format=%ct 2>/dev/null || echo 0)
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
made=0
for name in gpupool-device-plugin gpupool-scheduler-extender; do
  inputs=()
  for d in "$@"; do
    [[ -f $d/$name.oci.tar ]] && inputs+=("$d/$name.oci.tar")
  done
  ((${#inputs[@]})) || continue
  ((${#inputs[@]} == $#)) || die "$name: built for only ${#inputs[@]} of the $# directories (${inputs[*]})"
  rm -rf "$work/in" "$work/out"
  mkdir -p "$work/out/blobs/sha256"
  i=0
  for t in "${inputs[@]}"; do
    mkdir -p "$work/in/$i"
    tar -C "$work/in/$i" -xf "$t" || die "$t: not a tar archive"
    i=$((i + 1))
  done
  /usr/bin/python3 - "$work/in" "$work/out" "${inputs[@]}" <<'PY' || die "$name: could not build the index"
import hashlib, json, os, shutil, sys

src, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
blobs = os.path.join(out, "blobs", "sha256")
entries, ref = [], None
for i, name in enumerate(names):
    layout = os.path.join(src, str(i))
    with open(os.path.join(layout, "index.json")) as f:
        index = json.load(f)
    if len(index.get("manifests", [])) != 1:
        sys.exit("%s: expected one manifest in index.json, found %d" % (name, len(index.get("manifests", []))))
    desc = index["manifests"][0]
    ann = desc.get("annotations", {})
    if ref is None:
        ref = ann
    elif ann.get("io.containerd.image.name") != ref.get("io.containerd.image.name"):
        sys.exit("%s names %s, the first archive %s" % (name, ann.get("io.containerd.image.name"),
                                                       ref.get("io.containerd.image.name")))
    for blob in os.listdir(os.path.join(layout, "blobs", "sha256")):
        shutil.copyfile(os.path.join(layout, "blobs", "sha256", blob), os.path.join(blobs, blob))
    with open(os.path.join(blobs, desc["digest"].split(":", 1)[1])) as f:
        manifest = json.load(f)
    with open(os.path.join(blobs, manifest["config"]["digest"].split(":", 1)[1])) as f:
        config = json.load(f)
    platform = {"architecture": config["architecture"], "os": config["os"]}
    if config["architecture"] == "arm64":
        platform["variant"] = "v8"
    if any(e["platform"] == platform for e in entries):
        sys.exit("%s: a second image for %s" % (name, platform))
    entries.append({"mediaType": desc["mediaType"], "digest": desc["digest"], "size": desc["size"],
                    "platform": platform})
entries.sort(key=lambda e: (e["platform"]["os"], e["platform"]["architecture"]))
body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                   "manifests": entries}, sort_keys=True, separators=(",", ":")).encode()
digest = hashlib.sha256(body).hexdigest()
with open(os.path.join(blobs, digest), "wb") as f:
    f.write(body)
top = {"schemaVersion": 2, "manifests": [{
    "mediaType": "application/vnd.oci.image.index.v1+json", "digest": "sha256:" + digest,
    "size": len(body), "annotations": ref}]}
with open(os.path.join(out, "index.json"), "w") as f:
    json.dump(top, f, sort_keys=True, separators=(",", ":"))
with open(os.path.join(out, "oci-layout"), "w") as f:
    json.dump({"imageLayoutVersion": "1.0.0"}, f)
print("%s  index sha256:%s  %s" % (ref.get("io.containerd.image.name"), digest,
      " ".join("%s/%s" % (e["platform"]["os"], e["platform"]["architecture"]) for e in entries)))
PY
  find "$work/out" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  tar -C "$work/out" --sort=name --numeric-owner --owner=0 --group=0 --mtime="@$SOURCE_DATE_EPOCH" \
    --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -cf "$OUT/$name.multiarch.oci.tar.tmp" .
  mv -f "$OUT/$name.multiarch.oci.tar.tmp" "$OUT/$name.multiarch.oci.tar"
  made=$((made + 1))
done
((made)) || die "no <image>.oci.tar in $*"
echo "files: $OUT/<image>.multiarch.oci.tar   push: skopeo copy --all oci-archive:FILE docker://REGISTRY/IMAGE:TAG"
