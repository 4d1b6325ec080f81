"""docs/metrics.md is the reference of every metric name (issue 26 item 1): what the running
daemons serve must be exactly what its two tables list, no more, no less.

The node agent runs in gpu-mem mode with a metrics address (every family it can serve has its
HELP/TYPE header there); the extender runs against the fake API server. Both are scraped over
HTTP; names are the families' TYPE lines, so a family that has no sample in this scrape counts
too."""

import os
import re
import urllib.request

from conftest import ROOT, scaled
from test_extender import Extender, free_port
from test_extender_ui import FakeApiServer
from test_gpumem import api, gpumem  # noqa: F401
from test_plugin_metrics import ADDR_RE

DOC = os.path.join(ROOT, "docs", "metrics.md")


def documented(section):
    """The first-column names of the tables of the '## <section>...' part of the doc."""
    names, inside, header = set(), False, None
    for line in open(DOC, encoding="utf-8"):
        if line.startswith("## "):
            inside = line[3:].startswith(section)
            continue
        if not inside or not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        m = re.fullmatch(r"`([a-z_]+)`", cells[0])
        if header[0] == "name" and m:
            names.add(m.group(1))
    return names


def served(url):
    with urllib.request.urlopen(url, timeout=scaled(10)) as r:
        text = r.read().decode()
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def test_device_plugin_serves_exactly_the_documented_names(gpumem):
    p, _ = gpumem(args=["--metrics-addr", "127.0.0.1:0"])
    url = "http://%s/metrics" % p.wait_log(ADDR_RE).group(1)
    doc = documented("Device plugin: `--metrics-addr`")
    assert len(doc) > 20
    got = served(url)
    assert got - doc == set(), "served but not in docs/metrics.md"
    assert doc - got == set(), "in docs/metrics.md but not served"


def test_extender_serves_exactly_the_documented_names(tmp_path):
    srv = FakeApiServer(fixture={"nodes": [], "pods": []}).start()
    port = free_port()
    e = Extender(srv, tmp_path, ["--metrics-port", str(port)])
    try:
        doc = documented("Scheduler extender")
        assert len(doc) > 10
        got = served("http://127.0.0.1:%d/metrics" % port)
        assert got - doc == set(), "served but not in docs/metrics.md"
        assert doc - got == set(), "in docs/metrics.md but not served"
    finally:
        assert e.stop() == 0, e.log()
        srv.stop()
