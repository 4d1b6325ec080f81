#!/usr/bin/env bash
# `make gpu-check`: runs the GPU conformance kit that scripts/gpu-check-bundle.sh
# packed into BUILD/gpu-check (docs/gpu-check.md). On a node with an NVIDIA
# driver it checks the real driver, NVML and PyTorch; on a machine without one
# (CI, a laptop) the same kit runs against BUILD's fake libcuda and fake NVML,
# so that it cannot rot. Output and logs also go to BUILD/gpu-check/out/.
#
#   scripts/gpu-check.sh BUILD [runner options: --only REGEX, --limit 10g, --fake BUILD, ...]
set -euo pipefail

build=$(cd "${1:?usage: $0 BUILD [options]}" && pwd)
shift
kit=$build/gpu-check/gpupool-gpu-check
[[ -x $kit/run.sh ]] || { echo "gpu-check: no kit in $kit (make gpu-bundle)" >&2; exit 2; }
exec "$kit/run.sh" --fake-if-no-driver "$build" --out "$build/gpu-check/out" "$@"
