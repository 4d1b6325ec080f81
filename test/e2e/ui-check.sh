#!/usr/bin/env bash
# The extender's /ui and /metrics on the real cluster (issue 10 items 2, 3):
# headless Chromium loads /ui, the rendered DOM must show every GPU node,
# GPU and pod that the extender's /inspect reports; a screenshot is saved;
# /metrics must parse with prometheus_client's parser.
#   test/e2e/ui-check.sh EXT_URL METRICS_URL ARTIFACT_DIR
# Skips (exit 0, says so) when chromium is not installed.
set -euo pipefail
ext=$1 metrics=$2 art=$3
mkdir -p "$art"
chrome=$(command -v chromium || true)
if [[ -z $chrome ]]; then
  echo "    ui-check: chromium not installed (scripts/install-deps.sh --e2e): /ui check SKIPPED"
else
  profile=$(mktemp -d)
  trap 'rm -rf "$profile"' EXIT
  flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking
         --disable-component-update --disable-sync --disable-dev-shm-usage --hide-scrollbars
         --user-data-dir="$profile" --virtual-time-budget=8000)
  "$chrome" "${flags[@]}" --dump-dom "$ext/ui" > "$art/extender-ui.html" 2>/dev/null
  "$chrome" "${flags[@]}" --window-size=1280,720 --screenshot="$art/extender-ui.png" "$ext/ui" >/dev/null 2>&1
  curl -fsS "$ext/inspect" | /usr/bin/python3 -c '
import html.parser, json, sys
want = json.load(sys.stdin)["nodes"]
class R(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(); self.nodes, self.gpus, self.pods, self.node = set(), set(), set(), None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-node" in a: self.node = a["data-node"]; self.nodes.add(self.node)
        if "data-gpu" in a: self.gpus.add((self.node, int(a["data-gpu"]), int(a["data-used"])))
        if "data-pod" in a: self.pods.add((self.node, a["data-pod"]))
r = R(); r.feed(open(sys.argv[1]).read())
missing = []
for n in want:
    if n["name"] not in r.nodes: missing.append("node " + n["name"])
    for d in n["devs"]:
        if (n["name"], d["id"], d["usedGPU"]) not in r.gpus: missing.append("gpu %s/%d" % (n["name"], d["id"]))
        for p in d["pods"]:
            if (n["name"], p["namespace"] + "/" + p["name"]) not in r.pods: missing.append("pod " + p["name"])
if missing: sys.exit("ui-check: /ui lacks " + ", ".join(missing))
print("    ui-check: /ui shows %d nodes, %d GPUs, %d pod shares" % (len(r.nodes), len(r.gpus), len(r.pods)))
' "$art/extender-ui.html"
  echo "    ui-check: screenshot $art/extender-ui.png"
fi
curl -fsS "$metrics/metrics" | /usr/bin/python3 -c '
import sys
from prometheus_client.parser import text_string_to_metric_families
names = {f.name for f in text_string_to_metric_families(sys.stdin.read())}
need = {"gpupool_extender_request_duration_seconds", "gpupool_extender_binds", "gpupool_extender_gpu_memory_allocated_bytes",
        "gpupool_extender_fragmentation_ratio", "gpupool_extender_cache_pods"}
if need - names: sys.exit("ui-check: /metrics lacks %s" % sorted(need - names))
print("    ui-check: /metrics parses: %d families" % len(names))
'
