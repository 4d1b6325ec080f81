"""The kit around the programs, checked without a cluster: the monitoring kit
(deploy/monitoring: Prometheus rules, their promtool unit tests, the Grafana
dashboard), the krew manifest (deploy/krew) with scripts/krew-archive.sh, and the
images' provenance labels (scripts/oci-labels.sh).

Metric names: the kit may name only what the daemons serve. The reference is the
docs (docs/metrics.md, docs/extender.md: every backquoted gpupool_* name, less the
old column of a "Renamed" table) and issue 26's metrics contract below.

    GP_BUILD_DIR   build tree with bin/kubectl-gpupool (krew archive test)
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD = os.path.abspath(os.environ.get("GP_BUILD_DIR", os.path.join(ROOT, "build")))
MONITORING = os.path.join(ROOT, "deploy", "monitoring")
RULES = os.path.join(MONITORING, "gpupool-alerts.yaml")
RULE_TESTS = os.path.join(MONITORING, "gpupool-alerts.test.yaml")
DASHBOARD = os.path.join(MONITORING, "gpupool-dashboard.json")
KREW = os.path.join(ROOT, "deploy", "krew", "gpupool.yaml")

# Issue 26's metrics contract (docs/metrics.md holds it once the node agent serves it).
CONTRACT = {
    "gpupool_container_gpu_memory_used_bytes", "gpupool_container_gpu_memory_limit_bytes",
    "gpupool_process_gpu_memory_used_bytes", "gpupool_process_gpu_sm_utilization_ratio",
    "gpupool_process_gpu_memory_utilization_ratio", "gpupool_gpu_memory_used_bytes",
    "gpupool_gpu_memory_total_bytes", "gpupool_gpu_sm_utilization_ratio", "gpupool_build_info",
}
ALERTS = {"GpupoolGPUOverbooked", "GpupoolContainerNearGPUMemoryLimit", "GpupoolGPUUnhealthy",
          "GpupoolExtenderNoLeader"}
NAME = re.compile(r"\bgpupool_[a-z0-9_]+")


def documented_metrics():
    names, renamed = set(), set()
    for path in (os.path.join(ROOT, "docs", "metrics.md"), os.path.join(ROOT, "docs", "extender.md")):
        section = ""
        for line in open(path, encoding="utf-8"):
            if line.startswith("#"):
                section = line
                continue
            if not line.startswith("| `gpupool_"):
                continue
            cells = line.split("|")
            if "Renamed" in section:
                renamed.update(NAME.findall(cells[1]))
                names.update(NAME.findall(cells[2]))
                continue
            first = NAME.findall(cells[1])
            names.update(first)
            # "`gpupool_extender_cache_nodes`, `_cache_gpu_nodes`": a short form takes the
            # program's prefix
            prefix = "_".join(first[0].split("_")[:2])
            names.update(prefix + short for short in re.findall(r"`(_[a-z0-9_]+)`", cells[1]))
    return (names - renamed) | CONTRACT


def promtool():
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed (Debian: prometheus; scripts/install-deps.sh)")
    return path


def balanced(expr):
    """PromQL-shaped: brackets nest and close, quotes close, no empty selector."""
    stack, quote = [], None
    pairs = {")": "(", "]": "[", "}": "{"}
    for i, c in enumerate(expr):
        if quote:
            if c == quote and expr[i - 1] != "\\":
                quote = None
            continue
        if c in "\"'`":
            quote = c
        elif c in "([{":
            stack.append(c)
        elif c in ")]}":
            if not stack or stack.pop() != pairs[c]:
                return False
    return not stack and quote is None and "{}" not in expr


def dashboard_exprs(dash):
    for p in dash["panels"]:
        for t in p.get("targets", []):
            yield p["title"], t["expr"]
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            yield "variable " + v["name"], v["definition"]


def as_prometheus(expr):
    """A dashboard query with Grafana's variables replaced, as Prometheus would get it."""
    return expr.replace("$__rate_interval", "5m").replace("$namespace", ".*")


# ------------------------------------------------------------------ alert rules

def load_rules():
    with open(RULES) as f:
        return yaml.safe_load(f)


def test_rules_schema_and_the_four_alerts():
    doc = load_rules()
    assert list(doc) == ["groups"]
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} == ALERTS
    for r in rules:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r
        assert r["labels"]["severity"] in ("info", "warning", "critical")
        assert {"summary", "description"} <= set(r["annotations"])
        assert re.fullmatch(r"\d+[smh]", r["for"])
        assert balanced(r["expr"]), r["expr"]


def test_kit_names_only_documented_metrics():
    known = documented_metrics()
    used = {}
    for r in (r for g in load_rules()["groups"] for r in g["rules"]):
        for n in NAME.findall(r["expr"]):
            used.setdefault(n, []).append(r["alert"])
    with open(DASHBOARD) as f:
        for where, expr in dashboard_exprs(json.load(f)):
            for n in NAME.findall(expr):
                used.setdefault(n, []).append(where)
    unknown = {n: w for n, w in used.items() if n not in known}
    assert not unknown, "names no daemon documents: %s" % unknown
    # what the kit is about is there at all
    assert {"gpupool_container_gpu_memory_used_bytes", "gpupool_gpu_healthy",
            "gpupool_extender_leader_state"} <= set(used)


def test_promtool_checks_the_rules():
    r = subprocess.run([promtool(), "check", "rules", RULES], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 4 rules found" in r.stdout


def test_promtool_unit_tests_fire_each_alert():
    r = subprocess.run([promtool(), "test", "rules", os.path.basename(RULE_TESTS)],
                       capture_output=True, text=True, timeout=60, cwd=MONITORING)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(RULE_TESTS) as f:
        tests = yaml.safe_load(f)["tests"]
    fired = {t["alertname"] for case in tests for t in case["alert_rule_test"] if t["exp_alerts"]}
    quiet = {t["alertname"] for case in tests for t in case["alert_rule_test"] if not t["exp_alerts"]}
    assert fired == ALERTS and quiet == ALERTS


# ------------------------------------------------------------------ dashboard

def test_dashboard_panels_have_targets():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    assert dash["title"] and re.fullmatch(r"[a-z0-9-]{1,40}", dash["uid"])
    assert isinstance(dash["schemaVersion"], int)
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    graphs = [p for p in dash["panels"] if p["type"] != "row"]
    assert len(graphs) >= 8
    for p in graphs:
        assert p["title"] and p["datasource"]["uid"] == "${datasource}", p["title"]
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert balanced(t["expr"]), (p["title"], t["expr"])
            for var in re.findall(r"\$(\w+)", t["expr"]):
                assert var in variables or var == "__rate_interval", (p["title"], var)
    # the used-vs-booked view per GPU is there
    exprs = " ".join(t["expr"] for p in graphs for t in p["targets"])
    for n in ("gpupool_gpu_memory_used_bytes", "gpupool_container_gpu_memory_limit_bytes",
              "gpupool_gpu_memory_total_bytes", "gpupool_process_gpu_sm_utilization_ratio"):
        assert n in exprs, n


def test_promtool_parses_every_dashboard_query(tmp_path):
    """Each query as Prometheus gets it (variables replaced) must parse: promtool checks
    them as recording rules."""
    tool = promtool()
    with open(DASHBOARD) as f:
        exprs = [as_prometheus(e) for _, e in dashboard_exprs(json.load(f)) if not e.startswith("label_values(")]
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": "dashboard:query_%d" % i, "expr": e} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    r = subprocess.run([tool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


# ------------------------------------------------------------------ krew

def cmake_version():
    m = re.search(r"project\(gpupool VERSION (\d+\.\d+\.\d+)", open(os.path.join(ROOT, "CMakeLists.txt")).read())
    return "v" + m.group(1)


PLACEHOLDER_SHA = "0" * 64


def test_krew_manifest_schema():
    with open(KREW) as f:
        m = yaml.safe_load(f)
    assert m["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert m["kind"] == "Plugin"
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]*", m["metadata"]["name"]) and m["metadata"]["name"] == "gpupool"
    spec = m["spec"]
    assert set(spec) <= {"version", "homepage", "shortDescription", "description", "caveats", "platforms"}
    assert spec["version"] == cmake_version()  # krew: semver with a v; the project's own
    assert spec["homepage"].startswith("https://")
    assert 0 < len(spec["shortDescription"]) <= 60 and spec["description"].strip()
    arches = set()
    for p in spec["platforms"]:
        labels = p["selector"]["matchLabels"]
        assert labels["os"] == "linux" and labels["arch"] in ("amd64", "arm64")
        arches.add(labels["arch"])
        name = "kubectl-gpupool-%s-linux-%s.tar.gz" % (spec["version"], labels["arch"])
        assert p["uri"].startswith("https://") and p["uri"].endswith("/" + name)
        # a placeholder (documented in deploy/krew/README.md) or a real digest
        assert re.fullmatch(r"[0-9a-f]{64}", p["sha256"])
        froms = [f["from"] for f in p["files"]]
        assert p["bin"] in froms and "LICENSE" in froms
        assert all(f["to"] == "." for f in p["files"])
    assert arches == {"amd64", "arm64"}
    readme = open(os.path.join(ROOT, "deploy", "krew", "README.md")).read()
    assert "64 zeros" in readme and "RELEASE-HOST" in readme


def test_krew_archive_fills_the_manifest(tmp_path):
    binary = os.path.join(BUILD, "bin", "kubectl-gpupool")
    if not os.path.exists(binary):
        pytest.fail("kubectl-gpupool not built in %s" % BUILD)
    env = dict(os.environ, SOURCE_DATE_EPOCH="1700000000")
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "krew-archive.sh"), BUILD,
                        "https://example.org/rel"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    archive, manifest = r.stdout.split()
    with open(archive, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    with open(manifest) as f:
        m = yaml.safe_load(f)
    arch = os.path.basename(archive).rsplit("-", 1)[1].split(".")[0]
    mine = [p for p in m["spec"]["platforms"] if p["selector"]["matchLabels"]["arch"] == arch]
    others = [p for p in m["spec"]["platforms"] if p not in mine]
    assert mine[0]["sha256"] == digest
    assert mine[0]["uri"] == "https://example.org/rel/" + os.path.basename(archive)
    assert all(p["sha256"] == PLACEHOLDER_SHA for p in others)
    with tarfile.open(archive) as t:
        members = {i.name: i for i in t.getmembers()}
    assert set(members) == {f["from"] for f in mine[0]["files"]}
    assert members[mine[0]["bin"]].mode & 0o111 and members["kubectl-gpupool"].uid == 0
    assert members["kubectl-gpupool"].mtime == 1700000000
    # deterministic: the same inputs, the same digest
    r2 = subprocess.run(["bash", os.path.join(ROOT, "scripts", "krew-archive.sh"), BUILD,
                         "https://example.org/rel"], capture_output=True, text=True, timeout=120, env=env)
    assert r2.returncode == 0, r2.stderr
    with open(archive, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == digest


# ------------------------------------------------------------------ image labels

def oci_labels(build, env=None):
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "oci-labels.sh"), str(build), "1.2.3"],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, **(env or {})))
    assert r.returncode == 0, r.stderr
    return dict(line.split("=", 1) for line in r.stdout.splitlines()), r.stderr


def test_image_provenance_labels(tmp_path):
    fake = tmp_path / "build"
    (fake / "src" / "base").mkdir(parents=True)
    (fake / "src" / "base" / "build_info.c").write_text(
        '#include "build_info.h"\n\nconst char gp_build_revision[] = "unknown";\n')
    labels, _ = oci_labels(fake, {"GP_IMAGE_SOURCE": "https://example.org/gpupool"})
    assert labels == {"org.opencontainers.image.source": "https://example.org/gpupool",
                      "org.opencontainers.image.revision": "unknown",
                      "org.opencontainers.image.version": "1.2.3",
                      "org.opencontainers.image.licenses": "Apache-2.0"}
    assert "Apache License" in open(os.path.join(ROOT, "LICENSE")).read(1000)
    # the commit the build was configured at, in full when git knows it
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        short = head.stdout.strip()[:12]
        (fake / "src" / "base" / "build_info.c").write_text(
            'const char gp_build_revision[] = "%s";\n' % short)
        labels, _ = oci_labels(fake, {"GP_IMAGE_SOURCE": "https://example.org/gpupool"})
        assert labels["org.opencontainers.image.revision"] == head.stdout.strip()


def test_image_labels_in_image_sh():
    """image.sh puts every provenance label in the config and the manifest."""
    text = open(os.path.join(ROOT, "scripts", "image.sh")).read()
    assert "scripts/oci-labels.sh" in text
    assert re.search(r'cfg\+=\(--config\.label "\$kv" --manifest\.annotation "\$kv"\)', text)
