#!/bin/sh
# bench/isolation_bench.sh BUILD_DIR -- libgpupool-cuda's costs (docs/isolation.md),
# measured against the fake libcuda.so.1 with and without the library in one run:
#   - cuMemAlloc_v2 + cuMemFree_v2 pair (1 MiB), ns, median of 5 runs of 1,000,000 pairs
#   - the same pair with 16 processes churning at once on one region: ns per pair
#     as each process sees it (its own loop's wall time), median of the 16,
#     median of 3 rounds of 200,000 pairs each
#   - cuLaunchKernel, ns, median of 5 runs of 10,000,000 launches
#   - cuMemGetInfo_v2, ns, with 0, 64 and 256 other live processes holding
#     memory in the region (median of 5 runs of 200,000 calls)
#   - 256 processes started at once, each cuInit + one allocation: wall time
#   - the shared region's size per container and GPU
# The probe and cuda_info_loop measure their own loops (CLOCK_MONOTONIC
# around the loop only). GP_BENCH_LIB=<path> measures another build of the
# library (e.g. an older one, for a before/after) with this build's fake
# driver and probes.
set -u
BUILD=$(cd "$1" && pwd)
PROBE=$BUILD/test/cuda/gpupool-cudaprobe
INFO=$BUILD/bench/cuda_info_loop
LIB=${GP_BENCH_LIB:-$BUILD/lib/libgpupool-cuda.so}
for f in "$PROBE" "$INFO" "$LIB" "$BUILD/test/fakecuda/libcuda.so.1"; do
    [ -e "$f" ] || { echo "isolation_bench.sh: $f is missing (build first: make)" >&2; exit 1; }
done
tmp=$(mktemp -d)
holders=""
cleanup() {
    for p in $holders; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
export LD_LIBRARY_PATH=$BUILD/test/fakecuda FAKECUDA_DEVICES=80g
limited="env CUDA_DEVICE_MEMORY_LIMIT=40g CUDA_DEVICE_MEMORY_SHARED_CACHE=$tmp/region LD_PRELOAD=$LIB"

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ns_of() { sed -n 's/.* ns=\([0-9.]*\).*/\1/p'; }

# figure CMD... : the ns=... figure of its last line, median of 5 runs
figure() {
    for i in 1 2 3 4 5; do
        "$@" | tail -n 1 | ns_of
    done | median
}

# churn CMD... : 16 processes run CMD at once; the median of their ns figures
churn() {
    i=0
    while [ $i -lt 16 ]; do "$@" >"$tmp/churn.$i" & i=$((i + 1)); done
    wait
    cat "$tmp"/churn.* | ns_of | median
}

# hold N : N processes of the container each hold 1 MiB until killed
hold() {
    i=0
    while [ $i -lt "$1" ]; do
        $limited "$PROBE" init alloc 1m hold >"$tmp/hold.$i" 2>&1 &
        holders="$holders $!"
        i=$((i + 1))
    done
    i=0
    while [ $i -lt "$1" ]; do
        until grep -q holding "$tmp/hold.$i"; do sleep 0.05; done
        i=$((i + 1))
    done
}
unhold() {
    for p in $holders; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    holders=""
    rm -f "$tmp"/hold.*
}

pair_base=$(figure "$PROBE" init loop 1000000 1m)
pair_lib=$(figure $limited "$PROBE" init loop 1000000 1m)
churn_base=$(for r in 1 2 3; do churn "$PROBE" init loop 200000 1m; done | median)
churn_lib=$(for r in 1 2 3; do churn $limited "$PROBE" init loop 200000 1m; done | median)
launch_base=$(figure "$PROBE" init launch 10000000)
launch_lib=$(figure $limited "$PROBE" init launch 10000000)

info_base=$(figure "$INFO" 200000)
info_0=$(figure $limited "$INFO" 200000)
hold 64
info_64=$(figure $limited "$INFO" 200000)
hold 192
info_256=$(figure $limited "$INFO" 200000)
unhold

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
row() { awk -v t="$1" -v b="$2" -v l="$3" 'BEGIN { printf "| %s | %.1f | %.1f | %.1f |\n", t, b, l, l - b }'; }
row "cuMemAlloc_v2 + cuMemFree_v2 (1 MiB), ns per pair" "$pair_base" "$pair_lib"
row "the same, 16 processes churning at once on one region, ns per pair" "$churn_base" "$churn_lib"
row "cuLaunchKernel, ns per launch" "$launch_base" "$launch_lib"
row "cuMemGetInfo_v2, ns per call" "$info_base" "$info_0"
row "cuMemGetInfo_v2 with 64 other live processes in the region, ns" "$info_base" "$info_64"
row "cuMemGetInfo_v2 with 256 other live processes in the region, ns" "$info_base" "$info_256"
echo "| 256 processes: cuInit + 1 allocation each, all at once, ms wall | $init_base | $init_lib | $((init_lib - init_base)) |"
echo "| shared region per container and GPU, bytes | - | $region | |"
