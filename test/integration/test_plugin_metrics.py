"""The device plugin's Prometheus endpoint, --metrics-addr (issue 10 item 3, plugin half).

The text is parsed with prometheus_client's own parser (Debian python3-prometheus-client), so a
malformed exposition fails here as it would fail a real Prometheus."""

import re
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from conftest import RESOURCE, scaled

ADDR_RE = r"Serving Prometheus metrics on http://(\S+)/metrics"


def start(plugin, inventory="4gpu.json", args=(), **kw):
    p = plugin(inventory, args=["--metrics-addr", "127.0.0.1:0"] + list(args), **kw)
    p.metrics_url = "http://%s/metrics" % p.wait_log(ADDR_RE).group(1)
    return p


def scrape(p):
    with urllib.request.urlopen(p.metrics_url, timeout=scaled(10)) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    samples = {}
    families = {}
    for fam in text_string_to_metric_families(text):
        families[fam.name] = fam
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return families, samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))))


def gpu_labels(g):
    return {"gpu": g.index, "uuid": g.uuid, "model": g.raw.get("name", "NVIDIA A100-SXM4-40GB")}


def test_gpu_gauges_from_nvml(plugin):
    p = start(plugin)
    g = p.inventory.gpus[2]
    p.control("set %d memory_used_mib 1536" % g.index, "set %d utilization_gpu 42" % g.index,
              "set %d temperature_c 71" % g.index, "set %d power_mw 123456" % g.index)
    _, s = scrape(p)
    lab = gpu_labels(g)
    assert value(s, "gpupool_gpu_healthy", **lab) == 1
    assert value(s, "gpupool_gpu_memory_used_bytes", **lab) == 1536 * 2**20
    assert value(s, "gpupool_gpu_memory_total_bytes", **lab) == g.memory_mib * 2**20
    assert value(s, "gpupool_gpu_utilization_ratio", **lab) == 0.42
    assert value(s, "gpupool_gpu_temperature_celsius", **lab) == 71
    assert value(s, "gpupool_gpu_power_watts", **lab) == 123.456
    # Another GPU keeps the inventory's defaults.
    assert value(s, "gpupool_gpu_memory_used_bytes", **gpu_labels(p.inventory.gpus[0])) == 0
    assert value(s, "gpupool_deviceplugin_devices_advertised", resource=RESOURCE) == 4
    assert value(s, "gpupool_deviceplugin_devices_healthy", resource=RESOURCE) == 4
    assert value(s, "gpupool_deviceplugin_registrations_total", resource=RESOURCE,
                 result="success") == 1


def test_xid_counts_and_health(plugin, kubelet):
    p = start(plugin).health_ready()
    g = p.inventory.gpus[1]
    lab = gpu_labels(g)
    _, before = scrape(p)
    assert value(before, "gpupool_gpu_xid_errors_total", xid=48, **lab) is None
    n = len(kubelet.endpoint().snapshots)
    p.control("xid %d 48" % g.index)
    kubelet.wait_for(lambda: len(kubelet.endpoint().snapshots) > n, 5, "the Unhealthy snapshot")
    _, after = scrape(p)
    assert value(after, "gpupool_gpu_xid_errors_total", xid=48, **lab) == 1
    assert value(after, "gpupool_gpu_healthy", **lab) == 0
    assert value(after, "gpupool_gpu_healthy", **gpu_labels(p.inventory.gpus[0])) == 1
    assert value(after, "gpupool_deviceplugin_devices_healthy", resource=RESOURCE) == 3


def test_allocate_histogram(plugin, kubelet):
    p = start(plugin)
    fams, before = scrape(p)
    assert fams["gpupool_deviceplugin_allocate_duration_seconds"].type == "histogram"
    count0 = value(before, "gpupool_deviceplugin_allocate_duration_seconds_count",
                   resource=RESOURCE) or 0
    kubelet.allocate(RESOURCE, [p.inventory.gpus[0].uuid])
    _, after = scrape(p)
    assert value(after, "gpupool_deviceplugin_allocate_duration_seconds_count",
                 resource=RESOURCE) == count0 + 1
    assert value(after, "gpupool_deviceplugin_allocate_duration_seconds_bucket",
                 resource=RESOURCE, le="+Inf") == count0 + 1
    assert value(after, "gpupool_deviceplugin_allocate_errors_total", resource=RESOURCE) == 0


def test_other_paths_404(plugin):
    p = start(plugin)
    url = p.metrics_url.replace("/metrics", "/other")
    try:
        urllib.request.urlopen(url, timeout=scaled(10))
        raise AssertionError("expected 404")
    except urllib.error.HTTPError as e:
        assert e.code == 404
    scrape(p)  # still serving


def test_off_by_default_loads_no_http_library(plugin):
    p = plugin("4gpu.json")
    maps = open("/proc/%d/maps" % p.pid).read()
    assert "libmicrohttpd" not in maps
    assert not re.search(ADDR_RE, p.log())


def test_bad_address_is_a_clear_error(plugin):
    p = plugin("4gpu.json", args=["--metrics-addr", "127.0.0.1:99999"], wait=None)
    assert p.wait_exit() != 0
    assert "--metrics-addr" in p.log() and "port must be 0-65535" in p.log()


def test_address_in_use_is_a_clear_error(plugin):
    first = start(plugin)
    addr = first.metrics_url.split("/")[2]
    p = plugin("4gpu.json", args=["--metrics-addr", addr], wait=None)
    assert p.wait_exit() != 0
    assert "cannot listen on metrics address %s" % addr in p.log()
