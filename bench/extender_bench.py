#!/usr/bin/python3
"""extender_bench -- gpupool-scheduler-extender against a real kube-apiserver.

    bench/extender_bench.py --server URL --token TOKEN --kubeconfig FILE \
        --extender BIN [--sizes 1000,5000] [--port 39998] [--prefix /gpupool-scheduler] \
        [--duration 10] [--binds 300] [--log-dir DIR] [--client wrk|python]

Run by bench/extender_bench.sh, which starts etcd and kube-apiserver first.
For each cluster size N (ascending; the cluster only grows):

  1. populate: POST fake GPU nodes up to N (8 GPUs x 32 GiB each, capacity
     and allocatable `aliyun.com/gpu-mem: 256`, `aliyun.com/gpu-count: 8`,
     Ready, no taints; Nodes take their status on create) and ~0.6 pods per
     node, bound (`spec.nodeName`) and carrying the gpushare annotations
     (ALIYUN_COM_GPU_MEM_IDX/POD/DEV/ASSIGNED/ASSUME_TIME), so the extender
     rebuilds usage from them. Parallel POSTs, one persistent HTTPS
     connection per worker thread.
  2. start the extender, time exec -> /healthz 200 (its LIST+WATCH sync),
     read VmRSS ("after sync").
  3. filter, then prioritize: ExtenderArgs with `NodeNames` = every node
     (nodeCacheCapable), over persistent connections (wrk + Lua, or this
     script's own keep-alive client), for --duration seconds each, 1
     connection (latency) and then 4 connections (throughput). CPU per
     request = (utime+stime of the extender, /proc/PID/stat) / requests.
  4. bind: --binds pending pods through POST <prefix>/bind on 4 keep-alive
     connections, each to a node that has room (one pod per node, round
     robin, as concurrent binds of kube-scheduler spread); binds/s = pods / (time from
     the first request to the last answer; the extender answers after the API
     acknowledged the Binding, and a LIST then checks every pod is bound and
     annotated).
  5. the API server's own ceiling for that: the extender's one write (POST
     the Binding carrying the annotations) per pod, made by this script on
     the same 4 connections, right before and right after step 4 (the mean
     is the ceiling); then the two-call design's GET + PATCH + Binding, for
     comparison.
  6. VmRSS and VmHWM "after load" (1.5 s after the last request: what
     stays resident); stop the extender (SIGTERM). VmRSS is
     also read between steps 3 and 4 (after the filter/prioritize series).

Prints Markdown on stdout, progress on stderr. Exit status 1 when a step
fails (an extender answer with an Error, a non-200 status, a pod not bound).
"""

import argparse
import http.client
import json
import os
import queue
import random
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse

GPUS_PER_NODE = 8
GIB_PER_GPU = 32
PODS_PER_NODE = 0.6
POD_SIZES_GIB = (2, 4, 4, 8, 8, 16)        # sizes of the pre-bound pods
FILTER_POD_GIB = 8                          # the pod being scheduled
NAMESPACE = "default"
NODE_FMT = "bench-gpu-{:05d}"
CLK_TCK = os.sysconf("SC_CLK_TCK")
HERE = os.path.dirname(os.path.abspath(__file__))


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


# --- kube-apiserver client: one keep-alive HTTPS connection per thread -----------

class Api:
    def __init__(self, server, token):
        url = urllib.parse.urlsplit(server)
        self.host, self.port = url.hostname, url.port or 443
        self.headers = {"Authorization": "Bearer " + token, "Accept": "application/json"}
        # The bench cluster's serving certificate is self-signed.
        self.ctx = ssl._create_unverified_context()
        self.local = threading.local()

    def _conn(self):
        c = getattr(self.local, "conn", None)
        if c is None:
            c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=60)
            self.local.conn = c
        return c

    def request(self, method, path, body=None, ctype="application/json"):
        data = json.dumps(body).encode() if body is not None else None
        headers = dict(self.headers)
        if data is not None:
            headers["Content-Type"] = ctype
        for attempt in (1, 2):
            c = self._conn()
            try:
                c.request(method, path, body=data, headers=headers)
                r = c.getresponse()
                payload = r.read()
                return r.status, payload
            except (http.client.HTTPException, OSError):
                c.close()
                self.local.conn = None
                if attempt == 2:
                    raise

    def must(self, method, path, body=None, ok=(200, 201)):
        status, payload = self.request(method, path, body)
        if status not in ok:
            raise BenchError(f"{method} {path}: HTTP {status}: {payload[:300]!r}")
        return json.loads(payload) if payload else None

    def list_all(self, path, limit=500):
        """Paginated LIST; yields items."""
        cont = ""
        while True:
            sep = "&" if "?" in path else "?"
            q = f"{path}{sep}limit={limit}" + (f"&continue={urllib.parse.quote(cont)}" if cont else "")
            page = self.must("GET", q)
            yield from page.get("items", [])
            cont = page.get("metadata", {}).get("continue", "")
            if not cont:
                return


def parallel(api, jobs, threads=8):
    """Runs callables jobs (each gets api) on `threads` workers; raises the first error."""
    q = queue.Queue()
    for j in jobs:
        q.put(j)
    errors = []

    def worker():
        while not errors:
            try:
                j = q.get_nowait()
            except queue.Empty:
                return
            try:
                j(api)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


# --- objects --------------------------------------------------------------------

def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def node_object(name, shape="lean"):
    """shape "lean": what the extender reads (~2.5 KB of JSON). "kubelet": also
    what a real kubelet reports (~40 images, node info, five conditions,
    addresses, cloud labels; ~12 KB), the shape of a production node."""
    res = {"cpu": "64", "memory": "512Gi", "pods": "110",
           "aliyun.com/gpu-mem": str(GPUS_PER_NODE * GIB_PER_GPU),
           "aliyun.com/gpu-count": str(GPUS_PER_NODE)}
    t = now_rfc3339()
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "gpushare": "true", "gpupool-bench": "node"}},
            "status": {"capacity": res, "allocatable": dict(res),
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "fake node (extender bench)",
                                       "lastHeartbeatTime": t, "lastTransitionTime": t}]}}
    if shape == "kubelet":
        kubelet_shape(node, name, t)
    return node


def kubelet_shape(node, name, t):
    rng = random.Random(name)
    hexid = lambda n: "".join(rng.choice("0123456789abcdef") for _ in range(n))  # noqa: E731
    node["metadata"]["labels"].update({
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "gn7i-c32g1.8xlarge",
        "beta.kubernetes.io/instance-type": "gn7i-c32g1.8xlarge",
        "topology.kubernetes.io/region": "cn-beijing", "topology.kubernetes.io/zone": "cn-beijing-h",
        "failure-domain.beta.kubernetes.io/region": "cn-beijing",
        "failure-domain.beta.kubernetes.io/zone": "cn-beijing-h",
        "nvidia.com/gpu.product": "NVIDIA-A10", "nvidia.com/gpu.count": str(GPUS_PER_NODE),
        "nvidia.com/gpu.memory": "23028", "nvidia.com/gpu.family": "ampere"})
    node["metadata"]["annotations"] = {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "kubeadm.alpha.kubernetes.io/cri-socket": "/run/containerd/containerd.sock",
        "csi.volume.kubernetes.io/nodeid": json.dumps({"diskplugin.csi.alibabacloud.com": name})}
    node["spec"] = {"podCIDR": "10.%d.%d.0/24" % (rng.randrange(256), rng.randrange(256)),
                    "providerID": "cn-beijing.i-" + hexid(20)}
    st = node["status"]
    st["addresses"] = [{"type": "InternalIP", "address": "192.168.%d.%d" % (rng.randrange(256),
                                                                           rng.randrange(256))},
                       {"type": "Hostname", "address": name}]
    st["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 10250}}
    st["nodeInfo"] = {"machineID": hexid(32), "systemUUID": hexid(32), "bootID": hexid(32),
                      "kernelVersion": "5.10.134-16.al8.x86_64", "osImage": "Alibaba Cloud Linux 3",
                      "containerRuntimeVersion": "containerd://1.6.28",
                      "kubeletVersion": "v1.20.2", "kubeProxyVersion": "v1.20.2",
                      "operatingSystem": "linux", "architecture": "amd64"}
    for ctype, reason in [("MemoryPressure", "KubeletHasSufficientMemory"),
                          ("DiskPressure", "KubeletHasNoDiskPressure"),
                          ("PIDPressure", "KubeletHasSufficientPID"),
                          ("NetworkUnavailable", "RouteCreated")]:
        st["conditions"].insert(0, {"type": ctype, "status": "False", "reason": reason,
                                    "message": "kubelet has no " + ctype,
                                    "lastHeartbeatTime": t, "lastTransitionTime": t})
    st["images"] = [{"names": ["registry.cn-beijing.aliyuncs.com/team-%d/app-%d@sha256:%s"
                               % (i % 7, i, hexid(64)),
                               "registry.cn-beijing.aliyuncs.com/team-%d/app-%d:v1.%d.%d"
                               % (i % 7, i, rng.randrange(30), rng.randrange(10))],
                     "sizeBytes": rng.randrange(10 ** 7, 6 * 10 ** 9)} for i in range(40)]


def system_pod_object(name, node, app):
    """A DaemonSet pod as on every real node (no GPU): what the inspect LIST of
    all pods also has to read and skip."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {"app": app, "controller-revision-hash": "5d8f7c9b4",
                                    "pod-template-generation": "3", "gpupool-bench": "system"},
                         "annotations": {"prometheus.io/scrape": "true",
                                         "prometheus.io/port": "9100"}},
            "spec": {"nodeName": node, "schedulerName": "gpupool-bench-none",
                     "hostNetwork": True, "priorityClassName": "system-node-critical",
                     "serviceAccountName": app, "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": app, "image": "registry.k8s.io/%s:v1.20.2" % app,
                                     "command": ["/usr/local/bin/" + app, "--v=2",
                                                 "--config=/var/lib/%s/config.conf" % app,
                                                 "--hostname-override=$(NODE_NAME)"],
                                     "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {
                                         "apiVersion": "v1", "fieldPath": "spec.nodeName"}}}],
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                                   "limits": {"cpu": "500m", "memory": "256Mi"}},
                                     "volumeMounts": [{"name": "config", "mountPath": "/var/lib/" + app},
                                                      {"name": "xtables-lock",
                                                       "mountPath": "/run/xtables.lock"},
                                                      {"name": "lib-modules", "readOnly": True,
                                                       "mountPath": "/lib/modules"}],
                                     "securityContext": {"readOnlyRootFilesystem": True,
                                                         "capabilities": {"add": ["NET_ADMIN"]}}}],
                     "volumes": [{"name": "config", "configMap": {"name": app}},
                                 {"name": "xtables-lock", "hostPath": {
                                     "path": "/run/xtables.lock", "type": "FileOrCreate"}},
                                 {"name": "lib-modules", "hostPath": {"path": "/lib/modules"}}]}}


def pod_object(name, gib, node=None, gpu=None, role="bound"):
    meta = {"name": name, "namespace": NAMESPACE, "labels": {"gpupool-bench": role}}
    if node is not None:
        meta["annotations"] = {
            "ALIYUN_COM_GPU_MEM_IDX": str(gpu),
            "ALIYUN_COM_GPU_MEM_POD": str(gib),
            "ALIYUN_COM_GPU_MEM_DEV": str(GIB_PER_GPU),
            "ALIYUN_COM_GPU_MEM_ASSIGNED": "true",
            "ALIYUN_COM_GPU_MEM_ASSUME_TIME": str(time.time_ns()),
        }
    spec = {"containers": [{"name": "c", "image": "busybox:1.35",
                            "resources": {"limits": {"aliyun.com/gpu-mem": str(gib)},
                                          "requests": {"aliyun.com/gpu-mem": str(gib),
                                                       "cpu": "1", "memory": "4Gi"}}}],
            "restartPolicy": "Never",
            # No scheduler runs in the bench cluster; the name makes that explicit.
            "schedulerName": "gpupool-bench-none"}
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


class Cluster:
    """What the bench created, so that later steps know where there is room."""

    def __init__(self, seed, shape="lean", system_pods=0):
        self.shape = shape              # node_object's shape
        self.system_pods = system_pods  # non-GPU DaemonSet pods per node
        self.rng = random.Random(seed)
        self.nodes = []                 # names, in creation order
        self.used = {}                  # node -> [GiB used per GPU]
        self.bound_pods = 0

    def populate(self, api, n_nodes):
        start = len(self.nodes)
        new = [NODE_FMT.format(i) for i in range(start, n_nodes)]
        t = time.monotonic()
        parallel(api, [lambda a, nm=nm: a.must("POST", "/api/v1/nodes", node_object(nm, self.shape))
                       for nm in new])
        apps = ["kube-proxy", "node-exporter", "csi-plugin", "terway"][:self.system_pods]
        parallel(api, [lambda a, b=system_pod_object(f"{app}-{nm}", nm, app):
                       a.must("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", b)
                       for nm in new for app in apps])
        t_nodes = time.monotonic() - t
        self.nodes += new
        for nm in new:
            self.used[nm] = [0] * GPUS_PER_NODE
        # ~0.6 pods per node over the whole cluster, on random nodes and GPUs.
        want = int(round(PODS_PER_NODE * n_nodes)) - self.bound_pods
        jobs = []
        for _ in range(want):
            node = self.rng.choice(self.nodes)
            gpu = self.rng.randrange(GPUS_PER_NODE)
            gib = self.rng.choice(POD_SIZES_GIB)
            if self.used[node][gpu] + gib > GIB_PER_GPU:
                continue
            self.used[node][gpu] += gib
            name = f"bound-{self.bound_pods + len(jobs):05d}"
            body = pod_object(name, gib, node, gpu)
            jobs.append(lambda a, b=body: a.must("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", b))
        t = time.monotonic()
        parallel(api, jobs)
        t_pods = time.monotonic() - t
        self.bound_pods += len(jobs)
        log(f"populate: +{len(new)} nodes in {t_nodes:.1f}s ({len(new) / max(t_nodes, 1e-9):.0f}/s), "
            f"+{len(jobs)} bound pods in {t_pods:.1f}s ({len(jobs) / max(t_pods, 1e-9):.0f}/s)")
        return {"nodes_s": t_nodes, "pods_s": t_pods, "new_nodes": len(new), "new_pods": len(jobs)}

    def room_for(self, gib, count):
        """`count` node names, one pod per node per round (kube-scheduler spreads
        concurrent binds over nodes), each with a GPU that has `gib` free; reserves it."""
        out = []
        while len(out) < count:
            before = len(out)
            for nm in self.nodes:
                used = self.used[nm]
                g = next((g for g in range(GPUS_PER_NODE) if used[g] + gib <= GIB_PER_GPU), None)
                if g is None:
                    continue
                used[g] += gib
                out.append(nm)
                if len(out) == count:
                    return out
            if len(out) == before:
                raise BenchError(f"no room for {count} pods of {gib} GiB")
        return out


# --- the extender process -----------------------------------------------------------

def proc_cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])        # utime + stime (fields 14, 15)


def proc_status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


class Extender:
    def __init__(self, binary, kubeconfig, port, log_path, extra_args):
        self.binary, self.kubeconfig, self.port = binary, kubeconfig, port
        self.log_path, self.extra_args = log_path, extra_args
        self.proc = None

    def start(self, timeout=300):
        args = [self.binary, "--address", "127.0.0.1", "--port", str(self.port), "--kubeconfig", self.kubeconfig] + self.extra_args
        env = {k: v for k, v in os.environ.items() if k not in ("PORT", "KUBECONFIG", "LOG_LEVEL")}
        logf = open(self.log_path, "ab")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                     stdin=subprocess.DEVNULL)
        logf.close()
        while True:
            if self.proc.poll() is not None:
                raise BenchError(f"extender exited with status {self.proc.returncode} before /healthz "
                                 f"answered; see {self.log_path}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/healthz")
                r = c.getresponse()
                r.read()
                c.close()
                if r.status == 200:
                    return time.monotonic() - t0
            except OSError:
                pass
            if time.monotonic() - t0 > timeout:
                raise BenchError(f"extender /healthz not 200 after {timeout}s; see {self.log_path}")
            time.sleep(0.02)

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return -9

    @property
    def pid(self):
        return self.proc.pid


# --- load: filter / prioritize over persistent connections ----------------------------

def extender_args(node_names):
    pod = pod_object("bench-pending", FILTER_POD_GIB, role="pending")
    pod["metadata"]["uid"] = "6d1c0c6e-0000-4000-8000-000000000001"
    pod["status"] = {"phase": "Pending", "qosClass": "Burstable"}
    return {"Pod": pod, "Nodes": None, "NodeNames": node_names}


def post_once(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    payload = r.read()
    c.close()
    return r.status, payload


def check_answer(verb, status, payload, n_nodes):
    if status != 200:
        raise BenchError(f"{verb}: HTTP {status}: {payload[:300]!r}")
    doc = json.loads(payload)
    if verb == "filter":
        if doc.get("Error"):
            raise BenchError(f"filter: Error {doc['Error']!r}")
        passed = len(doc.get("NodeNames") or [])
        failed = len(doc.get("FailedNodes") or {})
        if passed == 0 or passed + failed != n_nodes:
            raise BenchError(f"filter: {passed} passed + {failed} failed != {n_nodes} nodes")
        return f"{passed} nodes pass, {failed} fail"
    if not isinstance(doc, list) or len(doc) == 0:
        raise BenchError(f"prioritize: expected a non-empty HostPriorityList, got {payload[:200]!r}")
    return f"{len(doc)} scores"


def percentile(sorted_values, p):
    i = int(p * (len(sorted_values) - 1) + 0.5)
    return sorted_values[min(i, len(sorted_values) - 1)]


def drive_python(port, path, body, duration, conns):
    """This script's own keep-alive client: `conns` threads, sequential requests each."""
    lat = [[] for _ in range(conns)]
    errors = [0] * conns
    stop_at = time.monotonic() + duration

    def worker(k):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Content-Type": "application/json"}
        while time.monotonic() < stop_at:
            t = time.perf_counter()
            c.request("POST", path, body=body, headers=headers)
            r = c.getresponse()
            r.read()
            lat[k].append(time.perf_counter() - t)
            if r.status != 200:
                errors[k] += 1
        c.close()

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.monotonic() - t0
    allv = sorted(v for l in lat for v in l)
    return {"requests": len(allv), "seconds": elapsed, "errors": sum(errors),
            "p50_ms": percentile(allv, 0.50) * 1e3, "p99_ms": percentile(allv, 0.99) * 1e3,
            "max_ms": allv[-1] * 1e3}


def drive_wrk(port, path, body_file, duration, conns):
    lua = os.path.join(HERE, "extender_wrk.lua")
    cmd = ["wrk", f"-t{min(conns, 2)}", f"-c{conns}", f"-d{duration}s", "--timeout", "30s",
           "-s", lua, f"http://127.0.0.1:{port}{path}"]
    env = dict(os.environ, GP_BENCH_BODY=body_file)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("WRK_RESULT "):
            kv = dict(f.split("=", 1) for f in line.split()[1:])
            return {"requests": int(kv["requests"]), "seconds": int(kv["duration_us"]) / 1e6,
                    "errors": int(kv["errors"]), "p50_ms": int(kv["p50_us"]) / 1e3,
                    "p99_ms": int(kv["p99_us"]) / 1e3, "max_ms": int(kv["max_us"]) / 1e3}
    raise BenchError(f"wrk printed no result (status {out.returncode}): {out.stdout[-500:]} {out.stderr[-500:]}")


def load(ext, client, verb, path, body, body_file, duration, conns, perf_out=None):
    perf = None
    if perf_out:
        # Profile the extender during this series only (perf report -i perf_out).
        perf = subprocess.Popen(["perf", "record", "-q", "-g", "-F", "2000", "-p", str(ext.pid),
                                 "-o", perf_out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
    c0 = proc_cpu_ticks(ext.pid)
    if client == "wrk":
        r = drive_wrk(ext.port, path, body_file, duration, conns)
    else:
        r = drive_python(ext.port, path, body, duration, conns)
    c1 = proc_cpu_ticks(ext.pid)
    if perf is not None:
        perf.send_signal(signal.SIGINT)
        perf.wait()
        log(f"perf profile of {verb}: perf report -i {perf_out}")
    if r["errors"]:
        raise BenchError(f"{verb}: {r['errors']} of {r['requests']} requests failed")
    if ext.proc.poll() is not None:
        raise BenchError(f"extender died during {verb} (status {ext.proc.returncode})")
    r["cpu_ms"] = (c1 - c0) / CLK_TCK * 1e3 / max(r["requests"], 1)
    r["rps"] = r["requests"] / r["seconds"]
    log(f"{verb} x{conns} conn: {r['requests']} requests in {r['seconds']:.1f}s, "
        f"{r['rps']:.0f}/s, p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, "
        f"CPU {r['cpu_ms']:.3f} ms/request")
    return r


# --- bind ---------------------------------------------------------------------------

def bench_binds(api, cluster, ext, prefix, count, gib=4, conns=4):
    names = [f"bind-{len(cluster.nodes)}-{i:04d}" for i in range(count)]
    uids = {}

    def create(a, nm):
        obj = a.must("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod_object(nm, gib, role="bind"))
        uids[nm] = obj["metadata"]["uid"]

    parallel(api, [lambda a, nm=nm: create(a, nm) for nm in names])
    targets = dict(zip(names, cluster.room_for(gib, count)))
    # Let the extender's watch see the pending pods before timing the binds.
    time.sleep(1.0)
    q = queue.Queue()
    for nm in names:
        q.put(nm)
    failures = []

    def worker():
        c = http.client.HTTPConnection("127.0.0.1", ext.port, timeout=60)
        while True:
            try:
                nm = q.get_nowait()
            except queue.Empty:
                break
            body = json.dumps({"PodName": nm, "PodNamespace": NAMESPACE, "PodUID": uids[nm],
                               "Node": targets[nm]})
            c.request("POST", prefix + "/bind", body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            payload = r.read()
            err = ""
            try:
                err = json.loads(payload).get("Error", "")
            except ValueError:
                err = f"not JSON: {payload[:100]!r}"
            if r.status != 200 or err:
                failures.append(f"{nm}: HTTP {r.status} {err}")
        c.close()

    c0 = proc_cpu_ticks(ext.pid)
    t0 = time.monotonic()
    ts = [threading.Thread(target=worker) for _ in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    t_answered = time.monotonic() - t0
    cpu_ms = (proc_cpu_ticks(ext.pid) - c0) / CLK_TCK * 1e3 / count
    if failures:
        raise BenchError(f"bind: {len(failures)} of {count} failed, e.g. {failures[:3]}")
    # Bound = the API server shows spec.nodeName (the extender answers after its Binding POST,
    # so this normally holds at once; poll in case it does not).
    while True:
        pods = list(api.list_all(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=gpupool-bench%3Dbind"))
        ours = {p["metadata"]["name"]: p for p in pods if p["metadata"]["name"] in targets}
        if all(ours.get(nm, {}).get("spec", {}).get("nodeName") for nm in names):
            break
        if time.monotonic() - t0 > 120:
            raise BenchError("bind: pods not bound after 120 s")
        time.sleep(0.05)
    t_bound = time.monotonic() - t0
    wrong = [nm for nm in names if ours[nm]["spec"]["nodeName"] != targets[nm]]
    unannotated = [nm for nm in names
                   if "ALIYUN_COM_GPU_MEM_IDX" not in (ours[nm]["metadata"].get("annotations") or {})]
    if wrong or unannotated:
        raise BenchError(f"bind: {len(wrong)} pods on the wrong node, {len(unannotated)} without "
                         f"ALIYUN_COM_GPU_MEM_IDX")
    # The extender answers a bind only after kube-apiserver acknowledged its
    # Binding, so the last answer is when the last pod was bound: binds/s
    # counts to it, as the ceiling counts to its last POST's answer (the LIST
    # above only verifies, and its own duration is not a bind's).
    log(f"bind: {count} pods answered in {t_answered:.2f}s ({count / t_answered:.0f} binds/s, "
        f"extender CPU {cpu_ms:.2f} ms per bind), all seen bound (LIST) after {t_bound:.2f}s")
    return {"binds": count, "answered_s": t_answered, "bound_s": t_bound,
            "binds_per_s": count / t_answered, "cpu_ms": cpu_ms}


def gpushare_annotations(gib):
    return {"ALIYUN_COM_GPU_MEM_IDX": "0", "ALIYUN_COM_GPU_MEM_POD": str(gib),
            "ALIYUN_COM_GPU_MEM_DEV": str(GIB_PER_GPU), "ALIYUN_COM_GPU_MEM_ASSIGNED": "false",
            "ALIYUN_COM_GPU_MEM_ASSUME_TIME": str(time.time_ns())}


def bench_api_ceiling(api, cluster, count, gib=4, conns=4, two_call=False, tag=""):
    """What a bind costs the API server alone, made by this script on `conns`
    keep-alive connections (the extender's concurrency). One-write (default):
    POST the Binding alone, carrying the five annotations and the UID, as the
    extender does (the pod's UID comes from the create, as the extender has it
    from its cache). two_call: the design before issue 16, GET the pod, PATCH
    the annotations, POST the Binding. Binds/s of the extender above the
    one-write ceiling are impossible; close to it means the extender adds little."""
    role = ("ceiling2" if two_call else "ceiling") + tag
    names = [f"{role}-{len(cluster.nodes)}-{i:04d}" for i in range(count)]
    uids = {}

    def create(a, nm):
        uids[nm] = a.must("POST", f"/api/v1/namespaces/{NAMESPACE}/pods",
                          pod_object(nm, gib, role=role))["metadata"]["uid"]

    parallel(api, [lambda a, nm=nm: create(a, nm) for nm in names])
    targets = dict(zip(names, cluster.room_for(gib, count)))

    def one(a, nm):
        base = f"/api/v1/namespaces/{NAMESPACE}/pods/{nm}"
        meta = {"name": nm, "namespace": NAMESPACE, "uid": uids[nm]}
        if two_call:
            a.must("GET", base)
            status, payload = a.request("PATCH", base, {"metadata": {"annotations": gpushare_annotations(gib)}},
                                        ctype="application/strategic-merge-patch+json")
            if status != 200:
                raise BenchError(f"ceiling PATCH {nm}: HTTP {status}: {payload[:200]!r}")
        else:
            meta["annotations"] = gpushare_annotations(gib)
        a.must("POST", base + "/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": targets[nm]}})

    t0 = time.monotonic()
    parallel(api, [lambda a, nm=nm: one(a, nm) for nm in names], threads=conns)
    t = time.monotonic() - t0
    if not two_call:
        # kube-apiserver copied the Binding's annotations onto the pods (BindingREST).
        pods = list(api.list_all(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=gpupool-bench%3D{role}"))
        bare = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] in targets and
                "ALIYUN_COM_GPU_MEM_IDX" not in (p["metadata"].get("annotations") or {})]
        if bare:
            raise BenchError(f"ceiling: {len(bare)} pods bound without the Binding's annotations")
    what = "GET+PATCH+Binding" if two_call else "Binding alone"
    log(f"API ceiling: {count} {what} by the driver ({conns} conns) in {t:.2f}s -> {count / t:.0f}/s")
    return count / t


# --- main ----------------------------------------------------------------------------

def run_size(args, api, cluster, n):
    pop = cluster.populate(api, n)
    ext = Extender(args.extender, args.kubeconfig, args.port,
                   os.path.join(args.log_dir, f"extender-{n}.log"), args.extender_arg)
    row = {"nodes": n, "pods": cluster.bound_pods, "populate": pop}
    try:
        row["sync_s"] = ext.start()
        time.sleep(0.5)
        row["rss_sync_kib"] = proc_status_kib(ext.pid, "VmRSS")
        row["anon_sync_kib"] = proc_status_kib(ext.pid, "RssAnon")
        log(f"extender up: /healthz after {row['sync_s']:.2f}s, VmRSS {row['rss_sync_kib'] / 1024:.1f} MiB")
        body = json.dumps(extender_args(cluster.nodes)).encode()
        body_file = os.path.join(args.log_dir, f"filter-{n}.json")
        with open(body_file, "wb") as f:
            f.write(body)
        row["body_kib"] = len(body) / 1024
        for verb in ("filter", "prioritize"):
            path = f"{args.prefix}/{verb}"
            row[verb + "_check"] = check_answer(verb, *post_once(args.port, path, body), n)
            perf_out = os.path.join(args.log_dir, f"perf-{n}-{verb}.data") if args.perf else None
            row[verb] = load(ext, args.client, verb, path, body, body_file, args.duration, 1, perf_out)
        row["filter_4"] = load(ext, args.client, "filter", f"{args.prefix}/filter", body, body_file,
                               args.duration, 4)
        time.sleep(0.5)
        row["rss_requests_kib"] = proc_status_kib(ext.pid, "VmRSS")  # after filter + prioritize
        row["anon_requests_kib"] = proc_status_kib(ext.pid, "RssAnon")
        # The ceiling right before and right after the extender's binds, so a
        # shared machine's load changes show up as a spread instead of a bias.
        pre = bench_api_ceiling(api, cluster, args.binds, tag="a")
        row["bind"] = bench_binds(api, cluster, ext, args.prefix, args.binds)
        post = bench_api_ceiling(api, cluster, args.binds, tag="b")
        row["ceiling"] = (pre + post) / 2
        row["ceiling_range"] = (min(pre, post), max(pre, post))
        row["ceiling_two_call"] = bench_api_ceiling(api, cluster, args.binds, two_call=True)
        time.sleep(1.5)  # what stays resident: the extender trims within a second of a burst
        row["rss_load_kib"] = proc_status_kib(ext.pid, "VmRSS")
        row["anon_load_kib"] = proc_status_kib(ext.pid, "RssAnon")
        row["file_load_kib"] = proc_status_kib(ext.pid, "RssFile")
        row["hwm_kib"] = proc_status_kib(ext.pid, "VmHWM")
        row["threads"] = proc_status_kib(ext.pid, "Threads")
    finally:
        rc = ext.stop()
        row["exit"] = rc
    log(f"extender stopped, exit status {rc}")
    return row


def mib(kib):
    return f"{kib / 1024:.1f}"


def report(rows, args):
    print("| nodes (8 GPUs each) | " + " | ".join(str(r["nodes"]) for r in rows) + " | goal |")
    print("|---|" + "---|" * len(rows) + "---|")

    def line(label, fn, goal=""):
        print(f"| {label} | " + " | ".join(fn(r) for r in rows) + f" | {goal} |")

    line("bound pods in the cluster", lambda r: str(r["pods"]))
    line("filter request body", lambda r: f"{r['body_kib']:.0f} KiB")
    line("start → /healthz (LIST+WATCH sync)", lambda r: f"{r['sync_s']:.2f} s")
    line("**filter CPU / request**", lambda r: f"{r['filter']['cpu_ms']:.3f} ms", "≤ 1 ms at 1,000")
    line("filter p50 / p99 (1 conn)", lambda r: f"{r['filter']['p50_ms']:.2f} / {r['filter']['p99_ms']:.2f} ms",
         "p99 ≤ 5 ms at 5,000")
    line("filter requests/s (1 conn)", lambda r: f"{r['filter']['rps']:.0f}")
    line("filter requests/s (4 conns)", lambda r: f"{r['filter_4']['rps']:.0f}")
    line("filter p50 / p99 (4 conns)",
         lambda r: f"{r['filter_4']['p50_ms']:.2f} / {r['filter_4']['p99_ms']:.2f} ms")
    line("prioritize CPU / request", lambda r: f"{r['prioritize']['cpu_ms']:.3f} ms")
    line("prioritize p50 / p99 (1 conn)",
         lambda r: f"{r['prioritize']['p50_ms']:.2f} / {r['prioritize']['p99_ms']:.2f} ms")
    line("prioritize requests/s (1 conn)", lambda r: f"{r['prioritize']['rps']:.0f}")
    line("**binds/s** (4 conns, until the last answer: each after the API acknowledged its Binding)",
         lambda r: f"{r['bind']['binds_per_s']:.0f} ({r['bind']['binds']} in {r['bind']['answered_s']:.2f} s)",
         "≥ 100")
    line("extender CPU per bind", lambda r: f"{r['bind']['cpu_ms']:.2f} ms")
    line("API server alone: POST Binding (with the annotations)/s (driver, 4 conns; before/after the binds)",
         lambda r: f"{r['ceiling']:.0f} ({r['ceiling_range'][0]:.0f}–{r['ceiling_range'][1]:.0f})")
    line("binds/s as % of that ceiling", lambda r: f"{100 * r['bind']['binds_per_s'] / r['ceiling']:.0f} %",
         "≥ 90 %")
    line("API server alone: GET+PATCH+Binding/s (two-call design, driver, 4 conns)",
         lambda r: f"{r['ceiling_two_call']:.0f}")
    line("**VmRSS after sync**", lambda r: f"{mib(r['rss_sync_kib'])} MiB", "≤ 16 MiB at 5,000")
    line("VmRSS after the filter/prioritize series", lambda r: f"{mib(r['rss_requests_kib'])} MiB")
    line("RssAnon after sync / the series / load (the heap, stacks; the rest is mapped files)",
         lambda r: f"{mib(r['anon_sync_kib'])} / {mib(r['anon_requests_kib'])} / "
                   f"{mib(r['anon_load_kib'])} MiB")
    line("VmRSS after load (binds too) / VmHWM",
         lambda r: f"{mib(r['rss_load_kib'])} / {mib(r['hwm_kib'])} MiB", "≤ 16 MiB at 5,000")
    line("threads", lambda r: str(r["threads"]))
    line("exit status on SIGTERM", lambda r: str(r["exit"]))
    print()
    print(f"Client: {args.client}; {args.duration} s per series; filter/prioritize bodies carry every node "
          f"name (`NodeNames`, nodeCacheCapable) and an {FILTER_POD_GIB} GiB pod; CPU per request = "
          f"extender utime+stime over the series / requests.")
    print()
    print("Cluster set-up (parallel POSTs, 8 keep-alive connections): " + "; ".join(
        f"{r['populate']['new_nodes']} nodes in {r['populate']['nodes_s']:.1f} s and "
        f"{r['populate']['new_pods']} pods in {r['populate']['pods_s']:.1f} s" for r in rows) + ".")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--extender", required=True)
    ap.add_argument("--extender-arg", action="append", default=[],
                    help="extra argument for the extender (repeatable)")
    ap.add_argument("--sizes", default="1000,5000")
    ap.add_argument("--port", type=int, default=39998)
    ap.add_argument("--prefix", default="/gpupool-scheduler")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--binds", type=int, default=300)
    ap.add_argument("--client", choices=("wrk", "python"), default="wrk")
    ap.add_argument("--log-dir", default=".")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--perf", action="store_true",
                    help="perf record the extender during the 1-connection filter/prioritize series")
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    api = Api(args.server, args.token)
    cluster = Cluster(args.seed)
    rows = []
    try:
        for n in sizes:
            log(f"=== {n} nodes ===")
            rows.append(run_size(args, api, cluster, n))
    except BenchError as e:
        log(f"FAILED: {e}")
        if rows:
            report(rows, args)
        return 1
    report(rows, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
