#!/bin/sh
# bench/isolation_bench.sh BUILD_DIR -- libgpupool-cuda's costs (docs/isolation.md),
# measured against the fake libcuda.so.1 with and without the library in one run:
#   - cuMemAlloc_v2 + cuMemFree_v2 pair (1 MiB), ns, median of 5 runs of 1,000,000 pairs
#   - cuLaunchKernel, ns, median of 5 runs of 10,000,000 launches
#   - 256 processes started at once, each cuInit + one allocation: wall time
#   - the shared region's size per container and GPU
# The probe measures its own loops (CLOCK_MONOTONIC around the loop only).
set -u
BUILD=$(cd "$1" && pwd)
PROBE=$BUILD/test/cuda/gpupool-cudaprobe
LIB=$BUILD/lib/libgpupool-cuda.so
for f in "$PROBE" "$LIB" "$BUILD/test/fakecuda/libcuda.so.1"; do
    [ -e "$f" ] || { echo "isolation_bench.sh: $f is missing (build first: make)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LD_LIBRARY_PATH=$BUILD/test/fakecuda FAKECUDA_DEVICES=80g
limited="env CUDA_DEVICE_MEMORY_LIMIT=40g CUDA_DEVICE_MEMORY_SHARED_CACHE=$tmp/region LD_PRELOAD=$LIB"

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# figure CMD... : the probe's ns=... figure of its last line, median of 5 runs
figure() {
    for i in 1 2 3 4 5; do
        "$@" | tail -n 1 | sed -n 's/.* ns=\([0-9.]*\).*/\1/p'
    done | median
}

pair_base=$(figure "$PROBE" init loop 1000000 1m)
pair_lib=$(figure $limited "$PROBE" init loop 1000000 1m)
launch_base=$(figure "$PROBE" init launch 10000000)
launch_lib=$(figure $limited "$PROBE" init launch 10000000)

# 256 processes at once: wall ms from the first fork to the last exit.
many() {
    s=$(date +%s%N)
    i=0
    while [ $i -lt 256 ]; do "$@" init alloc 1m >/dev/null & i=$((i + 1)); done
    wait
    echo $(( ($(date +%s%N) - s) / 1000000 ))
}
init_base=$(for r in 1 2 3 4 5; do many "$PROBE"; done | median)
init_lib=$(for r in 1 2 3 4 5; do many $limited "$PROBE"; done | median)
region=$(stat -c %s "$tmp"/region.* | head -n 1)

echo "| figure | without the library | with it (limit set) | added |"
echo "|---|---|---|---|"
awk -v b="$pair_base" -v l="$pair_lib" 'BEGIN { printf "| cuMemAlloc_v2 + cuMemFree_v2 (1 MiB), ns per pair | %.1f | %.1f | %.1f |\n", b, l, l - b }'
awk -v b="$launch_base" -v l="$launch_lib" 'BEGIN { printf "| cuLaunchKernel, ns per launch | %.1f | %.1f | %.1f |\n", b, l, l - b }'
echo "| 256 processes: cuInit + 1 allocation each, all at once, ms wall | $init_base | $init_lib | $((init_lib - init_base)) |"
echo "| shared region per container and GPU, bytes | - | $region | |"
