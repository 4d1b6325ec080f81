"""`make demo` as a newcomer meets it: scripts/demo.sh (parts 1-2) and scripts/demo_pool.py
(parts 3-6) run against the build, every part is shown, and README's transcript is what the
run prints (so the README cannot drift from the code again: regenerate it with
`scripts/demo_transcript.py build --write`).

    GP_BUILD_DIR   build tree (default ./build)
"""

import os
import re
import sys

import pytest

from conftest import ROOT, scaled

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import demo_transcript  # noqa: E402

BUILD = os.path.abspath(os.environ.get("GP_BUILD_DIR", os.path.join(ROOT, "build")))


@pytest.fixture(scope="module")
def demo():
    for need in ("bin/gpupool-device-plugin", "lib/libgpupool-cuda.so", "test/cuda/gpupool-cudaprobe",
                 "test/fakecuda/libcuda.so.1", "test/fakecuda/gpupool-fakecuda-phys",
                 "bin/gpupool-scheduler-extender", "bin/kubectl-gpupool", "bin/gpupool-sim"):
        if not os.path.exists(os.path.join(BUILD, need)):
            pytest.fail("%s not built in %s (the demo needs the whole build)" % (need, BUILD))
    return demo_transcript.run_demo(BUILD, timeout=scaled(120))


def test_every_part_in_order(demo):
    out = "".join(demo)
    parts = [int(n) for n in re.findall(r"^== (\d+)\. ", out, re.M)]
    assert parts == [1, 2, 3, 4, 5, 6], out


def test_the_share_is_enforced(demo):
    node, _ = demo
    part2 = node[node.index("== 2. "):]
    assert "process B: cuMemAlloc 2 GiB -> CUDA_ERROR_OUT_OF_MEMORY" in part2
    assert "process B: cuMemAlloc 1 GiB -> CUDA_SUCCESS; the share: free 0 GiB of 4 GiB" in part2
    assert "a process without the library sees the GPU itself: free 13 GiB of 16 GiB" in part2


def test_readme_shows_what_the_demo_prints(demo):
    with open(demo_transcript.README, encoding="utf-8") as f:
        text = f.read()
    start, end = demo_transcript.readme_block(text)
    assert text[start:end] == demo_transcript.transcript(*demo), \
        "README.md's transcript differs from the run: scripts/demo_transcript.py build --write"
