#!/usr/bin/python3
"""demo_transcript.py BUILD_DIR [--write] -- README's `make demo` transcript, from a run.

Runs scripts/demo.sh, scripts/demo_pool.py and scripts/demo_dra.py against BUILD_DIR and
prints what README.md shows of them: everything from part 2 on, with what varies from run
to run (the fake API servers' ports, the extender's port, a pid) written as `…`. --write
replaces README's block with it. test/integration/test_demo.py compares the two, so a change
to what the demo prints fails there until README is regenerated with --write. The compute
shares of part 8 are measured, so they differ by tenths from run to run: README keeps the
figures of the run that wrote it, and the comparison (comparable()) masks them on both sides.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
INTRO = "What `make demo` prints after part 1"
SCRIPTS = (["bash", "demo.sh"], [sys.executable, "demo_pool.py"], [sys.executable, "demo_dra.py"])


def run_demo(build, timeout=300):
    """(demo.sh's, demo_pool.py's, demo_dra.py's stdout); raises on a failed run."""
    out = []
    for interpreter, script in SCRIPTS:
        argv = [interpreter, os.path.join(ROOT, "scripts", script), build]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        if r.returncode != 0:
            raise RuntimeError("%s failed (%d):\n%s%s" % (script, r.returncode, r.stdout, r.stderr))
        out.append(r.stdout)
    return tuple(out)


def transcript(node_out, pool_out, dra_out):
    text = node_out[node_out.index("== 2. "):] + pool_out + dra_out
    text = re.sub(r"http://127\.0\.0\.1:\d+", "http://127.0.0.1:…", text)
    text = re.sub(r"--port \d+", "--port …", text)
    return re.sub(r"\(pid \d+\)", "(pid …)", text)


def comparable(text):
    """A transcript with part 8's measured shares masked (they vary by tenths)."""
    return re.sub(r"-> \d+\.\d % of the GPU's time", "-> …% of the GPU's time", text)


def readme_block(text):
    """(start, end) of the transcript inside README's text."""
    body = text.index("```\n", text.index(INTRO)) + 4
    return body, text.index("```\n", body)


def main():
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--write"):
        sys.exit("usage: %s BUILD_DIR [--write]" % sys.argv[0])
    new = transcript(*run_demo(os.path.abspath(sys.argv[1])))
    if len(sys.argv) == 2:
        sys.stdout.write(new)
        return
    with open(README, encoding="utf-8") as f:
        text = f.read()
    start, end = readme_block(text)
    with open(README, "w", encoding="utf-8") as f:
        f.write(text[:start] + new + text[end:])


if __name__ == "__main__":
    main()
