#!/usr/bin/python3
"""kubelet_sim -- plays the kubelet's side of the Device Plugin API v1beta1.

Library (used by test/integration) and CLI (used by scripts/demo.sh).

What it does, in the kubelet's order (research nvidia-device-plugin.md section 1.4):
  * serves v1beta1.Registration on <dir>/kubelet.sock;
  * Register: rejects a version other than "v1beta1" and an invalid extended
    resource name; then, synchronously inside Register, dials <dir>/<endpoint>
    (authority "localhost", 10 s) and calls GetDevicePluginOptions; only then
    does Register return;
  * opens one ListAndWatch stream per resource and records every snapshot with
    a timestamp (a re-registration of the same resource replaces the stream);
  * GetPreferredAllocation / Allocate (one ContainerAllocateRequest per call) /
    PreStartContainer on request;
  * restart(): stop serving, delete every file of the socket dir except
    kubelet_internal_checkpoint (sub-directories are kept), re-create
    kubelet.sock and wait until the known plugins register again;
  * start(listen_delay=s) / restart(down=s, listen_delay=s): kubelet.sock is
    created (bound) `listen_delay` seconds before it listens, as a starting
    kubelet may be seen: connects in between are refused. The gRPC server
    then listens on a path outside the directory and a relay listening on
    kubelet.sock forwards each connection to it; `listening_at` is the
    time.monotonic() of listen().

Python stubs are generated from proto/api.proto at import time into a
temporary directory (python3-grpc-tools); nothing generated is committed.

Needs /usr/bin/python3 with Debian's python3-grpcio, python3-grpc-tools,
python3-protobuf.
"""

import argparse
import atexit
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PROTO = os.path.normpath(os.path.join(HERE, "..", "..", "proto", "api.proto"))

KUBELET_SOCKET = "kubelet.sock"
CHECKPOINT = "kubelet_internal_checkpoint"
VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


def _load_stubs(proto=None):
    """Generates api_pb2 / api_pb2_grpc from the proto into a temp dir and imports them."""
    proto = os.path.abspath(proto or os.environ.get("GP_API_PROTO", DEFAULT_PROTO))
    out = tempfile.mkdtemp(prefix="gp-pystubs-")
    atexit.register(shutil.rmtree, out, True)
    from grpc_tools import protoc  # python3-grpc-tools
    rc = protoc.main(["grpc_tools.protoc", "-I" + os.path.dirname(proto),
                      "--python_out=" + out, "--grpc_python_out=" + out, proto])
    if rc != 0:
        raise RuntimeError("protoc failed (%d) on %s" % (rc, proto))
    sys.path.insert(0, out)
    try:
        import api_pb2  # noqa: E402
        import api_pb2_grpc  # noqa: E402
    finally:
        sys.path.remove(out)
    return api_pb2, api_pb2_grpc


pb, pb_grpc = _load_stubs()

# Extended resource name, as the kubelet checks it (v1helper.IsExtendedResourceName):
# a qualified name "<DNS-1123 subdomain>/<name>" outside the kubernetes.io
# namespace, name part <= 63 chars, without "requests." prefix.
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def valid_extended_resource_name(name):
    if name.count("/") != 1:
        return False
    prefix, short = name.split("/")
    if not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
        return False
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io") or name.startswith("requests."):
        return False
    return 0 < len(short) <= 63 and bool(_NAME.match(short))


class Registration:
    """One accepted Register call."""

    def __init__(self, request, options, t):
        self.version = request.version
        self.endpoint = request.endpoint
        self.resource_name = request.resource_name
        self.request_options = request.options      # what the plugin sent in Register
        self.options = options                      # what GetDevicePluginOptions answered
        self.time = t

    def __repr__(self):
        return "Registration(%s on %s, %s)" % (self.resource_name, self.endpoint, self.version)


class Snapshot:
    def __init__(self, t, devices):
        self.time = t
        self.devices = list(devices)

    @property
    def ids(self):
        return [d.ID for d in self.devices]

    @property
    def health(self):
        return {d.ID: d.health for d in self.devices}

    def numa(self):
        return {d.ID: [n.ID for n in d.topology.nodes] for d in self.devices}


class Endpoint:
    """The kubelet's connection to one registered plugin (one resource)."""

    def __init__(self, sim, reg):
        self.sim = sim
        self.registration = reg
        self.resource = reg.resource_name
        self.path = os.path.join(sim.dir, reg.endpoint)
        self.channel = grpc.insecure_channel(
            "unix:" + self.path,
            options=[("grpc.default_authority", "localhost"),
                     ("grpc.max_receive_message_length", 16 << 20)])
        self.stub = pb_grpc.DevicePluginStub(self.channel)
        self.snapshots = []
        self.stream_done = False
        self.stream_code = None
        self._call = None
        self._thread = None

    def options(self, timeout=10):
        grpc.channel_ready_future(self.channel).result(timeout=timeout)
        return self.stub.GetDevicePluginOptions(pb.Empty(), timeout=timeout)

    def start_stream(self):
        self._call = self.stub.ListAndWatch(pb.Empty())
        self._thread = threading.Thread(target=self._watch, name="ListAndWatch " + self.resource,
                                        daemon=True)
        self._thread.start()

    def _watch(self):
        code = grpc.StatusCode.OK
        try:
            for resp in self._call:
                with self.sim._cond:
                    self.snapshots.append(Snapshot(time.monotonic(), resp.devices))
                    self.sim._cond.notify_all()
        except grpc.RpcError as e:
            code = e.code()
        with self.sim._cond:
            self.stream_done = True
            self.stream_code = code
            self.sim._cond.notify_all()

    def close(self):
        if self._call is not None:
            self._call.cancel()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.channel.close()


class _RegistrationServicer(pb_grpc.RegistrationServicer):
    def __init__(self, sim):
        self.sim = sim

    def Register(self, request, context):
        return self.sim._register(request, context)


class KubeletSim:
    """A kubelet for one socket directory. Thread-safe; use as a context manager."""

    def __init__(self, directory, register_timeout=10):
        self.dir = os.path.abspath(directory)
        self.socket = os.path.join(self.dir, KUBELET_SOCKET)
        self.register_timeout = register_timeout
        self.registrations = []          # every accepted Register, in order
        self.rejected = []               # (request, reason)
        self.endpoints = {}              # resource -> current Endpoint
        self.old_endpoints = []
        self._cond = threading.Condition()
        self._server = None
        self._relay = None               # (listening socket, hidden dir, open sockets)
        self.listening_at = None

    # -- server ------------------------------------------------------------
    def start(self, listen_delay=None):
        os.makedirs(self.dir, exist_ok=True)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_RegistrationServicer_to_server(_RegistrationServicer(self), self._server)
        path = self.socket
        if listen_delay is not None:
            hidden = tempfile.mkdtemp(prefix="kubelet-sim-")
            path = os.path.join(hidden, KUBELET_SOCKET)
            lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                os.unlink(self.socket)  # a stopped sim's file, as gRPC replaces it
            except FileNotFoundError:
                pass
            lsock.bind(self.socket)  # the file exists; connects are refused until listen()
            self._relay = (lsock, hidden, [])
        if self._server.add_insecure_port("unix:" + path) == 0:
            raise RuntimeError("cannot listen on " + path)
        self._server.start()
        if listen_delay is None:
            self.listening_at = time.monotonic()
        else:
            threading.Thread(target=self._relay_run, args=(self._relay, listen_delay, path),
                             daemon=True).start()
        return self

    def _relay_run(self, relay, delay, target):
        lsock, _, conns = relay
        time.sleep(delay)
        try:
            lsock.listen(64)
        except OSError:
            return  # stopped meanwhile
        self.listening_at = time.monotonic()
        while True:
            try:
                client, _ = lsock.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(target)
            except OSError:
                client.close()
                continue
            conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_copy, args=(a, b), daemon=True).start()

    def stop(self):
        if self._relay is not None:
            lsock, hidden, conns = self._relay
            self._relay = None
            for sk in [lsock] + conns:
                try:
                    sk.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sk.close()
            shutil.rmtree(hidden, ignore_errors=True)
        if self._server is not None:
            self._server.stop(0).wait(5)
            self._server = None
        with self._cond:
            eps = list(self.endpoints.values()) + self.old_endpoints
            self.endpoints = {}
            self.old_endpoints = []
        for ep in eps:
            ep.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def restart(self, wait=True, timeout=5, down=0, listen_delay=None, remove_dir=False):
        """Kubelet restart: stop, clean the socket dir, serve again, wait for re-registration.
        `down`: seconds without a kubelet.sock; listen_delay: see start(). remove_dir: the
        whole directory is removed instead (a kubelet on a fresh --root-dir or tmpfs, an
        operator's rm -rf); start() creates it again just before kubelet.sock."""
        with self._cond:
            known = set(self.endpoints)
            before = len(self.registrations)
        self.stop()
        if remove_dir:
            # A plugin re-creates its socket as soon as it sees it deleted, which can
            # land between rm -rf's unlinks and its rmdir (ENOTEMPTY): rm again, as an
            # operator would.
            for attempt in range(100):
                try:
                    shutil.rmtree(self.dir)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if attempt == 99:
                        raise
                    time.sleep(0.001)
        else:
            cleanup_plugin_dir(self.dir)
        if down:
            time.sleep(down)
        self.start(listen_delay)
        if wait and known:
            def again():
                got = {r.resource_name for r in self.registrations[before:]}
                return known <= got
            self.wait_for(again, timeout, "re-registration of %s" % sorted(known))

    def _register(self, request, context):
        if request.version != VERSION:
            return self._reject(request, context, "Unsupported version %r (supported: [%s])"
                                % (request.version, VERSION))
        if not valid_extended_resource_name(request.resource_name):
            return self._reject(request, context, "invalid Extended Resource name: %r"
                                % request.resource_name)
        if not request.endpoint or "/" in request.endpoint:
            return self._reject(request, context, "invalid endpoint %r" % request.endpoint)
        reg = Registration(request, None, time.monotonic())
        ep = Endpoint(self, reg)
        try:
            reg.options = ep.options(self.register_timeout)
        except (grpc.RpcError, grpc.FutureTimeoutError) as e:
            ep.channel.close()
            return self._reject(request, context, "failed to dial device plugin / "
                                "GetDevicePluginOptions: %s" % e)
        with self._cond:
            old = self.endpoints.get(reg.resource_name)
            self.endpoints[reg.resource_name] = ep
            self.registrations.append(reg)
            self._cond.notify_all()
        if old is not None:
            old.close()
        ep.start_stream()
        return pb.Empty()

    def _reject(self, request, context, reason):
        with self._cond:
            self.rejected.append((request, reason))
            self._cond.notify_all()
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, reason)

    # -- waiting -----------------------------------------------------------
    def wait_for(self, predicate, timeout=5, what=None):
        """Polls predicate() (re-evaluated on every event) until true; raises TimeoutError."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                v = predicate()
                if v:
                    return v
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("timed out after %.1fs waiting for %s"
                                       % (timeout, what or getattr(predicate, "__name__", "condition")))
                self._cond.wait(min(left, 0.05))

    def wait_registered(self, resource="nvidia.com/gpu", timeout=5, count=1):
        return self.wait_for(lambda: len(self.registrations_for(resource)) >= count and
                             self.endpoints.get(resource) is not None and
                             self.endpoints[resource].snapshots and self.endpoints[resource],
                             timeout, "registration #%d of %s" % (count, resource))

    def wait_snapshot(self, resource, predicate, timeout=5, what=None):
        """Waits for a snapshot (the latest) of resource for which predicate(snapshot) holds."""
        def ok():
            ep = self.endpoints.get(resource)
            if ep and ep.snapshots and predicate(ep.snapshots[-1]):
                return ep.snapshots[-1]
            return None
        return self.wait_for(ok, timeout, what or "snapshot of %s" % resource)

    # -- queries -----------------------------------------------------------
    def registrations_for(self, resource):
        return [r for r in self.registrations if r.resource_name == resource]

    def resources(self):
        return sorted(self.endpoints)

    def endpoint(self, resource="nvidia.com/gpu"):
        ep = self.endpoints.get(resource)
        if ep is None:
            raise KeyError("%s is not registered (have %s)" % (resource, self.resources()))
        return ep

    def snapshots(self, resource="nvidia.com/gpu"):
        return list(self.endpoint(resource).snapshots)

    def devices(self, resource="nvidia.com/gpu"):
        snaps = self.endpoint(resource).snapshots
        return list(snaps[-1].devices) if snaps else []

    # -- RPCs as the kubelet makes them ------------------------------------
    def get_preferred_allocation(self, resource, available, must_include=(), size=1, timeout=5):
        req = pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=list(available),
                                                   must_include_deviceIDs=list(must_include),
                                                   allocation_size=size)])
        resp = self.endpoint(resource).stub.GetPreferredAllocation(req, timeout=timeout)
        if not resp.container_responses:
            return []
        return list(resp.container_responses[0].deviceIDs)

    def allocate(self, resource, ids, timeout=5):
        """One ContainerAllocateRequest per call; returns that container's response."""
        req = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=list(ids))])
        resp = self.endpoint(resource).stub.Allocate(req, timeout=timeout)
        if len(resp.container_responses) != 1:
            raise AssertionError("Allocate for 1 container returned %d responses"
                                 % len(resp.container_responses))
        return resp.container_responses[0]

    def allocate_raw(self, resource, request, timeout=5):
        return self.endpoint(resource).stub.Allocate(request, timeout=timeout)

    def pre_start(self, resource, ids, timeout=5):
        return self.endpoint(resource).stub.PreStartContainer(
            pb.PreStartContainerRequest(devices_ids=list(ids)), timeout=timeout)


def _copy(src, dst):
    """One direction of a relayed connection."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def cleanup_plugin_dir(d):
    """What a starting kubelet does (CleanupPluginDirectory): remove every file, keep the
    checkpoint and sub-directories."""
    for name in os.listdir(d):
        p = os.path.join(d, name)
        if name == CHECKPOINT or (os.path.isdir(p) and not os.path.islink(p)):
            continue
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


# -- readable output (CLI / demo) ------------------------------------------
def format_registration(reg):
    o = reg.options
    return ("Register  resource=%s  endpoint=%s  version=%s\n"
            "          options: get_preferred_allocation_available=%s pre_start_required=%s"
            % (reg.resource_name, reg.endpoint, reg.version,
               str(o.get_preferred_allocation_available).lower(), str(o.pre_start_required).lower()))


def format_devices(devices):
    lines = ["ListAndWatch: %d device(s)" % len(devices)]
    for d in devices:
        numa = ",".join(str(n.ID) for n in d.topology.nodes) or "-"
        lines.append("  %-50s %-9s NUMA %s" % (d.ID, d.health, numa))
    return "\n".join(lines)


def format_allocate(ids, r):
    lines = ["Allocate %s" % ", ".join(ids)]
    for k in sorted(r.envs):
        lines.append("  env         %s=%s" % (k, r.envs[k]))
    for m in r.mounts:
        lines.append("  mount       %s -> %s%s" % (m.host_path, m.container_path,
                                                   " (ro)" if m.read_only else ""))
    for d in r.devices:
        lines.append("  device      %s -> %s (%s)" % (d.host_path, d.container_path, d.permissions))
    for k in sorted(r.annotations):
        lines.append("  annotation  %s=%s" % (k, r.annotations[k]))
    for c in r.cdi_devices:
        lines.append("  cdi         %s" % c.name)
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description="kubelet simulator (Device Plugin API v1beta1)")
    ap.add_argument("--dir", required=True, help="socket directory (kubelet.sock is served here)")
    ap.add_argument("--resource", default="nvidia.com/gpu")
    ap.add_argument("--print", action="store_true",
                    help="wait for the plugin, print registration, devices and one Allocate, exit")
    ap.add_argument("--allocate", type=int, default=2, help="devices to allocate with --print")
    ap.add_argument("--timeout", type=float, default=15, help="seconds to wait for registration")
    a = ap.parse_args(argv)
    sim = KubeletSim(a.dir).start()
    try:
        print("kubelet simulator listening on %s" % sim.socket, flush=True)
        if not a.print:
            while True:
                time.sleep(3600)
        try:
            ep = sim.wait_registered(a.resource, timeout=a.timeout)
        except TimeoutError as e:
            print("error: %s" % e, file=sys.stderr)
            for req, why in sim.rejected:
                print("rejected Register(%s): %s" % (req.resource_name, why), file=sys.stderr)
            return 1
        print(format_registration(sim.registrations_for(a.resource)[-1]))
        devs = sim.devices(a.resource)
        print(format_devices(devs))
        ids = [d.ID for d in devs if d.health == HEALTHY]
        if not ids:
            print("error: no healthy device to allocate", file=sys.stderr)
            return 1
        n = max(1, min(a.allocate, len(ids)))
        o = ep.registration.options
        if o.get_preferred_allocation_available:
            pick = sim.get_preferred_allocation(a.resource, ids, [], n)
            print("GetPreferredAllocation size=%d -> %s" % (n, ", ".join(pick)))
            ids = pick or ids[:n]
        else:
            ids = ids[:n]
        print(format_allocate(ids, sim.allocate(a.resource, ids)), flush=True)
        return 0
    except grpc.RpcError as e:
        print("error: RPC failed: %s: %s" % (e.code().name, e.details()), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        sim.stop()


if __name__ == "__main__":
    sys.exit(main())
