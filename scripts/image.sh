#!/usr/bin/env bash
# Builds the OCI images of gpupool's daemons from Debian packages, with no
# Docker daemon and no registry (what `make image` runs):
#
#   scripts/image.sh BUILD_DIR [IMAGE...]
#
# IMAGE: gpupool-device-plugin, gpupool-scheduler-extender (default: both).
# For each image:
#   1. the Debian packages that own the shared libraries the program needs:
#      those `ldd` names, and those it dlopen()s by soname (libcurl.so.4 for
#      the API client, libmicrohttpd.so.12 for HTTP (src/httpd): found as soname
#      strings in the binary and resolved with `ldconfig -p`; the NVIDIA
#      driver's libraries are the container runtime's business), then `dpkg -S`;
#   2. mmdebstrap --variant=extract: those packages and their dependencies,
#      unpacked, nothing installed or run (no shell, no dpkg, no apt in the
#      image); cached per package set (GP_IMAGE_CACHE);
#   3. pruned: documentation (the copyright files stay), locales, gconv, the
#      apt/dpkg state, and every shared library of a package other than libc6
#      and libgcc-s1 that the closure of the program and of its dlopen()ed
#      libraries, as the image's own loader resolves it, does not name (glibc's
#      compatibility libraries stay: a real libnvidia-ml.so.1 needs them);
#   4. two layers, written as deterministic tarballs (sorted names, owner 0,
#      mtimes = SOURCE_DATE_EPOCH): the Debian runtime, then the stripped
#      program (the device plugin's also /usr/lib/gpupool/libgpupool-cuda.so,
#      from BUILD_DIR/lib: the script stops when it is missing); umoci assembles the OCI image and its config (entrypoint,
#      user, labels: title, description, created, and source, revision, version,
#      licenses from scripts/oci-labels.sh).
# Output: BUILD_DIR/images/<image>.oci.tar (an OCI image layout; the index
# names the image, so `ctr -n k8s.io images import <file>` needs no flags),
# and <image>.ref (the reference). Sizes are printed at the end.
#
# Environment:
#   SOURCE_DATE_EPOCH   timestamps (default: the last git commit, else 0)
#   GP_IMAGE_REPO       repository prefix (default localhost/gpupool)
#   GP_IMAGE_TAG        tag (default: the project version from CMakeCache)
#   GP_IMAGE_SOURCE     org.opencontainers.image.source (default: the origin remote as an
#                       https URL); revision, version and licenses come with it
#                       (scripts/oci-labels.sh)
#   GP_IMAGE_MIRRORS    apt sources for mmdebstrap, one "deb URI SUITE COMPONENTS"
#                       a line (default: deb.debian.org bookworm, -updates, -security)
#   GP_IMAGE_SUITE      (default bookworm)
#   GP_IMAGE_CACHE      where extracted rootfs trees are kept (default BUILD_DIR/images/cache)
#   GP_IMAGE_ARCH       Debian architecture of the image (default: this host's); arm64 on an
#                       amd64 host takes an arm64 build (make image ARCH=arm64: build-arm64/):
#                       the rootfs comes from the arm64 archive, the loader runs under
#                       qemu-aarch64-static (copied into the chroot for the checks, not shipped)
#                       and the cross binutils strip the program (install-deps.sh --cross)
# Root is needed by mmdebstrap's root mode (and to read back the rootfs).
# Packages: scripts/install-deps.sh --image (mmdebstrap, umoci).
set -euo pipefail

die() { printf 'image.sh: %s\n' "$*" >&2; exit 1; }
log() { printf '%s image.sh: %s\n' "$(date +%H:%M:%S)" "$*"; }

[[ $# -ge 1 ]] || die "usage: $0 BUILD_DIR [gpupool-device-plugin|gpupool-scheduler-extender ...]"
BUILD=$(cd "$1" 2>/dev/null && pwd) || die "build dir $1 not found"
shift
IMAGES=("$@")
((${#IMAGES[@]})) || IMAGES=(gpupool-device-plugin gpupool-scheduler-extender)
REPO_ROOT=$(cd "$(dirname "$0")/.." && pwd)

[[ $(id -u) -eq 0 ]] || die "mmdebstrap (root mode) needs root; run as root"
HOST_ARCH=$(dpkg --print-architecture)
ARCH=${GP_IMAGE_ARCH:-$HOST_ARCH}
MULTIARCH=$(dpkg-architecture -a"$ARCH" -qDEB_HOST_MULTIARCH 2>/dev/null) || die "unknown architecture $ARCH"
# EMU: what runs a program of the image's architecture here (nothing when native).
EMU=()
STRIP=strip
OBJDUMP=objdump
if [[ $ARCH != "$HOST_ARCH" ]]; then
  [[ $ARCH == arm64 ]] || die "GP_IMAGE_ARCH=$ARCH: only $HOST_ARCH and arm64 are supported"
  EMU=(qemu-aarch64-static)
  STRIP=$MULTIARCH-strip
  OBJDUMP=$MULTIARCH-objdump
fi
# ldconfig -p's tag for libraries of that architecture.
case $ARCH in
  amd64) LDCONFIG_TAG=x86-64 ;;
  arm64) LDCONFIG_TAG=AArch64 ;;
  *) LDCONFIG_TAG=64bit ;;
esac
for c in mmdebstrap umoci dpkg-query dpkg-deb "$STRIP" "$OBJDUMP" strings ldconfig tar gzip "${EMU[@]}"; do
  command -v "$c" >/dev/null || die "$c missing: run scripts/install-deps.sh --image${EMU:+ --cross}"
done

if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
  SOURCE_DATE_EPOCH=$(git -C "$REPO_ROOT" log -1 --format=%ct 2>/dev/null || echo 0)
fi
export SOURCE_DATE_EPOCH
CREATED=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
REPO=${GP_IMAGE_REPO:-localhost/gpupool}
TAG=${GP_IMAGE_TAG:-$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)}
TAG=${TAG:-0.0.0}
# org.opencontainers.image.{source,revision,version,licenses} (scripts/oci-labels.sh)
mapfile -t PROVENANCE < <("$REPO_ROOT/scripts/oci-labels.sh" "$BUILD" "$TAG") ||
  die "scripts/oci-labels.sh failed"
((${#PROVENANCE[@]} >= 3)) || die "scripts/oci-labels.sh printed no labels"
SUITE=${GP_IMAGE_SUITE:-bookworm}
MIRRORS=${GP_IMAGE_MIRRORS:-"deb http://deb.debian.org/debian $SUITE main
deb http://deb.debian.org/debian $SUITE-updates main
deb http://deb.debian.org/debian-security $SUITE-security main"}
OUT=$BUILD/images
CACHE=${GP_IMAGE_CACHE:-$OUT/cache}
mkdir -p "$OUT" "$CACHE"

# Per image: the user it runs as, and what the image config says.
declare -A USER_OF=([gpupool-device-plugin]=0:0 [gpupool-scheduler-extender]=65532:65532)
declare -A PORTS_OF=([gpupool-device-plugin]="" [gpupool-scheduler-extender]=39999/tcp)
declare -A TITLE_OF=(
  [gpupool-device-plugin]="gpupool Kubernetes device plugin for NVIDIA GPUs"
  [gpupool-scheduler-extender]="gpupool kube-scheduler extender for GPU sharing")

# --- 1. packages from ldd -------------------------------------------------------
# owner_of PATH  -- the Debian package owning a library path (merged /usr aware).
owner_of() {
  local p=$1 c r
  r=$(readlink -f "$p")
  for c in "$p" "/usr$p" "${p#/usr}" "$r" "/usr$r" "${r#/usr}"; do
    [[ $c == /* ]] || continue
    if out=$(dpkg-query -S "$c" 2>/dev/null); then
      echo "${out%%:*}" | head -n1 | cut -d, -f1
      return 0
    fi
  done
  return 1
}
# libs_of BINARY  -- the resolved library paths ldd names (the loader included);
# for another architecture, its loader (multiarch libc6:ARCH) under qemu lists them.
libs_of() {
  if ((${#EMU[@]})); then
    local loader
    loader=$(readelf -l "$1" | sed -n 's/.*Requesting program interpreter: \(.*\)]$/\1/p')
    [[ -e $loader ]] || die "$1: loader $loader missing here (install-deps.sh --cross installs libc6:$ARCH)"
    "${EMU[@]}" "$loader" --list "$1"
  else
    ldd "$1"
  fi | awk '/=> \// {print $3; next} /^\s*\// {print $1}'
}
# dlopened_of BINARY  -- host paths of the libraries BINARY loads at run time
# by soname (strings like libcurl.so.4 that are not NEEDED), when this host
# has them; the NVIDIA driver's libraries are left to the container runtime.
dlopened_of() {
  local bin=$1 soname path needed
  needed=$("$OBJDUMP" -p "$bin" | awk '$1 == "NEEDED" {print $2}')
  strings -n 6 "$bin" | grep -E '^lib[A-Za-z0-9_+.-]*\.so(\.[0-9]+)+$' | sort -u | while read -r soname; do
    case $soname in libnvidia-* | libcuda* | libnvcuvid* | libnvoptix*) continue ;; esac
    grep -qxF "$soname" <<<"$needed" && continue
    # awk reads to the end: an early exit would SIGPIPE ldconfig, and under
    # pipefail that failed this whole function now and then.
    # The image's architecture only: with multiarch both may be installed, and
    # the ld.so cache knows only the host's (its multiarch directories first).
    path=
    for d in /usr/lib/$MULTIARCH /lib/$MULTIARCH; do
      [[ -e $d/$soname ]] && { path=$d/$soname; break; }
    done
    if [[ -z $path ]] && ((${#EMU[@]} == 0)); then
      path=$(ldconfig -p | awk -v s="$soname" -v t="$LDCONFIG_TAG" '!found && $1 == s && index($0, t) {print $NF; found = 1}')
    fi
    [[ -n $path ]] && echo "$path"
  done
}
packages_of() {
  local bin=$1 lib pkg
  local -A seen=()
  while read -r lib; do
    pkg=$(owner_of "$lib") || die "no Debian package owns $lib (needed by $bin)"
    seen[$pkg]=1
  done < <(libs_of "$bin"; dlopened_of "$bin")
  seen[libc6]=1
  printf '%s\n' "${!seen[@]}" | sort
}

# --- 2. the Debian rootfs (cached per package set) -------------------------------
# rootfs_for PKG...  -- prints the cache dir holding rootfs/ and packages.txt
rootfs_for() {
  local key dir
  key=$(printf '%s\n' "$SUITE" "$ARCH" "$MIRRORS" "$@" v1 | sha256sum | cut -c1-16)
  dir=$CACHE/rootfs-$key
  if [[ -f $dir/done ]]; then
    echo "$dir"
    return 0
  fi
  rm -rf "$dir"
  mkdir -p "$dir/rootfs" "$dir/debs"
  local IFS=,
  local include="$*"
  unset IFS
  log "mmdebstrap --variant=extract --include=$include $SUITE" >&2
  local mirror_args=()
  while IFS= read -r line; do [[ -n $line ]] && mirror_args+=("$line"); done <<<"$MIRRORS"
  # The extract hook sees the downloaded .debs: record each package's
  # version and file list (the extract variant leaves no dpkg database).
  mmdebstrap --quiet --variant=extract --architectures="$ARCH" --include="$include" \
    --extract-hook="for d in \"\$1\"/var/cache/apt/archives/*.deb; do
        p=\$(dpkg-deb -f \"\$d\" Package); v=\$(dpkg-deb -f \"\$d\" Version)
        echo \"\$p \$v\" >>'$dir/packages.txt'
        dpkg-deb -c \"\$d\" | awk '{print \$6}' | sed 's#^\\./##' >'$dir/debs/'\"\$p\".list
      done" \
    "$SUITE" "$dir/rootfs" "${mirror_args[@]}" >&2 || die "mmdebstrap failed (apt sources: $MIRRORS)"
  [[ -s $dir/packages.txt ]] || die "mmdebstrap: no package list recorded"
  sort -o "$dir/packages.txt" "$dir/packages.txt"
  touch "$dir/done"
  echo "$dir"
}

# --- 3. stage and prune -----------------------------------------------------------
# closure STAGE FILE...  -- the libraries the image's own loader resolves for
# each FILE (a program or a library; paths inside STAGE), the loader and the
# libraries themselves included; "not found" lines pass through.
closure() {
  local stage=$1 loader f
  shift
  loader=$(cd "$stage" && ls lib64/ld-linux-*.so.* lib/ld-linux*.so.* 2>/dev/null | head -n1)
  [[ -n $loader ]] || die "no dynamic loader in the rootfs"
  for f in "$@"; do
    [[ $f == */lib*.so* ]] && echo "$f"
    chroot "$stage" "${EMU_IN[@]}" "/$loader" --list "$f" | awk '/not found/ {print; next} /=> \// {print $3; next} /^\s*\// {print $1}'
  done
}
# in_image STAGE SONAME  -- where the image's loader would find SONAME.
in_image() {
  local d
  for d in lib/$MULTIARCH usr/lib/$MULTIARCH lib usr/lib; do
    [[ -e $1/$d/$2 ]] && { echo "/$d/$2"; return 0; }
  done
  return 1
}
stage_image() {
  local name=$1 bin=$2 cachedir=$3 stage=$4 keep lib
  rm -rf "$stage"
  mkdir -p "$stage"
  cp -a "$cachedir/rootfs/." "$stage/"
  # Another architecture: the checks below run its loader and the program
  # under qemu, copied in for them and removed before the layers are written.
  EMU_IN=()
  if ((${#EMU[@]})); then
    cp "$(command -v "${EMU[0]}")" "$stage/.gpupool-${EMU[0]}"
    EMU_IN=("/.gpupool-${EMU[0]}")
  fi
  # Documentation, translations, charset modules, package-manager state.
  find "$stage/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete 2>/dev/null || true
  find "$stage/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
  rm -rf "$stage"/usr/share/{man,info,locale,lintian,bug,gcc,gdb,bash-completion} \
         "$stage/usr/lib/$MULTIARCH/gconv" "$stage"/var/lib/{apt,dpkg} "$stage"/var/cache/* \
         "$stage"/var/log/* "$stage"/etc/ld.so.cache
  # The program, stripped (its debug info stays in the build dir).
  install -d "$stage/usr/bin"
  "$STRIP" --strip-unneeded -o "$stage/usr/bin/$name" "$bin"
  chmod 0755 "$stage/usr/bin/$name"
  # Libraries nobody loads: everything of the other packages that is a
  # shared object and not in the closure.
  local targets=("/usr/bin/$name") soname
  for soname in $(dlopened_of "$bin" | xargs -r -n1 basename); do
    targets+=("$(in_image "$stage" "$soname")") || die "$name: $soname (loaded at run time) missing in the rootfs"
  done
  keep=$(closure "$stage" "${targets[@]}" | grep -v 'not found' | while read -r lib; do
           echo "$lib"; readlink -f "$stage$lib" | sed "s#^$stage##"; done | sort -u)
  local f
  for f in "$cachedir"/debs/*.list; do
    case $(basename "$f" .list) in libc6 | libgcc-s1) continue ;; esac
    grep -E '\.so(\.[0-9.]+)?$|/sasl2/|/ossl-modules/|/engines-3/' "$f" || true
  done | sed 's#^#/#' | sort -u | { grep -vxFf <(echo "$keep") || true; } | while read -r lib; do
    [[ -d $stage$lib && ! -L $stage$lib ]] || rm -f "$stage$lib"
  done
  find "$stage/usr/lib" -mindepth 1 -type d -empty -delete 2>/dev/null || true
  # Accounts (no login, no shell in the image) and a writable /tmp.
  install -d -m 0755 "$stage/etc"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$stage/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$stage/etc/group"
  install -d -m 1777 "$stage/tmp"
  install -d -m 0700 "$stage/root"
  install -d -m 0700 -o 65532 -g 65532 "$stage/home/nonroot"
  # Provenance: the Debian packages the runtime came from.
  install -d "$stage/usr/share/gpupool"
  cp "$cachedir/packages.txt" "$stage/usr/share/gpupool/$name.packages"
  # The program must start in its own image: the loader resolves every library.
  if closure "$stage" "${targets[@]}" | grep 'not found'; then
    die "$name: libraries missing in the image"
  fi
  chroot "$stage" "${EMU_IN[@]}" "/usr/bin/$name" --version >/dev/null 2>&1 ||
    chroot "$stage" "${EMU_IN[@]}" "/usr/bin/$name" --help >/dev/null 2>&1 ||
    die "$name does not run inside its own rootfs"
  ((${#EMU_IN[@]} == 0)) || rm -f "$stage${EMU_IN[0]}"
}

# --- 4. layers and the OCI image ---------------------------------------------------
# layer_tar DIR OUT  -- a deterministic tarball of DIR.
layer_tar() {
  local dir=$1 out=$2
  find "$dir" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  tar -C "$dir" --sort=name --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    --format=posix -cf "$out" .
}
build_image() {
  local name=$1 bin=$BUILD/bin/$1 pkgs cachedir work layout ref
  [[ -x $bin ]] || die "$bin missing: build it first (make build / cmake --build $BUILD)"
  [[ -n ${USER_OF[$name]:-} ]] || die "unknown image $name"
  # The plugin's --isolation=memory (the default in gpu-mem mode) installs
  # this library from the image (--isolation-library): an image without it
  # would fail to start there, so it is not built at all.
  if [[ $name == gpupool-device-plugin && ! -f $BUILD/lib/libgpupool-cuda.so ]]; then
    die "$BUILD/lib/libgpupool-cuda.so missing: build the gpupool-cuda target first (cmake --build $BUILD --target gpupool-cuda); the device plugin image ships it at /usr/lib/gpupool/"
  fi
  mapfile -t pkgs < <(packages_of "$bin")
  log "$name: loads at run time: $(dlopened_of "$bin" | xargs -r -n1 basename | paste -sd' ' -)"
  log "$name: ldd + run-time loads -> Debian packages: ${pkgs[*]}"
  cachedir=$(rootfs_for "${pkgs[@]}")
  work=$OUT/work-$name
  rm -rf "$work"
  mkdir -p "$work"
  stage_image "$name" "$bin" "$cachedir" "$work/stage"
  # Layer 1: the Debian runtime; layer 2: the program.
  mkdir -p "$work/app/usr/bin"
  mv "$work/stage/usr/bin/$name" "$work/app/usr/bin/$name"
  rmdir --ignore-fail-on-non-empty "$work/stage/usr/bin"
  if [[ $name == gpupool-device-plugin ]]; then
    # The DRA kubelet plugin ships in the same image (deploy/dra runs
    # /usr/bin/gpupool-dra-plugin from it). It must need nothing the device
    # plugin's runtime layer lacks: its Debian packages are a subset.
    local dra=$BUILD/bin/gpupool-dra-plugin extra
    [[ -x $dra ]] || die "$dra missing: build it first (make build / cmake --build $BUILD)"
    extra=$(comm -23 <(packages_of "$dra" | sort -u) <(printf '%s\n' "${pkgs[@]}" | sort -u))
    [[ -z $extra ]] || die "gpupool-dra-plugin needs packages the device plugin's image lacks: $extra"
    "$STRIP" --strip-unneeded -o "$work/app/usr/bin/gpupool-dra-plugin" "$dra"
    chmod 0755 "$work/app/usr/bin/gpupool-dra-plugin"
    # Copied as it is into --isolation-dir at start; libc only, no closure to add.
    install -d "$work/app/usr/lib/gpupool"
    strip --strip-unneeded -o "$work/app/usr/lib/gpupool/libgpupool-cuda.so" "$BUILD/lib/libgpupool-cuda.so"
    chmod 0755 "$work/app/usr/lib/gpupool/libgpupool-cuda.so"
  fi
  layer_tar "$work/stage" "$work/runtime.tar"
  layer_tar "$work/app" "$work/app.tar"
  ref=$REPO/$name:$TAG
  layout=$work/oci
  umoci init --layout "$layout"
  umoci new --image "$layout:$TAG"
  umoci raw add-layer --image "$layout:$TAG" --history.created="$CREATED" \
    --history.created_by="gpupool scripts/image.sh: Debian $SUITE runtime ($(awk '{print $1}' "$cachedir/packages.txt" | paste -sd, -))" \
    "$work/runtime.tar"
  umoci raw add-layer --image "$layout:$TAG" --history.created="$CREATED" \
    --history.created_by="gpupool scripts/image.sh: /usr/bin/$name" "$work/app.tar"
  local cfg=(--image "$layout:$TAG" --no-history --created="$CREATED" --os linux --architecture "$ARCH"
             --config.user "${USER_OF[$name]}" --config.workingdir /
             --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
             --config.entrypoint "/usr/bin/$name"
             --config.label "org.opencontainers.image.title=$name"
             --config.label "org.opencontainers.image.description=${TITLE_OF[$name]}"
             --config.label "org.opencontainers.image.created=$CREATED"
             --manifest.annotation "org.opencontainers.image.created=$CREATED")
  # Where it comes from (source, revision, version, licences): the same keys in the
  # config, which `ctr`/`crane config` show, and the manifest, which registries index.
  local kv
  for kv in "${PROVENANCE[@]}"; do
    cfg+=(--config.label "$kv" --manifest.annotation "$kv")
  done
  [[ -n ${PORTS_OF[$name]} ]] && cfg+=(--config.exposedports "${PORTS_OF[$name]}")
  umoci config "${cfg[@]}"
  umoci gc --layout "$layout"
  # Name the image in the index (containerd's annotation), so an import
  # needs no --base-name; then pack the layout deterministically.
  /usr/bin/python3 - "$layout/index.json" "$ref" <<'PY'
import json, sys
path, ref = sys.argv[1:3]
with open(path) as f:
    index = json.load(f)
for m in index["manifests"]:
    m.setdefault("annotations", {})["io.containerd.image.name"] = ref
with open(path, "w") as f:
    json.dump(index, f, sort_keys=True, separators=(",", ":"))
PY
  layer_tar "$layout" "$OUT/$name.oci.tar.tmp"
  mv -f "$OUT/$name.oci.tar.tmp" "$OUT/$name.oci.tar"
  echo "$ref" >"$OUT/$name.ref"
  # Sizes: compressed = what a registry or `ctr import` moves (the OCI
  # tarball); uncompressed = the two layers unpacked (tar sizes).
  local comp uncomp digest
  comp=$(stat -c %s "$OUT/$name.oci.tar")
  uncomp=$(($(stat -c %s "$work/runtime.tar") + $(stat -c %s "$work/app.tar")))
  digest=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$layout/index.json")
  printf '%s %s %s %s\n' "$name" "$comp" "$uncomp" "$digest" >>"$OUT/sizes.txt.tmp"
  log "$name: $ref  manifest $digest"
  rm -rf "$work"
}

rm -f "$OUT/sizes.txt.tmp"
for img in "${IMAGES[@]}"; do
  build_image "$img"
done
mv -f "$OUT/sizes.txt.tmp" "$OUT/sizes.txt"
printf '\n%-28s %-52s %12s %14s\n' IMAGE REFERENCE COMPRESSED UNCOMPRESSED
while read -r name comp uncomp digest; do
  awk -v n="$name" -v r="$(cat "$OUT/$name.ref")" -v c="$comp" -v u="$uncomp" \
    'BEGIN { printf "%-28s %-52s %9.1f MB %11.1f MB\n", n, r, c / 1e6, u / 1e6 }'
done <"$OUT/sizes.txt"
echo "files: $OUT/<image>.oci.tar   import: ctr -n k8s.io images import $OUT/<image>.oci.tar"
