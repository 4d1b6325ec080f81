"""gpupool-sim end to end: the built binary on small traces written here.

    GP_BUILD_DIR       build tree holding bin/gpupool-sim (default ./build)
    GP_PLUGIN_WRAPPER  command line the simulator runs under (valgrind); see conftest.py

Checks the JSON Lines contract, per-seed determinism, the text table, and
that bad input of each kind exits 1 with a `file:line: what` message.
"""

import json
import os
import re

import pytest

from conftest import run_program

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD = os.path.abspath(os.environ.get("GP_BUILD_DIR", os.path.join(ROOT, "build")))
SIM_BIN = os.path.join(BUILD, "bin", "gpupool-sim")

NODES = """sn,cpu_milli,memory_mib,gpu,model
n0,64000,262144,2,P100
n1,96000,393216,8,G2
n2,104000,524288,2,T4
n3,32000,131072,4,V100M16
"""

PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p0,12000,16384,1,1000,,LS,Running,0,1,0
p1,6000,12288,1,460,,LS,Running,0,1,0
p2,4000,8192,1,810,,BE,Running,0,1,0
p3,8000,16384,0,0,,BE,Running,0,1,0
p4,2000,4096,1,320,V100M16|G2,LS,Running,0,1,0
p5,16000,65536,2,1000,,LS,Running,0,1,0
"""

PODS_SHORT = """name,cpu_milli,memory_mib,num_gpu,gpu_milli
p0,12000,16384,1,1000
p1,6000,12288,1,470
p2,48000,16384,8,1000
"""

JSON_FIELDS = {"policy", "seed", "pods", "failed", "alloc_milli", "capacity_milli", "alloc_pct"}


@pytest.fixture(scope="module", autouse=True)
def sim_binary():
    if not os.access(SIM_BIN, os.X_OK):
        pytest.fail("gpupool-sim not built: %s (run make, or set GP_BUILD_DIR)" % SIM_BIN)


@pytest.fixture
def trace(tmp_path):
    nodes = tmp_path / "nodes.csv"
    pods = tmp_path / "pods.csv"
    nodes.write_text(NODES)
    pods.write_text(PODS)
    return str(nodes), str(pods)


def run_sim(*args):
    return run_program([SIM_BIN, *args], timeout=120)


def json_lines(out):
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert lines, "no output"
    return lines[:-1], lines[-1]


def test_json_lines_contract(trace):
    nodes, pods = trace
    r = run_sim("--nodes", nodes, "--pods", pods, "--policy", "binpack", "--seeds", "3..6",
                "-o", "json")
    assert r.returncode == 0, r.stderr
    per_seed, summary = json_lines(r.stdout)
    assert [o["seed"] for o in per_seed] == [3, 4, 5, 6]
    for o in per_seed:
        assert JSON_FIELDS <= set(o), o
        assert o["policy"] == "binpack"
        assert o["capacity_milli"] == 16000
        assert 0 < o["alloc_milli"] <= o["capacity_milli"]
        assert 0 <= o["failed"] <= o["pods"]
        assert o["alloc_pct"] == pytest.approx(100.0 * o["alloc_milli"] / o["capacity_milli"])
    assert summary["mean_alloc_pct"] == pytest.approx(
        sum(o["alloc_pct"] for o in per_seed) / len(per_seed))


def test_default_policy_is_gpupool_and_seed_is_deterministic(trace):
    nodes, pods = trace
    runs = [run_sim("--nodes", nodes, "--pods", pods, "--seed", "9", "-o", "json")
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert runs[0].stdout == runs[1].stdout
    per_seed, _ = json_lines(runs[0].stdout)
    assert per_seed[0]["policy"] == "gpupool"
    assert per_seed[0]["seed"] == 9
    # the same seed inside a range gives the same replay, whatever the threads do
    r = run_sim("--nodes", nodes, "--pods", pods, "--seeds", "8..10", "--jobs", "3", "-o", "json")
    assert r.returncode == 0, r.stderr
    ranged, _ = json_lines(r.stdout)
    assert ranged[1] == per_seed[0]


def test_short_pod_format_and_text_output(tmp_path, trace):
    nodes, _ = trace
    pods = tmp_path / "multigpu.csv"
    pods.write_text(PODS_SHORT)
    r = run_sim("--nodes", nodes, "--pods", str(pods), "--policy", "spread")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["policy", "seed", "pods", "failed", "alloc_milli",
                                "capacity_milli", "alloc_%"]
    assert lines[1].split()[:2] == ["spread", "42"]
    assert lines[-1].startswith("mean alloc: ")


def test_demand_reaches_130_percent(trace):
    nodes, pods = trace
    r = run_sim("--nodes", nodes, "--pods", pods, "--seed", "1", "-o", "json")
    per_seed, _ = json_lines(r.stdout)
    # 16 GPUs * 1.3 = 20.8 GPUs of demand: far more pods than the 6 in the file
    assert per_seed[0]["pods"] > 20
    assert per_seed[0]["failed"] > 0


@pytest.mark.parametrize("nodes_text,pods_text,where,what", [
    (NODES, PODS.replace("p2,4000,8192,1,810", "p2,4000,8192,1,8x0"), "pods.csv:4:",
     "gpu_milli: '8x0'"),
    (NODES, PODS.replace("gpu_spec", "spec"), "pods.csv:1:", "header column 6"),
    (NODES, "name,cpu_milli\n", "pods.csv:1:", "header has 2 columns"),
    (NODES, PODS + "p9,1,1,1\n", "pods.csv:8:", "4 columns, expected 11"),
    (NODES.replace("n2,104000", "n2,-104000"), PODS, "nodes.csv:4:", "cpu_milli: '-104000'"),
    (NODES + "n9,1,1,99,G2\n", PODS, "nodes.csv:6:", "gpu: 99 is out of range"),
    ("", PODS, "nodes.csv:0:", "empty file"),
])
def test_bad_csv(tmp_path, nodes_text, pods_text, where, what):
    nodes = tmp_path / "nodes.csv"
    pods = tmp_path / "pods.csv"
    nodes.write_text(nodes_text)
    pods.write_text(pods_text)
    r = run_sim("--nodes", str(nodes), "--pods", str(pods), "-o", "json")
    assert r.returncode == 1
    assert r.stdout == ""
    assert where in r.stderr and what in r.stderr, r.stderr
    # a person reads it: one "gpupool-sim: file:line: ..." line, not a klog record
    assert r.stderr.startswith("gpupool-sim: ") and r.stderr.count("\n") == 1, r.stderr


@pytest.mark.parametrize("args,what", [
    (["--policy", "fgd"], 'invalid value "fgd" for --policy: want gpupool, default, binpack or spread'),
    (["--seeds", "9..3"], 'invalid value "9..3" for --seeds: want a range A..B with A <= B'),
    (["--seed", "x"], 'invalid value "x" for --seed: want a non-negative integer'),
    (["--seed", "1", "--seeds", "1..2"], "give one of --seed and --seeds, once"),
    (["--seed", "1", "--seed", "2"], "give one of --seed and --seeds, once"),
    (["-o", "yaml"], 'invalid value "yaml" for --output: want text or json'),
    (["--demand", "0"], 'invalid value "0" for --demand: want an integer from 1 to 10000'),
    (["--jobs", "65"], 'invalid value "65" for --jobs'),
    (["--bogus"], "unknown flag: --bogus (see --help)"),
    (["--gpu-cores", "on"], 'invalid value "on" for --gpu-cores: want milli, off or skew'),
    (["extra"], 'unexpected argument "extra"'),
])
def test_bad_flags(trace, args, what):
    """The option engine's errors, as every gpupool program words them: one line, no klog
    header, exit status 2 for a usage error."""
    nodes, pods = trace
    r = run_sim("--nodes", nodes, "--pods", pods, *args)
    assert r.returncode == 2
    assert r.stderr.startswith("gpupool-sim: ") and r.stderr.count("\n") == 1, r.stderr
    assert what in r.stderr, r.stderr
    assert r.stdout == ""


def test_missing_inputs_help_and_version(tmp_path):
    r = run_sim("--pods", "x.csv")
    assert r.returncode == 2 and "--nodes and --pods are required" in r.stderr
    missing = str(tmp_path / "nope.csv")
    r = run_sim("--nodes", missing, "--pods", missing)
    assert r.returncode == 1 and r.stderr == "gpupool-sim: %s: No such file or directory\n" % missing
    r = run_sim("--help")
    assert r.returncode == 0 and r.stdout.startswith("Usage: gpupool-sim [options]")
    for flag in ("--nodes", "--pods", "--policy", "--seed", "--seeds", "--demand", "--jobs",
                 "--gpu-cores", "--output value, -o value", "--help, -h", "--version"):
        assert "  " + flag in r.stdout, r.stdout
    assert "environment" not in r.stdout  # it reads no variable
    r = run_sim("-h")
    assert r.returncode == 0 and "--seeds" in r.stdout
    r = run_sim("--version")
    assert r.returncode == 0
    assert re.fullmatch(r"gpupool-sim version \d+\.\d+\.\d+ \(commit ([0-9a-f]{12}|unknown)\)\n",
                        r.stdout), r.stdout


def test_gpu_cores_modes(trace):
    """Cores that follow gpu_milli (the default) change nothing against one dimension (off),
    seed by seed; skewed cores replay too (test_sim.c checks they are never over-booked)."""
    nodes, pods = trace
    out = {}
    for mode in ("milli", "off", "skew"):
        r = run_sim("--nodes", nodes, "--pods", pods, "--seeds", "1..4", "--gpu-cores", mode,
                    "-o", "json")
        assert r.returncode == 0, r.stderr
        out[mode], _ = json_lines(r.stdout)
    assert out["milli"] == out["off"]
    assert all(0 < o["alloc_milli"] <= o["capacity_milli"] for o in out["skew"])


OPENB = os.path.join(ROOT, "data", "openb")


def test_shipped_openb_trace():
    """data/openb (the default openb lists, shipped so a clone is complete)
    loads as the full cluster, and the replay's figure matches the one the
    README and docs/placement.md quote for it (about 96% with gpupool, above
    binpack's)."""
    nodes = os.path.join(OPENB, "openb_node_list_gpu_node.csv")
    pods = os.path.join(OPENB, "openb_pod_list_default.csv")
    with open(nodes) as f:
        rows = f.read().splitlines()[1:]
    assert len(rows) == 1213
    assert sum(int(r.split(",")[3]) for r in rows) == 6212
    with open(pods) as f:
        assert len(f.read().splitlines()) == 1 + 8152
    pct = {}
    for policy in ("binpack", "gpupool"):
        r = run_sim("--nodes", nodes, "--pods", pods, "--policy", policy, "--seed", "42", "-o", "json")
        assert r.returncode == 0, r.stderr
        per_seed, _ = json_lines(r.stdout)
        assert per_seed[0]["capacity_milli"] == 6212 * 1000
        assert per_seed[0]["pods"] > 8152   # demand is 130% of capacity: the list is replayed past its end
        pct[policy] = per_seed[0]["alloc_pct"]
    assert 94.0 < pct["gpupool"] < 100.0, pct
    assert pct["gpupool"] > pct["binpack"], pct
