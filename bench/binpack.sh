#!/bin/sh
# binpack.sh -- mean % of cluster milli-GPU allocated at 130% GPU demand,
# seeds 42..51, for each placement policy over the four openb traces
# (the FGD artifact's protocol; see docs/placement.md). Prints a markdown
# table and the wall-clock time of each trace's three runs.
#
#   bench/binpack.sh [BUILD_DIR]    (default: $GP_BUILD_DIR or ./build)
#   GP_OPENB_DIR   trace folder (default data/openb in the checkout, which ships
#                  the node list and the default pod list; the gpushare40,
#                  multigpu20 and gpuspec10 lists are upstream's: a trace whose
#                  file is missing gets a "not in GP_OPENB_DIR" row)
#   GP_SEEDS       seed range   (default 42..51)
#   GP_SIM_ARGS    more gpupool-sim flags, e.g. "--gpu-cores skew" (default none)
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-${GP_BUILD_DIR:-$ROOT/build}}
SIM=$BUILD/bin/gpupool-sim
[ -x "$SIM" ] || SIM=$BUILD/gpupool-sim
DATA=${GP_OPENB_DIR:-$ROOT/data/openb}
SEEDS=${GP_SEEDS:-42..51}
NODES=$DATA/openb_node_list_gpu_node.csv

if [ ! -x "$SIM" ]; then
    echo "binpack.sh: no gpupool-sim under $BUILD (build it first)" >&2
    exit 1
fi
if [ ! -r "$NODES" ]; then
    echo "binpack.sh: node list $NODES not found (data/openb in the checkout, or set GP_OPENB_DIR)" >&2
    exit 1
fi

mean_of() { # policy pods-file -> mean alloc %
    # shellcheck disable=SC2086 # GP_SIM_ARGS is split into flags on purpose
    "$SIM" --nodes "$NODES" --pods "$2" --policy "$1" --seeds "$SEEDS" ${GP_SIM_ARGS:-} -o json |
        sed -n 's/.*"mean_alloc_pct": *\([0-9.]*\).*/\1/p'
}

echo "| trace | binpack | spread | gpupool | FGD (artifact) | best-fit (artifact) | time (3 policies) |"
echo "|---|---|---|---|---|---|---|"
for trace in default:95.39:93.08 gpushare40:94.15:91.69 multigpu20:95.65:93.93 gpuspec10:94.95:93.30; do
    name=${trace%%:*}
    rest=${trace#*:}
    fgd=${rest%%:*}
    bf=${rest#*:}
    pods=$DATA/openb_pod_list_$name.csv
    if [ ! -r "$pods" ]; then
        printf '| %s | - | - | - | %s | %s | not in GP_OPENB_DIR (%s) |\n' "$name" "$fgd" "$bf" "$DATA"
        continue
    fi
    start=$(date +%s.%N)
    b=$(mean_of binpack "$pods")
    s=$(mean_of spread "$pods")
    g=$(mean_of gpupool "$pods")
    end=$(date +%s.%N)
    t=$(echo "$end - $start" | bc)
    printf '| %s | %.2f | %.2f | **%.2f** | %s | %s | %.1f s |\n' "$name" "$b" "$s" "$g" "$fgd" "$bf" "$t"
done
