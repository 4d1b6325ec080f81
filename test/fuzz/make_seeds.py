#!/usr/bin/env python3
"""make_seeds.py -- (re)writes the generated seeds of test/fuzz/corpus/.

Seeds are small real inputs in each target's input format (the header
comment of fuzz_<target>.c): API objects as the API server sends them,
protobuf LISTs from test/fakeapi/k8s_protobuf.py, PodResources replies
encoded by hand with the wire format, the openb CSV head, the NVIDIA
config fixtures. Only seed-*.* files are written; crash-* regression
inputs are never touched. Run from anywhere: /usr/bin/python3 make_seeds.py
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
CORPUS = os.path.join(HERE, "corpus")
sys.path.insert(0, os.path.join(ROOT, "test", "fakeapi"))


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def node(name, mem=32, count=2, ann=None):
    md = {"name": name, "resourceVersion": "101", "labels": {"kubernetes.io/hostname": name}}
    if ann:
        md["annotations"] = ann
    return {"kind": "Node", "apiVersion": "v1", "metadata": md,
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                       "capacity": {"cpu": "8", "memory": "32Gi",
                                    "aliyun.com/gpu-mem": str(mem),
                                    "aliyun.com/gpu-count": str(count)},
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}


def pod(name, uid, mem="4", node_name=None, ann=None, init=False, phase="Pending"):
    ctr = {"name": "c", "image": "busybox",
           "resources": {"limits": {"aliyun.com/gpu-mem": mem},
                         "requests": {"cpu": "500m", "memory": "1Gi"}}}
    spec = {"containers": [ctr]}
    if init:
        spec["initContainers"] = [dict(ctr, name="init")]
    if node_name:
        spec["nodeName"] = node_name
    md = {"name": name, "namespace": "default", "uid": uid, "resourceVersion": "202"}
    if ann:
        md["annotations"] = ann
    return {"kind": "Pod", "apiVersion": "v1", "metadata": md, "spec": spec,
            "status": {"phase": phase}}


GPUS = json.dumps([{"index": 0, "memory": 16, "model": "A100"},
                   {"index": 1, "memory": 16, "model": "A100", "healthy": False}])
NODES = [node("n1"), node("n2", 16, 1, {"gpupool.io/gpus": GPUS})]
PODS = [pod("p1", "u-p1"), pod("run", "u-run", "8", "n1",
                              {"ALIYUN_COM_GPU_MEM_IDX": "0", "ALIYUN_COM_GPU_MEM_POD": "8",
                               "ALIYUN_COM_GPU_MEM_ASSIGNED": "true"}, phase="Running"),
        pod("mc", "u-mc", "2", init=True)]
CM = {"metadata": {"name": "gpupool-unhealthy-n1", "namespace": "kube-system"},
      "data": {"gpus": "1"}}


def compact(v):
    return json.dumps(v, separators=(",", ":"))


def extender():
    p = PODS[0]
    names = compact({"Pod": p, "NodeNames": ["n1", "n2", "n3"]})
    full = compact({"Pod": p, "Nodes": {"items": NODES}})
    bind = compact({"PodName": "p1", "PodNamespace": "default", "PodUID": "u-p1", "Node": "n1"})
    nouid = compact({"PodName": "p9", "PodNamespace": "default", "PodUID": "", "Node": "n2"})
    put("extender", "filter-names.json", b"\x00" + names.encode())
    put("extender", "filter-nodes.json", b"\x04" + full.encode())
    put("extender", "prioritize.json", b"\x01" + names.encode())
    put("extender", "bind.json", b"\x02" + bind.encode())
    put("extender", "bind-nouid-fails.json", b"\x1a" + nouid.encode())
    extra = "\n--\nN" + compact(node("n3", 48, 3)) + "\n--\nP" + compact(PODS[2]) + \
        "\n--\nC" + compact(CM)
    put("extender", "all-with-objects.json", b"\x03" + names.encode() + extra.encode())


def extender_route():
    p = PODS[0]
    names = compact({"Pod": p, "NodeNames": ["n1", "n2"]})
    for i, (head, body) in enumerate([
            ("POST /gpupool-scheduler/filter", names),
            ("POST /gpushare-scheduler/prioritize", names),
            ("POST /gpushare-scheduler/bind", "{}"),
            ("GET /gpupool-scheduler/filter", ""),
            ("GET /gpushare-scheduler/inspect/n1", ""),
            ("GET /inspect", ""), ("HEAD /ui/", ""), ("GET /ui/pool.json", ""),
            ("GET /healthz", ""), ("GET /version", ""), ("DELETE /", "")]):
        put("extender_route", "%02d.txt" % i, head + "\n" + body)


def kube_json():
    put("kube_json", "podlist.json", compact({"kind": "PodList", "apiVersion": "v1",
                                              "metadata": {"resourceVersion": "300",
                                                           "continue": "tok"},
                                              "items": PODS}))
    put("kube_json", "nodelist.json", compact({"kind": "NodeList", "apiVersion": "v1",
                                               "metadata": {"resourceVersion": "301"},
                                               "items": NODES}))
    put("kube_json", "status.json", compact({"kind": "Status", "apiVersion": "v1",
                                             "status": "Failure", "message": "pods is forbidden",
                                             "reason": "Forbidden", "code": 403}))


def kube_protobuf():
    import k8s_protobuf as kp
    for i, (kind, items) in enumerate([("NodeList", NODES), ("PodList", PODS),
                                       ("ConfigMapList", [CM])]):
        data = kp.encode_list(kind, items, {"resourceVersion": "7", "continue": "c"})
        put("kube_protobuf", kind.lower() + ".pb", bytes([i * 7]) + data[4:])
    st = kp.encode_status({"status": "Failure", "message": "gone", "reason": "Expired",
                           "code": 410})
    put("kube_protobuf", "status.pb", b"\x05" + st[4:])


def kube_watch():
    ev = [{"type": "ADDED", "object": NODES[0]}, {"type": "MODIFIED", "object": PODS[1]},
          {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "9"}}},
          {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                       "message": "too old resource version"}}]
    lines = "".join(compact(e) + "\n" for e in ev)
    put("kube_watch", "events.txt", b"\x03\xff" + lines.encode())
    put("kube_watch", "crlf-small-cap.txt", b"\x00\x02" + lines.replace("\n", "\r\n").encode())
    put("kube_watch", "base64.txt", b"\x01\x10" + b"LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==\n")


KUBECONFIG = """apiVersion: v1
kind: Config
current-context: %s
clusters:
- name: c1
  cluster:
    server: https://127.0.0.1:6443/
    insecure-skip-tls-verify: true
- name: c2
  cluster:
    server: http://10.0.0.1:8080
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=
    tls-server-name: kubernetes
contexts:
- name: main
  context: {cluster: c1, user: u1, namespace: gpu}
- name: ctx
  context: {cluster: c2, user: u2}
users:
- name: u1
  user:
    token: abc.def
- name: u2
  user:
    username: admin
    password: secret
"""
EXEC_USER = """apiVersion: v1
kind: Config
current-context: ctx
clusters:
- {name: c, cluster: {server: "https://k:6443"}}
contexts:
- {name: ctx, context: {cluster: c, user: e}}
users:
- name: e
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: /bin/true
      args: ["--x"]
      env: [{name: A, value: b}]
      interactiveMode: Never
"""


def kubeconfig():
    put("kubeconfig", "token.yaml", KUBECONFIG % "main")
    put("kubeconfig", "basic.yaml", KUBECONFIG % "ctx")
    put("kubeconfig", "exec.yaml", EXEC_USER)
    put("kubeconfig", "execcredential.json", compact({
        "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
        "status": {"token": "t0k", "expirationTimestamp": "2030-01-02T03:04:05Z"}}))


def dp_config():
    for d in (os.path.join(ROOT, "test", "configs"), os.path.join(ROOT, "test", "configs", "nvidia")):
        for f in sorted(os.listdir(d)):
            if f.endswith(".yaml"):
                with open(os.path.join(d, f), "rb") as fh:
                    put("dp_config", f, fh.read())
    put("dp_config", "args.txt", "--mig-strategy\nmixed\n--fail-on-init-error=false\n"
                                 "--device-list-strategy\nvolume-mounts\n-v\n3\n")


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def ld(field, payload):
    if isinstance(payload, str):
        payload = payload.encode()
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def podresources():
    def devices(res, ids):
        return ld(1, res) + b"".join(ld(2, i) for i in ids) + ld(3, ld(1, varint(0 << 3) + varint(0)))

    def container(name, devs):
        return ld(1, name) + b"".join(ld(2, d) for d in devs) + varint(3 << 3) + varint(4)

    def podres(name, ns, ctrs):
        return ld(1, name) + ld(2, ns) + b"".join(ld(3, c) for c in ctrs)

    units = ["GPU-a-_-%d" % i for i in range(4)]
    p1 = podres("p1", "default", [container("c", [devices("aliyun.com/gpu-mem", units)]),
                                  container("d", [devices("nvidia.com/gpu", ["GPU-b"])])])
    p2 = podres("p2", "default", [container("c", [])])
    body = ld(1, p1) + ld(1, p2)
    put("podresources", "two-pods.pb", b"\x00\x04" + body)
    put("podresources", "missing-view.pb", b"\x0b\x02" + body)
    put("podresources", "empty.pb", b"\x00\x01")


def gpumem_ledger():
    put("gpumem_ledger", "calls.txt", "2\n")
    put("gpumem_ledger", "second-entry.txt", "0a1b2c3d-0000-4000-8000-000000000001\n3\n")
    put("gpumem_ledger", "negative.txt", "-1\n")


def sim_trace():
    def head(path, n):
        with open(path, "rb") as f:
            return b"".join(f.readline() for _ in range(n))
    nodes = head(os.path.join(ROOT, "data", "openb", "openb_node_list_gpu_node.csv"), 9)
    pods = head(os.path.join(ROOT, "data", "openb", "openb_pod_list_default.csv"), 40)
    put("sim_trace", "openb-head.csv", nodes + b"\n==\n" + pods)
    multi = b"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,4000,8192,2,1000\np1,1000,1024,1,250\n"
    put("sim_trace", "multigpu.csv", nodes + b"\n==\n" + multi)


def cuda_config():
    put("cuda_config", "all.env", "CUDA_DEVICE_MEMORY_LIMIT=4g\nPATH=/usr/bin\n")
    put("cuda_config", "per-device.env", "CUDA_DEVICE_MEMORY_LIMIT_0=1024m\n"
                                         "CUDA_DEVICE_MEMORY_LIMIT_1=2GiB\n"
                                         "CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/x\n")
    put("cuda_config", "gpushare.env", "ALIYUN_COM_GPU_MEM_CONTAINER=4\nALIYUN_COM_GPU_MEM_DEV=16\n")
    put("cuda_config", "broken.env", "CUDA_DEVICE_MEMORY_LIMIT=-5\n")
    # D14: names and values that must fail closed, not mean "no limit".
    put("cuda_config", "empty-ordinal.env", "CUDA_DEVICE_MEMORY_LIMIT_=4g\n")
    put("cuda_config", "bad-ordinal.env", "CUDA_DEVICE_MEMORY_LIMIT_x=4g\nCUDA_DEVICE_MEMORY_LIMIT_01=1g\n")
    put("cuda_config", "ordinal-64.env", "CUDA_DEVICE_MEMORY_LIMIT_64=4g\n")
    put("cuda_config", "share-zero.env", "ALIYUN_COM_GPU_MEM_CONTAINER=0\nALIYUN_COM_GPU_MEM_DEV=16\n")
    # The ordinal rule: the process's CUDA_VISIBLE_DEVICES renumbering.
    put("cuda_config", "visible.env", "CUDA_DEVICE_MEMORY_LIMIT_0=4g\nCUDA_DEVICE_MEMORY_LIMIT_1=2g\n"
                                      "CUDA_VISIBLE_DEVICES=1,GPU-6f1e2d3c,0,,-1,63\n")


def cuda_region():
    # struct region_file (src/cuda/cuda_region.c), version 2: magic, version, size, nslots,
    # limit, ready, pad, the mutex (40 bytes, kept genuine by the harness), used, recoveries,
    # reclaimed, claims, scanned_at, spare[3], then 1024 slots of
    # {state, pid, pidns, spare, start, token, used} (state 1: live while its first byte is
    # OFD-locked, 2: judged by pid).
    magic, version, size, nslots = 0x52435047, 2, 41096, 1024
    def header(limit=1 << 30, ready=1, ver=version, sz=size):
        return struct.pack("<IIIIqII", magic, ver, sz, nslots, limit, ready, 0)
    def tail(used, slots, claims=0, scanned_at=0):
        out = b"\0" * 40 + struct.pack("<qqqQQ", used, 0, 0, claims, scanned_at) + b"\0" * 24
        for state, pid, token, u in slots:
            out += struct.pack("<IiIIQQq", state, pid, 0, 0, 0, token, u)
        return out
    put("cuda_region", "header.bin", header())
    put("cuda_region", "not-ready.bin", header(ready=0))
    put("cuda_region", "slots.bin", header() + tail(3 << 20, [(1, 1, 1, 1 << 20), (2, 999999, 2, 2 << 20)],
                                                    claims=2))
    put("cuda_region", "over-limit.bin", header(limit=4096) + tail(1 << 40, [(2, 999998, 1, 1 << 40)]))
    put("cuda_region", "odd-states.bin", header() + tail(5, [(7, 0, 0, 5), (1, -1, 0, -3), (2, 0, 9, 1)],
                                                         claims=(1 << 64) - 1, scanned_at=(1 << 64) - 1))
    put("cuda_region", "short-file.bin", b"GPCR\x02")
    # A version 1 region (32,904 bytes: the harness writes that size) is made anew; version 3
    # fails closed.
    put("cuda_region", "v1-stale.bin", struct.pack("<IIIIqII", magic, 1, 32904, nslots, 1 << 34, 1, 0))
    put("cuda_region", "v3-newer.bin", header(ver=3))
    # Version 2, whole file (what cudareg_peek reads): header, mutex, used, recoveries,
    # reclaimed, claims, scanned_at, spare[3], then 1024 slots of
    # {state, pid, pidns, spare, start, token, used}; a forged negative and a huge charge.
    v2_size = 136 + 1024 * 40
    head = struct.pack("<IIIIqII", magic, 2, v2_size, nslots, 4 << 30, 1, 0) + b"\0" * 40
    head += struct.pack("<qqqQQqqq", 3 << 20, 0, 0, 3, 0, 0, 0, 0)
    slots = [(1, 7, 4026531836, 1 << 20), (2, 8, 4026531836, -5), (1, 9, 1, (1 << 63) - 1)]
    body = b"".join(struct.pack("<IiIIQQq", st, pid, ns, 0, 0, 1, u) for st, pid, ns, u in slots)
    put("cuda_region", "v2-whole.bin", head + body + b"\0" * (v2_size - len(head) - len(body)))


for fn in (extender, extender_route, kube_json, kube_protobuf, kube_watch, kubeconfig, dp_config, podresources,
           gpumem_ledger, sim_trace, cuda_config, cuda_region):
    fn()
