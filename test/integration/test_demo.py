"""`make demo` as a newcomer meets it: scripts/demo.sh (parts 1-2) and scripts/demo_pool.py
(parts 3-6) run against the build, every part is shown, and README's transcript is what the
run prints (so the README cannot drift from the code again).

    GP_BUILD_DIR   build tree (default ./build)
"""

import os
import re
import subprocess

import pytest

from conftest import ROOT, scaled

BUILD = os.path.abspath(os.environ.get("GP_BUILD_DIR", os.path.join(ROOT, "build")))
PYTHON = "/usr/bin/python3"


def run(argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=scaled(120), cwd=ROOT)


def placeholders(text):
    """What varies from run to run, written as README writes it."""
    text = re.sub(r"http://127\.0\.0\.1:\d+", "http://127.0.0.1:…", text)
    text = re.sub(r"--port \d+", "--port …", text)
    return re.sub(r"\(pid \d+\)", "(pid …)", text)


def readme_transcript():
    text = open(os.path.join(ROOT, "README.md")).read()
    start = text.index("What `make demo` prints after part 1")
    body = text.index("```\n", start) + 4
    return text[body:text.index("```\n", body)]


@pytest.fixture(scope="module")
def demo():
    for need in ("bin/gpupool-device-plugin", "lib/libgpupool-cuda.so", "test/cuda/gpupool-cudaprobe",
                 "test/fakecuda/libcuda.so.1", "test/fakecuda/gpupool-fakecuda-phys",
                 "bin/gpupool-scheduler-extender", "bin/kubectl-gpupool", "bin/gpupool-sim"):
        if not os.path.exists(os.path.join(BUILD, need)):
            pytest.fail("%s not built in %s (the demo needs the whole build)" % (need, BUILD))
    node = run(["bash", os.path.join(ROOT, "scripts", "demo.sh"), BUILD])
    assert node.returncode == 0, node.stdout + node.stderr
    pool = run([PYTHON, os.path.join(ROOT, "scripts", "demo_pool.py"), BUILD])
    assert pool.returncode == 0, pool.stdout + pool.stderr
    return node.stdout, pool.stdout


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
    node, pool = demo
    printed = placeholders(node[node.index("== 2. "):] + pool)
    assert readme_transcript() == printed
