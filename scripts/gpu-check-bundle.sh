#!/usr/bin/env bash
# Packs the GPU conformance kit (docs/gpu-check.md) from a build tree into
#   OUT/gpupool-gpu-check/          (the unpacked kit)
#   OUT/gpupool-gpu-check.tar.gz    (what travels to a GPU node)
# OUT defaults to BUILD/gpu-check.
# Self-contained: the device plugin and the kit's kubelet come with every
# shared library they load plus this machine's loader and glibc (rt/), so
# they run as `rt/ld-linux-*.so.* --library-path rt bin/...` on a node with
# an older glibc; the CUDA library and the probes need libc only (the
# library's symbols go back to glibc 2.17, checked by ctest cuda_glibc_versions).
#
#   scripts/gpu-check-bundle.sh BUILD [OUT]
set -euo pipefail

build=$(cd "${1:?usage: $0 BUILD [OUT]}" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
top=${2:-$build/gpu-check}
mkdir -p "$top"
top=$(cd "$top" && pwd)
kit=$top/gpupool-gpu-check
plugin=$build/bin/gpupool-device-plugin
kubelet=$build/test/gpucheck/gpupool-gpucheck-kubelet
library=$build/lib/libgpupool-cuda.so
probes=("$build/test/cuda/gpupool-cudaprobe" "$build/test/cuda/gpupool-cudaprobe-linked"
  "$build/test/cuda/gpupool-launchprobe")

for f in "$plugin" "$kubelet" "$library" "${probes[@]}"; do
  [[ -x $f || -f $f ]] || { echo "gpu-check-bundle: $f is not built" >&2; exit 1; }
done

# The library is preloaded into the user's programs, on the node's own libc:
# it may need nothing but glibc's libraries (and, in a GP_SANITIZE build
# that only the tests use, the sanitizers' runtimes).
sanitized=$(grep -c '^GP_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" || true)
needed=$(objdump -p "$library" | awk '$1 == "NEEDED" {print $2}')
for n in $needed; do
  case $n in
    libc.so.6 | libdl.so.2 | libpthread.so.0) continue ;;
    libasan.so.* | libubsan.so.*) [[ $sanitized == 1 ]] && continue ;;
  esac
  echo "gpu-check-bundle: $library needs $n: it must depend on libc only" >&2
  exit 1
done

rm -rf "$kit" "$top/gpupool-gpu-check.tar.gz"
mkdir -p "$kit/bin" "$kit/lib" "$kit/rt"
install -m 0755 "$plugin" "$kubelet" "${probes[@]}" "$kit/bin/"
install -m 0755 "$library" "$kit/lib/"
# Debug sections are most of the daemons' size; the code is the same.
strip --strip-debug "$kit/bin/"* "$kit/lib/"*

# rt/: every library the plugin and the kubelet load (as this machine's
# loader resolves them), the loader itself, and the whole of glibc's set, so
# that a driver library dlopened later (libnvidia-ml.so.1 needs libdl,
# libpthread, librt, libm) finds this glibc's and never mixes two.
loader=
for exe in "$plugin" "$kubelet"; do
  while read -r name arrow path _; do
    if [[ $arrow == "=>" && -f $path ]]; then
      install -m 0644 "$(readlink -f "$path")" "$kit/rt/$name"
    elif [[ $name == /* && -f $name ]]; then
      loader=$name
    fi
  done < <(ldd "$exe")
done
[[ -n $loader ]] || { echo "gpu-check-bundle: no loader in ldd $plugin" >&2; exit 1; }
install -m 0755 "$(readlink -f "$loader")" "$kit/rt/$(basename "$loader")"
libc_dir=$(dirname "$(readlink -f "$(ldd "$plugin" | awk '$1 == "libc.so.6" {print $3}')")")
for n in libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1; do
  [[ -f $kit/rt/$n ]] || install -m 0644 "$(readlink -f "$libc_dir/$n")" "$kit/rt/$n"
done

install -m 0755 "$src/test/gpucheck/run.sh" "$src/test/gpucheck/gpucheck.py" "$kit/"
install -m 0644 "$src/test/gpucheck/torch_checks.py" "$src/test/gpucheck/fake-inventory.json" "$kit/"
{
  echo "gpupool $(git -C "$src" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "built on $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -1)"
  echo "arch $(uname -m)"
} > "$kit/VERSION"
(cd "$kit" && find . -type f ! -name SHA256SUMS -print0 | sort -z | xargs -0 sha256sum) > "$kit/SHA256SUMS"

tar -C "$top" -czf "$top/gpupool-gpu-check.tar.gz" gpupool-gpu-check
size=$(stat -c %s "$top/gpupool-gpu-check.tar.gz")
echo "gpu-check-bundle: $top/gpupool-gpu-check.tar.gz ($((size / 1024)) KiB; unpacked $(du -sk "$kit" | cut -f1) KiB)"
