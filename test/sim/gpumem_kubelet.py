#!/usr/bin/python3
"""gpumem_kubelet -- the kubelet's side of a gpu-mem Allocate, for tests and benches.

Plays what the 1.20 kubelet does around the device plugin's Allocate
(/work/shared/research/kubelet-allocate-1.20.md, sections 1-6):

  * a pod manager: pods are added one at a time, then admitted; admission
    calls Allocate once per container with a gpu-mem limit, init containers
    first, then app containers, in spec order, with exactly `limit` unit IDs
    (init containers' IDs are reused by later containers first);
  * the PodResources API v1 List on <dir>/pod-resources.sock, served from
    the pod manager: name, namespace, app containers with their device IDs
    (never init containers, no UID); a container being allocated has none;
  * a rejected pod (Allocate error) stays in the pod manager without
    devices, and its API status becomes Failed (optionally later: the status
    manager is asynchronous);
  * restart(): the pod manager is emptied; with the checkpoint kept, pods
    come back with their devices and no RPC; without it, re-admission calls
    Allocate again.

Uses kubelet_sim.KubeletSim for the Device Plugin RPCs and the fake API
server's store for pod objects.
"""

import atexit
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.normpath(os.path.join(HERE, "..", "..", "proto", "podresources.proto"))
RESOURCE = "aliyun.com/gpu-mem"


def _load_podresources():
    out = tempfile.mkdtemp(prefix="gp-prstubs-")
    atexit.register(shutil.rmtree, out, True)
    from grpc_tools import protoc
    rc = protoc.main(["grpc_tools.protoc", "-I" + os.path.dirname(PROTO),
                      "--python_out=" + out, PROTO])
    if rc != 0:
        raise RuntimeError("protoc failed on %s" % PROTO)
    sys.path.insert(0, out)
    try:
        import podresources_pb2  # noqa: E402
    finally:
        sys.path.remove(out)
    return podresources_pb2


prpb = _load_podresources()


class AdmissionError(Exception):
    """Allocate failed: the kubelet rejects the pod (UnexpectedAdmissionError)."""

    def __init__(self, pod, container, err):
        self.pod = pod
        self.container = container
        self.code = err.code()
        self.details = err.details()
        super().__init__("pod %s container %s: %s: %s" % (pod, container, self.code, self.details))


def gpu_mem_limit(container):
    v = ((container.get("resources") or {}).get("limits") or {}).get(RESOURCE)
    return int(v) if v is not None else 0


class PodEntry:
    def __init__(self, obj):
        self.obj = obj
        self.ns = obj["metadata"].get("namespace", "default")
        self.name = obj["metadata"]["name"]
        self.devices = {}       # app container -> unit IDs
        self.init_devices = {}  # init container -> unit IDs (not in List)
        self.rejected = False

    @property
    def key(self):
        return (self.ns, self.name)


class Kubelet:
    def __init__(self, sim, api, directory, resource=RESOURCE):
        self.sim = sim
        self.api = api
        self.resource = resource
        self.lock = threading.RLock()
        self.pods = {}          # (ns, name) -> PodEntry, in insertion order
        self.list_calls = 0
        self.rpc_ms = []        # duration of every successful Allocate RPC (benches)
        # A sub-directory: a kubelet restart (kubelet_sim.restart) wipes the plugin dir's files.
        os.makedirs(os.path.join(directory, "pod-resources"), exist_ok=True)
        self.socket = os.path.join(directory, "pod-resources", "kubelet.sock")
        handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
            "List": grpc.unary_unary_rpc_method_handler(
                self._list, request_deserializer=prpb.ListPodResourcesRequest.FromString,
                response_serializer=prpb.ListPodResourcesResponse.SerializeToString)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port("unix:" + self.socket)
        self.server.start()

    def stop(self):
        self.server.stop(0)

    # -- PodResources ----------------------------------------------------------
    def _list(self, request, context):
        with self.lock:
            self.list_calls += 1
            resp = prpb.ListPodResourcesResponse()
            for p in self.pods.values():
                pr = resp.pod_resources.add(name=p.name, namespace=p.ns)
                for c in p.obj["spec"].get("containers", []):
                    cr = pr.containers.add(name=c["name"])
                    ids = p.devices.get(c["name"])
                    if ids:
                        cr.devices.add(resource_name=self.resource, device_ids=list(ids))
            return resp

    # -- the pod manager --------------------------------------------------------
    def pod_object(self, ns, name):
        return self.api.store.get("pods", ns, name)

    def add(self, ns, name, obj=None):
        """podManager.AddPod: the pod becomes visible in List (no devices yet)."""
        obj = obj or self.pod_object(ns, name)
        with self.lock:
            entry = PodEntry(obj)
            self.pods[entry.key] = entry
            return entry

    def allocated(self):
        with self.lock:
            used = set()
            for p in self.pods.values():
                for ids in list(p.devices.values()) + list(p.init_devices.values()):
                    used.update(ids)
            return used

    def free_units(self):
        used = self.allocated()
        return [d.ID for d in self.sim.devices(self.resource)
                if d.health == "Healthy" and d.ID not in used]

    def admit(self, ns, name, obj=None, reject_status_delay=0.0, timeout=10):
        """Adds the pod (unless added already) and runs its admission; returns
        [(container, init, ContainerAllocateResponse)]. AdmissionError on a failed Allocate."""
        with self.lock:
            entry = self.pods.get((ns, name))
        if entry is None:
            entry = self.add(ns, name, obj)
        spec = entry.obj["spec"]
        order = [(c, True) for c in spec.get("initContainers", [])] + \
                [(c, False) for c in spec.get("containers", [])]
        reuse = []
        results = []
        for c, init in order:
            need = gpu_mem_limit(c)
            if need == 0:
                continue
            with self.lock:
                ids = reuse[:need]
                free = [u for u in self.free_units() if u not in ids]
                ids += free[:need - len(ids)]
            if len(ids) < need:
                raise AssertionError("the kubelet model has only %d free units, %s/%s needs %d"
                                     % (len(ids), ns, name, need))
            try:
                t0 = time.perf_counter()
                resp = self.sim.allocate(self.resource, ids, timeout=timeout)
                self.rpc_ms.append((time.perf_counter() - t0) * 1000)
            except grpc.RpcError as e:
                self.reject(entry, reject_status_delay)
                raise AdmissionError("%s/%s" % (ns, name), c["name"], e)
            with self.lock:
                if init:
                    entry.init_devices[c["name"]] = ids
                    reuse = list(ids)
                else:
                    entry.devices[c["name"]] = ids
                    reuse = [u for u in reuse if u not in ids]
            results.append((c["name"], init, resp))
        return results

    def reject(self, entry, delay=0.0):
        with self.lock:
            entry.rejected = True

        def set_failed():
            def mutate(pod):
                pod.setdefault("status", {})["phase"] = "Failed"
                pod["status"]["reason"] = "UnexpectedAdmissionError"
                return pod
            try:
                self.api.store.update("pods", entry.ns, entry.name, mutate)
            except Exception:
                pass
        if delay > 0:
            threading.Timer(delay, set_failed).start()
        else:
            set_failed()

    def hold(self, ns, name, devices):
        """A pod that already holds devices, with no Allocate and no API object (for readers of
        List, such as the metrics endpoint). devices: {container: [IDs of self.resource]}."""
        obj = {"metadata": {"name": name, "namespace": ns},
               "spec": {"containers": [{"name": c} for c in devices]}}
        with self.lock:
            entry = PodEntry(obj)
            entry.devices = {c: list(ids) for c, ids in devices.items()}
            self.pods[entry.key] = entry
            return entry

    def remove(self, ns, name):
        with self.lock:
            self.pods.pop((ns, name), None)

    def restart(self, keep_checkpoint=True):
        """The kubelet restarts: its pod manager is rebuilt by re-admission. With the checkpoint,
        every pod gets its devices back without an RPC (returned: []); without it, the caller
        re-admits (admit()) the pods it lists in the returned order."""
        with self.lock:
            old = list(self.pods.values())
            self.pods = {}
        self.sim.restart()
        if keep_checkpoint:
            with self.lock:
                for p in old:
                    self.pods[p.key] = p
            return []
        return [(p.ns, p.name) for p in old if not p.rejected]


def envs(resp):
    return dict(resp.envs)


def make_pod(name, units=None, idx=None, node="node1", ns="default", containers=None,
             init_containers=None, assume_time=None, pod_units=None, annotations=True,
             uid=None):
    """A bound pod as the extender leaves it: spec.nodeName plus gpushare's annotations.
    containers: [(name, units)]; units alone means one container "main"."""
    if containers is None:
        containers = [("main", units)]
    init_containers = init_containers or []

    def ctr(n, u):
        c = {"name": n, "image": "busybox"}
        if u:
            c["resources"] = {"limits": {RESOURCE: str(u)}}
        return c
    total = max(sum(u for _, u in containers), max([u for _, u in init_containers] or [0]))
    meta = {"name": name, "namespace": ns}
    if uid:
        meta["uid"] = uid
    if annotations and idx is not None:
        meta["annotations"] = {
            "ALIYUN_COM_GPU_MEM_IDX": str(idx),
            "ALIYUN_COM_GPU_MEM_POD": str(pod_units if pod_units is not None else total),
            "ALIYUN_COM_GPU_MEM_DEV": "16",
            "ALIYUN_COM_GPU_MEM_ASSIGNED": "false",
            "ALIYUN_COM_GPU_MEM_ASSUME_TIME": str(assume_time or time.time_ns()),
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "containers": [ctr(n, u) for n, u in containers],
                     "initContainers": [ctr(n, u) for n, u in init_containers]},
            "status": {"phase": "Pending"}}
