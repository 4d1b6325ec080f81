#!/bin/sh
# The GPU conformance kit's entry point (docs/gpu-check.md): runs every check
# on this node's NVIDIA driver and NVML with the programs of this directory.
#
#   ./run.sh [--out DIR] [--limit 10g] [--only REGEX] [--fake BUILD] ...   (--help: all)
#
# Needs a python3 (3.8+, standard library only; the torch checks use the
# PyTorch of that same Python and SKIP without it; GPUCHECK_PYTHON picks
# another interpreter) and nothing installed: the device plugin and the
# kubelet run on this kit's own loader and libraries (rt/). Run it outside any
# gpupool container: the runner's NVML readings are the node's view.
# Exit 0: every check passed or skipped; 1: a check failed; 2: cannot run.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${GPUCHECK_PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
  echo "run.sh: $python not found: the kit's runner is Python 3 (set GPUCHECK_PYTHON)" >&2
  exit 2
fi
exec "$python" "$here/gpucheck.py" --kit "$here" "$@"
