#!/bin/sh
# check_glibc_versions.sh LIB -- fails when the preloaded isolation library
# needs a glibc newer than 2.17 (CentOS 7, the oldest CUDA images), or is not
# linked to libdl.so.2 and libpthread.so.0, which older glibc keep separate
# (src/cuda/cuda_glibc.h says why this matters).
set -eu
lib=$1
objdump() { command "${OBJDUMP:-objdump}" "$@"; }
objdump -T "$lib" >/dev/null
bad=$(objdump -T "$lib" | awk '$0 ~ /\*UND\*/ && $0 ~ /GLIBC_/ {
        v = $0; sub(/.*GLIBC_/, "", v); sub(/[) ].*/, "", v)
        split(v, p, "."); if (p[1] > 2 || (p[1] == 2 && p[2] + 0 > 17)) print $NF "@GLIBC_" v }')
if [ -n "$bad" ]; then
  echo "$lib needs a glibc newer than 2.17 for:" >&2
  echo "$bad" >&2
  exit 1
fi
for dep in libdl.so.2 libpthread.so.0; do
  objdump -p "$lib" | grep -q "NEEDED *$dep" || { echo "$lib does not name $dep" >&2; exit 1; }
done
# Only the driver's and NVML's names, and dlsym, leave the library.
extra=$(objdump -T "$lib" | awk '$0 !~ /\*UND\*/ && $2 == "g" { print $NF }' | grep -v -E '^(cu|nvml)[A-Za-z0-9_]+$|^dlsym$' || true)
if [ -n "$extra" ]; then
  echo "$lib exports more than it interposes:" >&2
  echo "$extra" >&2
  exit 1
fi
echo "ok: $(objdump -T "$lib" | awk '$0 !~ /\*UND\*/ && $2 == "g"' | wc -l) exports, glibc <= 2.17"
