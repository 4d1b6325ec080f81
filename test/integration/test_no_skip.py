"""GP_TEST_NO_SKIP=1 (set by .ci/run) turns a skipped test into a failure
(conftest.py's pytest_runtest_makereport); unset, a skip stays a skip."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_inner(tmp_path, no_skip):
    (tmp_path / "test_inner.py").write_text(
        "import pytest\n\n"
        "def test_skips():\n    pytest.skip('frobnicator is not installed')\n\n"
        "@pytest.mark.skipif(True, reason='no widget')\ndef test_marked():\n    pass\n\n"
        "@pytest.mark.xfail(reason='known')\ndef test_xfail():\n    assert False\n\n"
        "def test_runs():\n    pass\n")
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""),
               GP_TEST_NO_SKIP="1" if no_skip else "")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "conftest", "-rA", str(tmp_path / "test_inner.py")],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)


def test_skip_is_a_failure_with_no_skip(tmp_path):
    out = run_inner(tmp_path, True)
    assert out.returncode == 1, out.stdout
    # a skip in setup (a skipif mark) is reported as an error, one in the call as a failure
    assert "1 failed, 1 passed, 1 xfailed, 1 error" in out.stdout, out.stdout
    assert "frobnicator is not installed" in out.stdout and "no widget" in out.stdout


def test_skip_stays_a_skip_without(tmp_path):
    out = run_inner(tmp_path, False)
    assert out.returncode == 0, out.stdout
    assert "1 passed, 2 skipped, 1 xfailed" in out.stdout, out.stdout
