#!/usr/bin/python3
"""kubectl gpupool top at 1,000 / 5,000 nodes through a real kube-apiserver's node proxy.

Populates the cluster with bench/extender_bench.py's Cluster (8 x 32 GiB GPU
nodes, ~0.6 bound gpushare pods per node), every node's InternalIP set to
AGENT_IP, where one static HTTP server (busybox httpd, started by
bench/top_bench.sh) serves a node agent's /metrics: the plugin's per-GPU
series for 8 GPUs, two containers' and processes' series and the plugin's
own counters and histogram, ~AGENT_KB. Then runs `top gpus` (every node's
agent) and `top pods -A` with several --workers and reports the wall time,
the agents' requests, bytes and failures (the CLI's -v 1 line).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extender_bench  # noqa: E402
from extender_bench import Api, BenchError, Cluster, log  # noqa: E402


def agent_text():
    """What a node agent with 8 GPUs and two pods serves (names of docs/metrics.md)."""
    out = []
    per_gpu = ["gpupool_gpu_healthy", "gpupool_gpu_memory_total_bytes", "gpupool_gpu_memory_used_bytes",
               "gpupool_gpu_utilization_ratio", "gpupool_gpu_sm_utilization_ratio",
               "gpupool_gpu_temperature_celsius", "gpupool_gpu_power_watts"]
    for name in per_gpu:
        out.append("# HELP %s GPU figure (NVML)." % name)
        out.append("# TYPE %s gauge" % name)
        for g in range(8):
            out.append('%s{gpu="%d",gpu_uuid="GPU-%08x-1111-2222-3333-444455556666",'
                       'model="NVIDIA A10"} %d' % (name, g, g, 12345678 * (g + 1)))
    for c in range(2):
        labels = 'namespace="team-a",pod="trainer-%d",container="main",' \
                 'gpu_uuid="GPU-%08x-1111-2222-3333-444455556666"' % (c, c)
        out.append('gpupool_container_gpu_memory_used_bytes{%s} %d' % (labels, 3 << 30))
        out.append('gpupool_container_gpu_memory_limit_bytes{%s} %d' % (labels, 8 << 30))
        for m in ("memory_used_bytes", "sm_utilization_ratio", "memory_utilization_ratio"):
            out.append('gpupool_process_gpu_%s{%s,pid="%d"} 0.5' % (m, labels, 4000 + c))
    out.append("# TYPE gpupool_deviceplugin_allocate_duration_seconds histogram")
    for le in ("0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
               "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"):
        out.append('gpupool_deviceplugin_allocate_duration_seconds_bucket{resource="aliyun.com/gpu-mem",'
                   'le="%s"} 3' % le)
    out.append('gpupool_build_info{program="gpupool-device-plugin",version="0.1.0",revision="abc"} 1')
    return "\n".join(out) + "\n"


def cpu_s(pid):
    """utime + stime of a process, in seconds (0 when it cannot be read)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return 0.0


def run_top(binary, kubeconfig, args, apiserver_pid):
    """One run: wall s, the CLI's CPU s (/usr/bin/time), the apiserver's CPU s
    meanwhile, the CLI's -v 1 line about the agents."""
    env = dict(os.environ, KUBECONFIG=kubeconfig)
    api_before = cpu_s(apiserver_pid)
    t = time.monotonic()
    proc = subprocess.run(["/usr/bin/time", "-f", "GPBENCH %U %S", binary, "top"] + args +
                          ["-v", "1"], env=env, capture_output=True, text=True)
    wall = time.monotonic() - t
    api_cpu = cpu_s(apiserver_pid) - api_before
    lines = proc.stderr.rstrip("\n").split("\n")
    if proc.returncode != 0 or not lines[-1].startswith("GPBENCH "):
        raise BenchError("top %s: exit %d: %s" % (args, proc.returncode, proc.stderr[-400:]))
    user, system = lines[-1].split()[1:]
    line = next((l.split("] ", 1)[-1] for l in lines
                 if "node agents'" in l or "extender's sweep" in l), "")
    warnings = [l for l in lines if l.startswith("warning:")]
    if warnings:
        line += " " + " / ".join(warnings[:2])
    return wall, float(user) + float(system), api_cpu, line


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--agent-ip", required=True)
    ap.add_argument("--agent-port", type=int, required=True)
    ap.add_argument("--agent-dir", required=True)
    ap.add_argument("--sizes", default="1000,5000")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", default="16,64,256")
    ap.add_argument("--apiserver-pid", type=int, default=0)
    ap.add_argument("--extender-bin", default="",
                    help="also run the default top (--from auto) against this extender, started "
                         "here, sweeping the agents in the background")
    ap.add_argument("--extender-port", type=int, default=19410)
    ap.add_argument("--extender-from", default="direct", choices=("direct", "proxy"),
                    help="the extender's --ui-node-metrics-from")
    args = ap.parse_args()
    with open(os.path.join(args.agent_dir, "metrics"), "w") as f:
        f.write(agent_text())
    size = os.path.getsize(os.path.join(args.agent_dir, "metrics"))
    # Every node at the agent's address (kube-apiserver refuses to proxy to
    # loopback addresses, so it is a host address).
    make = extender_bench.node_object

    def node_at_agent(name, shape="lean"):
        n = make(name, shape)
        # No Hostname address: kube-apiserver's default
        # --kubelet-preferred-address-types tries Hostname first, and the
        # bench's names do not resolve.
        n["status"]["addresses"] = [{"type": "InternalIP", "address": args.agent_ip}]
        return n
    extender_bench.node_object = node_at_agent
    api = Api(args.server, args.token)
    cluster = Cluster(42)
    binary = os.path.join(args.bin_dir, "kubectl-gpupool")
    print("Agent answer: %d bytes (8 GPUs, 2 containers); one busybox httpd serves every node." % size)
    print()
    print("| nodes | command | wall median (min-max) | CLI CPU | apiserver CPU | agents read (CLI's -v 1, last run) |")
    print("|---|---|---|---|---|---|")
    for n in sorted(int(s) for s in args.sizes.split(",")):
        log("=== %d nodes ===" % n)
        cluster.populate(api, n)
        for w in args.workers.split(","):
            for view in (["gpus"], ["pods", "-A"]):
                cargs = view + ["--from", "agents", "--workers", w, "--metrics-port",
                                str(args.agent_port), "--metrics-timeout", "30s"]
                runs = [run_top(binary, args.kubeconfig, cargs, args.apiserver_pid)
                        for _ in range(args.runs)]
                walls = [r[0] for r in runs]
                print("| %d | `top %s --workers %s` | %.0f ms (%.0f-%.0f) | %.2f s | %.2f s | %s |" % (
                    n, " ".join(view), w, statistics.median(walls) * 1000, min(walls) * 1000,
                    max(walls) * 1000, statistics.median(r[1] for r in runs),
                    statistics.median(r[2] for r in runs), runs[-1][3]), flush=True)
        if args.extender_bin:
            bench_extender(args, api, binary, n)
    return 0


def bench_extender(args, api, binary, n):
    """The default top (--from auto): the extender, sweeping every agent in
    the background (directly at the node's InternalIP, or through the node
    proxy with EXTENDER_FROM=proxy), on AGENT_IP behind a Service. kube-apiserver's service proxy goes only to an endpoint whose
    targetRef is a Pod with that IP, so a Pod object stands for it."""
    ns = "/api/v1/namespaces/kube-system/"
    name = "gpupool-scheduler-extender"
    pod = {"metadata": {"name": name + "-0", "labels": {"app": name}},
           "spec": {"nodeName": "bench-gpu-00000",
                    "containers": [{"name": "extender", "image": "gpupool-scheduler-extender"}]}}
    created = api.must("POST", ns + "pods", pod)
    created = created if isinstance(created, dict) else {}
    status = dict(pod, status={"phase": "Running", "podIP": args.agent_ip,
                               "podIPs": [{"ip": args.agent_ip}]})
    status["metadata"] = dict(pod["metadata"],
                              resourceVersion=created.get("metadata", {}).get("resourceVersion", ""))
    api.must("PUT", ns + "pods/" + name + "-0/status", status)
    api.must("POST", ns + "services",
             {"metadata": {"name": name},
              "spec": {"ports": [{"name": "http", "port": 39999, "targetPort": args.extender_port}]}})
    api.must("POST", ns + "endpoints",
             {"metadata": {"name": name},
              "subsets": [{"addresses": [{"ip": args.agent_ip, "targetRef": {
                  "kind": "Pod", "namespace": "kube-system", "name": name + "-0"}}],
                           "ports": [{"name": "http", "port": args.extender_port}]}]})
    env = dict(os.environ, KUBECONFIG=args.kubeconfig)
    logpath = os.path.join(args.agent_dir, "extender.log")
    logf = open(logpath, "w")
    interval = 15
    ext = subprocess.Popen([args.extender_bin, "--address", args.agent_ip, "--port",
                            str(args.extender_port), "--metrics-port", "0",
                            "--ui-node-metrics-port", str(args.agent_port),
                            "--ui-node-metrics-from", args.extender_from,
                            "--ui-node-metrics-interval", "%ds" % interval, "-v", "1"],
                           env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=logf)

    def sweeps():
        with open(logpath) as f:
            return [l.strip().split("] ", 1)[-1] for l in f if "node agents read" in l]
    try:
        # Its first LISTs, then its first sweep, which starts by itself.
        deadline = time.monotonic() + 120
        while not sweeps() and time.monotonic() < deadline and ext.poll() is None:
            time.sleep(0.2)
        if not sweeps():
            raise BenchError("the extender swept nothing in 120 s: see %s" % logpath)
        # Its CPU over two intervals: two sweeps and the idle time between.
        cpu0 = cpu_s(ext.pid)
        time.sleep(2 * interval)
        per_sweep = (cpu_s(ext.pid) - cpu0) / 2
        print("| %d | extender sweep, `--ui-node-metrics-from %s` (background, every %d s) | %s | "
              "%.2f s per sweep | | |" % (n, args.extender_from, interval,
                                          "; ".join(sweeps()[-2:]), per_sweep), flush=True)
        for view in (["gpus"], ["pods", "-A"]):
            cargs = view + ["--metrics-timeout", "60s", "--metrics-port", str(args.agent_port)]
            warm = [run_top(binary, args.kubeconfig, cargs, args.apiserver_pid)
                    for _ in range(args.runs)]
            walls = [r[0] for r in warm]
            print("| %d | `top %s` (default --from auto, warm extender) | %.0f ms (%.0f-%.0f) | "
                  "%.2f s | %.2f s | %s |" % (
                      n, " ".join(view), statistics.median(walls) * 1000, min(walls) * 1000,
                      max(walls) * 1000, statistics.median(r[1] for r in warm),
                      statistics.median(r[2] for r in warm), warm[-1][3]), flush=True)
    finally:
        ext.terminate()
        ext.wait(timeout=30)
        logf.close()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        log("FAILED: %s" % e)
        sys.exit(1)
