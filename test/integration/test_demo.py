"""`make demo` as a newcomer meets it: scripts/demo.sh (parts 1-2), scripts/demo_pool.py
(parts 3-6) and scripts/demo_dra.py (parts 7-8) run against the build, every part is shown,
and README's transcript is what the run prints (so the README cannot drift from the code
again: regenerate it with `scripts/demo_transcript.py build --write`).

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
                 "bin/gpupool-scheduler-extender", "bin/kubectl-gpupool", "bin/gpupool-sim",
                 "bin/gpupool-dra-plugin", "test/fakenvml/libnvidia-ml.so.1",
                 "test/cuda/gpupool-launchprobe", "test/fakecuda/gpupool-fakecuda-timeline"):
        if not os.path.exists(os.path.join(BUILD, need)):
            pytest.fail("%s not built in %s (the demo needs the whole build)" % (need, BUILD))
    return demo_transcript.run_demo(BUILD, timeout=scaled(120))


def test_every_part_in_order(demo):
    out = "".join(demo)
    parts = [int(n) for n in re.findall(r"^== (\d+)\. ", out, re.M)]
    assert parts == [1, 2, 3, 4, 5, 6, 7, 8], out


def test_the_share_is_enforced(demo):
    node = demo[0]
    part2 = node[node.index("== 2. "):]
    assert "process B: cuMemAlloc 2 GiB -> CUDA_ERROR_OUT_OF_MEMORY" in part2
    assert "process B: cuMemAlloc 1 GiB -> CUDA_SUCCESS; the share: free 0 GiB of 4 GiB" in part2
    assert "a process without the library sees the GPU itself: free 13 GiB of 16 GiB" in part2


def test_the_dra_driver_prepares_and_unprepares_a_share(demo):
    dra = demo[2]
    part7 = dra[dra.index("== 7. "):dra.index("== 8. ")]
    slice_devices = re.findall(r"^     (gpu-\d)  .* memory 17179869184 \(16 GiB\)  "
                               r"allowMultipleAllocations=true  uuid GPU-", part7, re.M)
    assert slice_devices == ["gpu-0", "gpu-1"], part7
    assert "allocated by the scheduler: device node-dra/gpu-0, consumedCapacity.memory 4Gi" in part7
    assert "NodePrepareResources: gpu-0 -> CDI device k8s.gpu.gpupool.io/claim=<uid>-gpu-0" in part7
    # gpu-0 of the fake NVML inventory (test/fakenvml/inventories/2gpu-16gb.json), 4 GiB
    assert ("env    CUDA_DEVICE_MEMORY_LIMIT_GPU_2f02a072_a55a_255d_dd95_4d80b5ff5378=%d"
            % (4 << 30)) in part7
    assert "mount  /run/gpupool-cuda/claims/<uid>" in part7
    assert ("NodeUnprepareResources: done; CDI specs left 0, claim regions left 0, "
            "claims in the checkpoint 0") in part7


def test_compute_shares_are_held(demo):
    dra = demo[2]
    part8 = dra[dra.index("== 8. "):]
    got = re.findall(r"^     (container-\w)  CUDA_DEVICE_SM_LIMIT=(\d+)  -> (\d+\.\d) % of the GPU's time",
                     part8, re.M)
    assert [(c, int(limit)) for c, limit, _ in got] == \
        [("container-a", 30), ("container-b", 70), ("container-a", 30)], part8
    for _, limit, share in got:
        assert abs(float(share) - int(limit)) <= 5.0, part8   # the demo's own tolerance
    assert dra.rstrip().endswith("demo: parts 7-8 OK"), dra


def test_readme_shows_what_the_demo_prints(demo):
    with open(demo_transcript.README, encoding="utf-8") as f:
        text = f.read()
    start, end = demo_transcript.readme_block(text)
    assert demo_transcript.comparable(text[start:end]) == \
        demo_transcript.comparable(demo_transcript.transcript(*demo)), \
        "README.md's transcript differs from the run: scripts/demo_transcript.py build --write"
