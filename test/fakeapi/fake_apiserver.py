#!/usr/bin/python3
"""A fake Kubernetes API server for gpupool's tests (Debian python3 only).

Serves the core/v1 subset gpupool uses -- nodes, pods, configmaps (any
core resource name works the same way) -- over HTTP or HTTPS, records every
request, and injects scripted faults. See test/fakeapi/README.md.

Run standalone:
    fake_apiserver.py [--port 0] [--fixture f.json] [--tls-dir DIR]
                      [--token T]... [--client-cert-auth] [--ready-file F]
It prints one JSON line {"url": ..., "port": ...} on stdout when ready.

Or in-process:
    srv = FakeApiServer(fixture=..., tls_dir=..., tokens=[...]).start()
    ... srv.url ... srv.requests() ... srv.add_fault(...)
    srv.stop()
"""

import argparse
import base64
import collections
import copy
import datetime
import http.server
import json
import os
import re
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k8s_protobuf  # noqa: E402  (next to this file)

CLUSTER_SCOPED = {"nodes", "namespaces", "persistentvolumes", "resourceslices", "deviceclasses"}
KIND_OF = {"nodes": "Node", "pods": "Pod", "configmaps": "ConfigMap",
           "namespaces": "Namespace", "events": "Event", "services": "Service",
           "secrets": "Secret", "leases": "Lease", "resourceslices": "ResourceSlice",
           "resourceclaims": "ResourceClaim", "deviceclasses": "DeviceClass"}
RESOURCE_OF_KIND = {v: k for k, v in KIND_OF.items()}


def kind_of(resource):
    return KIND_OF.get(resource, resource[:1].upper() + resource[1:-1])


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_object(code, reason, message, details=None):
    st = {"kind": "Status", "apiVersion": "v1", "metadata": {},
          "status": "Failure" if code >= 300 else "Success",
          "message": message, "reason": reason, "code": code}
    if details:
        st["details"] = details
    return st


class ApiError(Exception):
    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.status = status_object(code, reason, message, details)


# ---------------------------------------------------------------- certificates

def make_certs(directory, hosts=("127.0.0.1", "localhost", "::1"), client_cn="gpupool-test"):
    """Creates ca.{crt,key}, server.{crt,key}, client.{crt,key} and a second
    unrelated CA other-ca.crt with `openssl`. Returns the directory."""
    os.makedirs(directory, exist_ok=True)

    def run(*args):
        subprocess.run(["openssl"] + list(args), check=True, cwd=directory,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "30",
        "-subj", "/CN=fake-apiserver-ca")
    run("req", "-x509", *ec, "-keyout", "other-ca.key", "-out", "other-ca.crt", "-days", "30",
        "-subj", "/CN=some-other-ca")
    san = ",".join(("IP:" if re.match(r"^[0-9.:]+$", h) else "DNS:") + h for h in hosts)
    run("req", "-x509", *ec, "-keyout", "server.key", "-out", "server.crt", "-days", "30",
        "-subj", "/CN=fake-apiserver", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-addext", "subjectAltName=" + san, "-addext", "basicConstraints=CA:FALSE")
    run("req", "-x509", *ec, "-keyout", "client.key", "-out", "client.crt", "-days", "30",
        "-subj", "/CN=" + client_cn, "-CA", "ca.crt", "-CAkey", "ca.key",
        "-addext", "basicConstraints=CA:FALSE", "-addext", "extendedKeyUsage=clientAuth")
    return directory


# ---------------------------------------------------------------- patches

def merge_patch(target, patch):
    """RFC 7386 JSON merge patch; also the strategic merge patch for the maps
    gpupool patches (annotations, labels, capacity, allocatable)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):     # strategic-merge directives: not needed here
            continue
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", "json patch: bad path %r" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(doc, ops):
    """RFC 6902 subset: add, replace, remove, test."""
    doc = copy.deepcopy(doc)
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "json patch must be a list of operations")
    for op in ops:
        parts = _pointer(op.get("path", ""))
        if not parts:
            raise ApiError(422, "Invalid", "json patch: cannot patch the root")
        parent = doc
        for p in parts[:-1]:
            try:
                parent = parent[int(p)] if isinstance(parent, list) else parent[p]
            except (KeyError, IndexError, ValueError):
                raise ApiError(422, "Invalid", "json patch: path %s not found" % op["path"])
        last = parts[-1]
        kind = op.get("op")
        if kind in ("add", "replace"):
            if isinstance(parent, list):
                idx = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(idx, op.get("value"))
                else:
                    parent[idx] = op.get("value")
            else:
                if kind == "replace" and last not in parent:
                    raise ApiError(422, "Invalid", "json patch: replace of missing %s" % op["path"])
                parent[last] = op.get("value")
        elif kind == "remove":
            try:
                del parent[int(last) if isinstance(parent, list) else last]
            except (KeyError, IndexError, ValueError):
                raise ApiError(422, "Invalid", "json patch: remove of missing %s" % op["path"])
        elif kind == "test":
            cur = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if cur != op.get("value"):
                raise ApiError(422, "Invalid", "json patch: test failed at %s" % op["path"])
        else:
            raise ApiError(422, "Invalid", "json patch: unsupported op %r" % kind)
    return doc


# ---------------------------------------------------------------- selectors

def _field(obj, dotted):
    cur = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    return "" if cur is None else str(cur)


def parse_selector(text):
    """[(key, op, value)] for 'a=b,c!=d,e,!f' (op: '=', '!=', 'exists', '!exists')."""
    terms = []
    for raw in filter(None, (t.strip() for t in (text or "").split(","))):
        m = re.match(r"^([^=!]+?)\s*(==|=|!=)\s*(.*)$", raw)
        if m:
            terms.append((m.group(1), "!=" if m.group(2) == "!=" else "=", m.group(3)))
        elif raw.startswith("!"):
            terms.append((raw[1:], "!exists", None))
        else:
            terms.append((raw, "exists", None))
    return terms


def field_matches(obj, terms):
    for key, op, value in terms:
        actual = _field(obj, key)
        if (op == "=" and actual != value) or (op == "!=" and actual == value):
            return False
    return True


def label_matches(obj, terms):
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for key, op, value in terms:
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "!exists" and key in labels:
            return False
    return True


# ---------------------------------------------------------------- the store

class Store:
    """Objects, resourceVersions and the event history watches replay."""

    def __init__(self, max_history=10000):
        self.lock = threading.Condition()
        self.objects = {}          # (resource, ns, name) -> object
        self.rv = 100
        self.history = collections.deque()   # (rv, type, resource, ns, object)
        self.max_history = max_history
        self.oldest_valid_rv = self.rv        # a watch from rv >= this can be served

    def _bump(self):
        self.rv += 1
        return self.rv

    def _record(self, etype, resource, ns, obj):
        self.history.append((int(obj["metadata"]["resourceVersion"]), etype, resource, ns,
                             copy.deepcopy(obj)))
        while len(self.history) > self.max_history:
            old = self.history.popleft()
            self.oldest_valid_rv = old[0]
        self.lock.notify_all()

    def compact(self):
        with self.lock:
            self.history.clear()
            self.oldest_valid_rv = self.rv
            self.lock.notify_all()

    def create(self, resource, ns, obj, replace=False):
        with self.lock:
            meta = obj.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            name = meta.get("name")
            if not name:
                raise ApiError(422, "Invalid", "%s: metadata.name: Required value" % kind_of(resource))
            if resource in CLUSTER_SCOPED:
                ns = None
                meta.pop("namespace", None)
            else:
                ns = ns or meta.get("namespace") or "default"
                meta["namespace"] = ns
            key = (resource, ns, name)
            existed = key in self.objects
            if existed and not replace:
                raise ApiError(409, "AlreadyExists", '%s "%s" already exists' % (resource, name),
                               {"name": name, "kind": resource})
            obj.setdefault("apiVersion", "v1")
            obj.setdefault("kind", kind_of(resource))
            if existed:
                meta["uid"] = self.objects[key]["metadata"]["uid"]
                meta["creationTimestamp"] = self.objects[key]["metadata"].get("creationTimestamp")
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now_rfc3339())
            meta["resourceVersion"] = str(self._bump())
            self.objects[key] = obj
            self._record("MODIFIED" if existed else "ADDED", resource, ns, obj)
            return copy.deepcopy(obj)

    def get(self, resource, ns, name):
        with self.lock:
            obj = self.objects.get((resource, None if resource in CLUSTER_SCOPED else ns, name))
            if obj is None:
                raise ApiError(404, "NotFound", '%s "%s" not found' % (resource, name),
                               {"name": name, "kind": resource})
            return copy.deepcopy(obj)

    def update(self, resource, ns, name, mutate, expected_rv=None):
        """mutate(obj) -> new obj, under the lock; bumps the version."""
        with self.lock:
            key = (resource, None if resource in CLUSTER_SCOPED else ns, name)
            obj = self.objects.get(key)
            if obj is None:
                raise ApiError(404, "NotFound", '%s "%s" not found' % (resource, name),
                               {"name": name, "kind": resource})
            if expected_rv and expected_rv != obj["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict",
                               'Operation cannot be fulfilled on %s "%s": the object has been '
                               'modified; please apply your changes to the latest version and '
                               'try again' % (resource, name), {"name": name, "kind": resource})
            new = mutate(copy.deepcopy(obj))
            meta = new.setdefault("metadata", {})
            for fixed in ("name", "namespace", "uid", "creationTimestamp"):
                if fixed in obj["metadata"]:
                    meta[fixed] = obj["metadata"][fixed]
            meta["resourceVersion"] = str(self._bump())
            self.objects[key] = new
            self._record("MODIFIED", resource, key[1], new)
            return copy.deepcopy(new)

    def delete(self, resource, ns, name):
        with self.lock:
            key = (resource, None if resource in CLUSTER_SCOPED else ns, name)
            obj = self.objects.pop(key, None)
            if obj is None:
                raise ApiError(404, "NotFound", '%s "%s" not found' % (resource, name),
                               {"name": name, "kind": resource})
            obj["metadata"]["resourceVersion"] = str(self._bump())
            self._record("DELETED", resource, key[1], obj)
            return copy.deepcopy(obj)

    def select(self, resource, ns, fields, labels):
        """Sorted [(key, obj)] matching; caller holds the lock."""
        out = []
        for key in sorted(k for k in self.objects if k[0] == resource):
            if ns and key[1] != ns:
                continue
            obj = self.objects[key]
            if field_matches(obj, fields) and label_matches(obj, labels):
                out.append((key, obj))
        return out


# ---------------------------------------------------------------- the server

class Fault:
    """A scripted misbehaviour for requests matching method + path regex."""

    def __init__(self, spec):
        self.method = spec.get("method", "*").upper()
        self.path = re.compile(spec.get("path", ".*"))
        self.query = re.compile(spec.get("query", ""))   # searched in the raw query string
        self.watch = spec.get("watch")       # None: any; True/False: only (non-)watch requests
        # searched in the request body: e.g. one replica's Lease writes (its holderIdentity)
        self.body_match = re.compile(spec["body_match"]) if spec.get("body_match") else None
        self.count = int(spec.get("count", 1))   # -1: forever
        # for_s: every matching request for this many seconds from now, whatever count says
        # (action "close" = the API server gone for a while)
        self.until = time.monotonic() + float(spec["for_s"]) if "for_s" in spec else None
        if self.until is not None:
            self.count = -1
        self.action = spec.get("action", "status")
        self.status = int(spec.get("status", 500))
        self.reason = spec.get("reason")
        self.message = spec.get("message")
        self.delay_ms = int(spec.get("delay_ms", 0))
        self.retry_after = spec.get("retry_after")
        self.body = spec.get("body")           # str, or bytes for action "malformed"
        self.content_type = spec.get("content_type", "application/json")   # "malformed"
        self.hits = 0
        self.spec = spec

    def matches(self, method, path, raw_query, is_watch, body=""):
        if self.until is not None and time.monotonic() >= self.until:
            return False
        return (self.count != 0 and self.method in ("*", method) and self.path.search(path)
                and self.query.search(raw_query)
                and (self.watch is None or bool(self.watch) == is_watch)
                and (self.body_match is None or self.body_match.search(body)))


class Watcher:
    def __init__(self):
        self.drop = None        # None, "abrupt" or "clean"
        self.bookmark = False


class FakeApiServer:
    def __init__(self, fixture=None, host="127.0.0.1", port=0, tls_dir=None, tokens=(),
                 client_cert_auth=False, max_history=10000, chunk_bytes=0):
        self.store = Store(max_history)
        self.host = host
        self.port = port
        self.tls_dir = tls_dir
        self.tokens = set(tokens)
        self.client_cert_auth = client_cert_auth
        # >0: watch events written in pieces of this size, LIST answers
        # chunked in pieces of 1, 2, ... chunk_bytes bytes, round and round
        self.chunk_bytes = chunk_bytes
        self.lock = threading.Lock()
        self.recorded = []
        self.faults = []
        # Like a 1.20 apiserver with its watch cache on: resourceVersion=0
        # without a continue token is answered whole, ignoring limit. False:
        # such a list pages from "etcd" like any other.
        self.watch_cache = True
        # Like an apiserver: LISTs of nodes, pods and configmaps (and error
        # Statuses) in protobuf when the Accept header asks for it
        # (k8s_protobuf.py). False: JSON whatever the client asks.
        self.protobuf = True
        # Like a 1.20 apiserver: a Binding's metadata.uid/resourceVersion are
        # not checked. True: as from 1.23 (kubernetes PR 105913), a mismatch
        # is a 409 "Precondition failed".
        self.binding_preconditions = False
        # Like a 1.36 apiserver (DRAConsumableCapacity beta, on): a
        # ResourceSlice device keeps allowMultipleAllocations and its
        # capacities' requestPolicy. False: like a server with the gate off,
        # which drops both from what it stores, without an error.
        self.consumable_capacity = True
        self.watchers = set()
        self.connections = 0
        self.stopping = threading.Event()
        self.httpd = None
        if fixture:
            self.load_fixture(fixture)

    # -- fixtures and objects
    def load_fixture(self, fixture):
        data = fixture
        if isinstance(fixture, str):
            with open(fixture) as f:
                data = json.load(f)
        if "items" in data:
            for item in data["items"]:
                self.put_object(RESOURCE_OF_KIND.get(item.get("kind"), (item.get("kind") or "").lower() + "s"), item)
        else:
            for resource, items in data.items():
                for item in items:
                    self.put_object(resource, item)

    def put_object(self, resource, obj):
        ns = (obj.get("metadata") or {}).get("namespace")
        return self.store.create(resource, ns, copy.deepcopy(obj), replace=True)

    # -- control, in-process
    def requests(self):
        with self.lock:
            return copy.deepcopy(self.recorded)

    def clear_requests(self):
        with self.lock:
            self.recorded.clear()

    def add_fault(self, **spec):
        with self.lock:
            self.faults.append(Fault(spec))

    def clear_faults(self):
        with self.lock:
            self.faults.clear()

    def drop_watches(self, clean=False):
        with self.store.lock:
            for w in self.watchers:
                w.drop = "clean" if clean else "abrupt"
            self.store.lock.notify_all()
            return len(self.watchers)

    def send_bookmarks(self):
        with self.store.lock:
            for w in self.watchers:
                w.bookmark = True
            self.store.lock.notify_all()

    def watch_count(self):
        with self.store.lock:
            return len(self.watchers)

    def take_fault(self, method, path, raw_query, is_watch, body=""):
        with self.lock:
            for f in self.faults:
                if f.matches(method, path, raw_query, is_watch, body):
                    if f.count > 0:
                        f.count -= 1
                    f.hits += 1
                    return f
        return None

    # -- lifecycle
    def _ssl_context(self):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(self.tls_dir, "server.crt"),
                            os.path.join(self.tls_dir, "server.key"))
        ctx.load_verify_locations(os.path.join(self.tls_dir, "ca.crt"))
        ctx.verify_mode = ssl.CERT_OPTIONAL   # the control endpoints need none
        return ctx

    def start(self):
        server = self
        ctx = self._ssl_context() if self.tls_dir else None

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True
            address_family = socket.AF_INET6 if ":" in server.host else socket.AF_INET

            def finish_request(self, request, client_address):
                if ctx is not None:   # handshake in the connection's thread, not accept()'s
                    try:
                        request.settimeout(30)
                        request = ctx.wrap_socket(request, server_side=True)
                        request.settimeout(None)
                    except (ssl.SSLError, OSError):
                        request.close()
                        return
                super().finish_request(request, client_address)

        self.httpd = Server((self.host, self.port), _handler_class(self))
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    @property
    def url(self):
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "%s://%s:%d" % ("https" if self.tls_dir else "http", host, self.port)

    def stop(self):
        self.stopping.set()
        self.drop_watches()
        if self.httpd:
            self.httpd.shutdown()
            self.httpd.server_close()


def _handler_class(server):
    store = server.store

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "fake-apiserver/1"
        # TCP_NODELAY, as kube-apiserver (Go) has: the headers and the body
        # go out in two writes, and with Nagle on the body waits for the
        # client's delayed ACK (40 ms on Linux), which timings would measure.
        disable_nagle_algorithm = True

        def setup(self):
            super().setup()
            with server.lock:
                server.connections += 1
                self.conn_id = server.connections

        def log_message(self, fmt, *args):   # quiet: tests read /_fake/requests
            pass

        # -- plumbing
        def _body(self):
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n > 0 else b""

        def _send_json(self, code, obj, extra_headers=None):
            data = (json.dumps(obj) + "\n").encode()
            self._send_raw(code, data, "application/json", extra_headers)

        def _answering(self, code, ctype):
            """Records the answer before its first byte goes out: a client that
            has read it all may ask /_fake/requests at once."""
            self._status, self._content_type = code, ctype
            if self._entry is not None:
                self._entry["status"], self._entry["content_type"] = code, ctype

        def _send_raw(self, code, data, ctype="application/json", extra_headers=None):
            late = getattr(self, "_late_ms", 0)
            if late:
                self._late_ms = 0
                time.sleep(late / 1000.0)
            self._answering(code, ctype)
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for k, v in (extra_headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _wants_protobuf(self):
            return server.protobuf and k8s_protobuf.CONTENT_TYPE in self.headers.get("Accept", "")

        def _send_status(self, code, status, extra_headers=None):
            """An error Status, in protobuf when the client asked for it."""
            if self._wants_protobuf():
                self._send_raw(code, k8s_protobuf.encode_status(status),
                               k8s_protobuf.CONTENT_TYPE, extra_headers)
            else:
                self._send_json(code, status, extra_headers)

        def _client_cn(self):
            try:
                cert = self.connection.getpeercert()
            except (AttributeError, ValueError):
                return None
            for rdn in (cert or {}).get("subject", ()):
                for k, v in rdn:
                    if k == "commonName":
                        return v
            return None

        def _authenticated(self):
            if not server.tokens and not server.client_cert_auth:
                return True
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Bearer ") and auth[7:] in server.tokens:
                return True
            return server.client_cert_auth and self._client_cn() is not None

        def _dispatch(self, method):
            url = urllib.parse.urlsplit(self.path)
            path = url.path
            query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
            body = self._body()
            self._status = None
            self._content_type = None
            self._entry = None
            self._late_ms = 0
            if path.startswith("/_fake/"):
                return self._control(method, path, query, body)
            is_watch = query.get("watch", [""])[0] in ("1", "true")
            entry = {"method": method, "path": path, "query": {k: v[-1] for k, v in query.items()},
                     "raw_query": url.query, "headers": {k: v for k, v in self.headers.items()},
                     "body": body.decode("utf-8", "replace"), "conn": self.conn_id,
                     "client_cn": self._client_cn(), "time": time.time(), "status": None,
                     "content_type": None}
            self._entry = entry
            with server.lock:
                entry["seq"] = len(server.recorded)
                server.recorded.append(entry)
            try:
                if not self._authenticated():
                    raise ApiError(401, "Unauthorized", "Unauthorized")
                fault = server.take_fault(method, path, url.query, is_watch, entry["body"])
                if fault is not None and self._apply_fault(fault, is_watch):
                    return
                self._api(method, path, query, body, is_watch, fault)
            except ApiError as e:
                self._send_status(e.status["code"], e.status)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                self.close_connection = True
            finally:
                entry["status"] = self._status
                entry["content_type"] = self._content_type

        do_GET = lambda self: self._dispatch("GET")          # noqa: E731
        do_POST = lambda self: self._dispatch("POST")        # noqa: E731
        do_PUT = lambda self: self._dispatch("PUT")          # noqa: E731
        do_PATCH = lambda self: self._dispatch("PATCH")      # noqa: E731
        do_DELETE = lambda self: self._dispatch("DELETE")    # noqa: E731

        # -- faults
        def _apply_fault(self, f, is_watch):
            """True when the fault answered the request itself."""
            if f.action == "delay":
                time.sleep(f.delay_ms / 1000.0)
                return False
            if f.action == "late_answer":   # served (stored, watchers told), answered later
                self._late_ms = f.delay_ms
                return False
            if f.action == "stall":   # never answer; close after delay_ms (or at stop)
                server.stopping.wait(f.delay_ms / 1000.0 if f.delay_ms else None)
                self.close_connection = True
                return True
            if f.action == "close":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return True
            if f.action == "malformed":
                body = f.body or '{"kind": "PodList", "items": ['
                self._send_raw(200, body if isinstance(body, bytes) else body.encode(),
                               f.content_type)
                return True
            if f.action in ("watch_error", "watch_garbage", "cut"):
                return False          # handled inside the watch stream / the list
            headers = {}
            if f.retry_after is not None:
                headers["Retry-After"] = str(f.retry_after)
            if f.body is not None:
                self._send_raw(f.status, f.body.encode(), "text/plain", headers)
                return True
            reason = f.reason or {409: "Conflict", 410: "Expired", 429: "TooManyRequests",
                                  500: "InternalError", 503: "ServiceUnavailable"}.get(f.status, "InternalError")
            message = f.message or "fake fault: %d %s" % (f.status, reason)
            self._send_status(f.status, status_object(f.status, reason, message), headers)
            return True

        # -- the API
        def _parse(self, path):
            if path in ("/healthz", "/readyz", "/livez"):
                return ("health",)
            if path == "/version":
                return ("version",)
            # Named groups (/apis/<group>/<version>/..., e.g. coordination.k8s.io/v1
            # Leases) are served like the core group.
            m = re.match(r"^/apis/([a-z0-9.-]+)/(v[0-9a-z]+)(/.*)?$", path)
            if m:
                self._group_version = m.group(1) + "/" + m.group(2)
                path = "/api/v1" + (m.group(3) or "")
            else:
                self._group_version = "v1"
            if not path.startswith("/api/v1"):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            segs = [urllib.parse.unquote(s) for s in path[len("/api/v1"):].split("/") if s]
            if not segs:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if segs[0] == "namespaces" and len(segs) >= 3:
                ns, rest = segs[1], segs[2:]
            else:
                ns, rest = None, segs
            resource = rest[0]
            name = rest[1] if len(rest) > 1 else None
            sub = rest[2] if len(rest) > 2 else None
            if len(rest) > 3:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return ("api", resource, ns, name, sub)

        def _node_proxy(self, name, port, rest, raw_query):
            """GET /api/v1/nodes/<name>:<port>/proxy/<rest>, as kube-apiserver's
            node proxy does it: to the node's InternalIP at that port, the
            answer (status, body, Content-Type) passed back; 503 when the
            node does not answer."""
            return self._proxy_to(store.get("nodes", None, name), port, rest, raw_query)

        def _proxy_to(self, node, port, rest, raw_query):
            addrs = {a.get("type"): a.get("address")
                     for a in node.get("status", {}).get("addresses", [])}
            ip = addrs.get("InternalIP") or addrs.get("Hostname")
            url = "http://%s:%s/%s%s" % (ip, port, rest, "?" + raw_query if raw_query else "")
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    code, data = resp.status, resp.read()
                    ctype = resp.headers.get("Content-Type", "text/plain")
            except urllib.error.HTTPError as e:
                code, data = e.code, e.read()
                ctype = e.headers.get("Content-Type", "text/plain")
            except (OSError, ValueError) as e:
                raise ApiError(503, "ServiceUnavailable",
                               "error trying to reach service: %s" % e)
            return self._send_raw(code, data, ctype)

        def _service_proxy(self, ns, name, port, rest, raw_query):
            """GET /api/v1/namespaces/<ns>/services/<name>:<port>/proxy/<rest>:
            to the Service's clusterIP at that port (by name or number) --
            the real one goes to an endpoint; the fake has no endpoints."""
            svc = store.get("services", ns, name)
            spec = svc.get("spec", {})
            target = next((p.get("targetPort", p.get("port")) for p in spec.get("ports", [])
                           if port in (p.get("name"), str(p.get("port")))), None)
            if target is None:
                raise ApiError(503, "ServiceUnavailable", "no endpoints available for service")
            node_like = {"status": {"addresses": [{"type": "InternalIP",
                                                   "address": spec.get("clusterIP")}]}}
            return self._proxy_to(node_like, target, rest, raw_query)

        def _api(self, method, path, query, body, is_watch, fault):
            m = re.match(r"^/api/v1/namespaces/([^/]+)/services/([^/:]+):([^/]+)/proxy(?:/(.*))?$",
                         path)
            if m and method == "GET":
                raw_query = urllib.parse.urlencode({k: v[-1] for k, v in query.items()})
                return self._service_proxy(m.group(1), urllib.parse.unquote(m.group(2)),
                                           m.group(3), m.group(4) or "", raw_query)
            m = re.match(r"^/api/v1/nodes/([^/:]+):([0-9]+)/proxy(?:/(.*))?$", path)
            if m and method == "GET":
                raw_query = urllib.parse.urlencode({k: v[-1] for k, v in query.items()})
                return self._node_proxy(urllib.parse.unquote(m.group(1)), m.group(2),
                                        m.group(3) or "", raw_query)
            route = self._parse(path)
            if route[0] == "health":
                return self._send_raw(200, b"ok", "text/plain")
            if route[0] == "version":
                return self._send_json(200, {"major": "1", "minor": "20", "gitVersion": "v1.20.2-fake"})
            _, resource, ns, name, sub = route
            q = {k: v[-1] for k, v in query.items()}
            if name is None:
                if method == "GET" and is_watch:
                    return self._watch(resource, ns, q, fault)
                if method == "GET":
                    return self._list(resource, ns, q, fault)
                if method == "POST":
                    obj = self._admit(resource, self._json(body))
                    if isinstance(obj, dict):
                        obj.setdefault("apiVersion", self._group_version)
                    if resource in CLUSTER_SCOPED:
                        ns = None
                    created = store.create(resource, ns, obj)
                    return self._send_json(201, created)
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
            if sub == "binding" and resource == "pods" and method == "POST":
                return self._bind(ns, name, self._json(body))
            if sub not in (None, "status"):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if method == "GET":
                return self._send_json(200, store.get(resource, ns, name))
            if method == "DELETE":
                pre = ((self._json(body) if body else {}) or {}).get("preconditions") or {}
                if pre.get("uid") and pre["uid"] != store.get(resource, ns, name)["metadata"]["uid"]:
                    raise ApiError(409, "Conflict", "Precondition failed: UID in precondition: %s, "
                                   "UID in object meta: %s" % (pre["uid"], store.get(
                                       resource, ns, name)["metadata"]["uid"]))
                return self._send_json(200, store.delete(resource, ns, name))
            if method == "PUT":
                obj = self._admit(resource, self._json(body))
                expected = (obj.get("metadata") or {}).get("resourceVersion")
                return self._send_json(200, store.update(resource, ns, name, lambda old: obj, expected))
            if method == "PATCH":
                return self._patch(resource, ns, name, body)
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

        def _admit(self, resource, obj):
            """What an apiserver drops from a write: ResourceSlice devices'
            consumable-capacity fields when that gate is off."""
            if resource != "resourceslices" or server.consumable_capacity or not isinstance(obj, dict):
                return obj
            for dev in (obj.get("spec") or {}).get("devices") or []:
                dev.pop("allowMultipleAllocations", None)
                for cap in (dev.get("capacity") or {}).values():
                    if isinstance(cap, dict):
                        cap.pop("requestPolicy", None)
            return obj

        def _json(self, body):
            try:
                obj = json.loads(body.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                raise ApiError(400, "BadRequest", "the request body is not valid JSON: %s" % e)
            return obj

        def _patch(self, resource, ns, name, body):
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            patch = self._json(body)
            if ctype in ("application/strategic-merge-patch+json", "application/merge-patch+json"):
                if not isinstance(patch, dict):
                    raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
                expected = (patch.get("metadata") or {}).get("resourceVersion")
                fn = lambda old: self._admit(resource, merge_patch(old, patch))   # noqa: E731
            elif ctype == "application/json-patch+json":
                expected = None
                fn = lambda old: self._admit(resource, json_patch(old, patch))    # noqa: E731
            else:
                raise ApiError(415, "UnsupportedMediaType",
                               "the body of the request was in an unknown format - accepted media "
                               "types include: application/json-patch+json, application/merge-patch"
                               "+json, application/strategic-merge-patch+json")
            return self._send_json(200, store.update(resource, ns, name, fn, expected))

        def _bind(self, ns, name, binding):
            """BindingREST as in kube-apiserver 1.20: one write that sets
            spec.nodeName, merges the Binding's metadata.annotations into the
            pod's and sets the PodScheduled condition; metadata.uid and
            metadata.resourceVersion are ignored (preconditions are honoured
            only from 1.23 on: server.binding_preconditions)."""
            target = (binding.get("target") or {}).get("name")
            if binding.get("kind") not in (None, "Binding") or not target:
                raise ApiError(400, "BadRequest", "binding: target.name is required")
            meta = binding.get("metadata") or {}
            if meta.get("name") not in (None, name):
                raise ApiError(400, "BadRequest", "name in URL does not match name in Binding object")
            annotations = meta.get("annotations") or {}
            if not isinstance(annotations, dict) or \
                    not all(isinstance(v, str) for v in annotations.values()):
                raise ApiError(400, "BadRequest", "binding: metadata.annotations must map strings to strings")
            uid = meta.get("uid") if server.binding_preconditions else None
            rv = meta.get("resourceVersion") if server.binding_preconditions else None

            def assign(pod):
                pmeta = pod["metadata"]
                if uid and pmeta.get("uid") != uid:
                    raise ApiError(409, "Conflict",
                                   "Operation cannot be fulfilled on pods \"%s\": Precondition "
                                   "failed: UID in precondition: %s, UID in object meta: %s"
                                   % (name, uid, pmeta.get("uid")))
                if rv and pmeta.get("resourceVersion") != rv:
                    raise ApiError(409, "Conflict",
                                   "Operation cannot be fulfilled on pods \"%s\": Precondition "
                                   "failed: ResourceVersion in precondition: %s, ResourceVersion "
                                   "in object meta: %s" % (name, rv, pmeta.get("resourceVersion")))
                if pmeta.get("deletionTimestamp"):
                    raise ApiError(409, "Conflict",
                                   "Operation cannot be fulfilled on pods/binding \"%s\": pod %s "
                                   "is being deleted, cannot be assigned to a host" % (name, name))
                node = (pod.get("spec") or {}).get("nodeName")
                if node:
                    raise ApiError(409, "Conflict",
                                   "Operation cannot be fulfilled on pods/binding \"%s\": pod %s "
                                   "is already assigned to node \"%s\"" % (name, name, node))
                pod.setdefault("spec", {})["nodeName"] = target
                if annotations:
                    if not isinstance(pmeta.get("annotations"), dict):
                        pmeta["annotations"] = {}
                    pmeta["annotations"].update(annotations)
                conds = pod.setdefault("status", {}).setdefault("conditions", [])
                conds[:] = [c for c in conds if c.get("type") != "PodScheduled"]
                conds.append({"type": "PodScheduled", "status": "True",
                              "lastTransitionTime": now_rfc3339()})
                return pod

            store.update("pods", ns, name, assign)
            return self._send_json(201, status_object(201, "", ""))

        def _list(self, resource, ns, q, fault=None):
            fields = parse_selector(q.get("fieldSelector"))
            labels = parse_selector(q.get("labelSelector"))
            limit = int(q.get("limit") or 0)
            if q.get("continue") and q.get("resourceVersion"):
                raise ApiError(400, "BadRequest",
                               "specifying resource version is not allowed when using continue")
            if q.get("resourceVersion") == "0" and server.watch_cache:
                limit = 0
            start = None
            with store.lock:
                rv = store.rv
                if q.get("continue"):
                    try:
                        token = json.loads(base64.urlsafe_b64decode(q["continue"].encode()))
                        start, token_rv = tuple(token["after"]), int(token["rv"])
                    except (ValueError, KeyError, TypeError):
                        raise ApiError(400, "BadRequest", "continue key is not valid")
                    if token_rv < store.oldest_valid_rv:
                        raise ApiError(410, "Expired",
                                       "The provided continue parameter is too old to display a "
                                       "consistent list result. You can start a new list without "
                                       "the continue parameter.")
                    rv = token_rv
                matched = store.select(resource, ns, fields, labels)
                if start is not None:
                    matched = [(k, o) for k, o in matched if [k[1] or "", k[2]] > list(start)]
                meta = {"resourceVersion": str(rv)}
                if limit > 0 and len(matched) > limit:
                    matched = matched[:limit]
                    last = matched[-1][0]
                    meta["continue"] = base64.urlsafe_b64encode(json.dumps(
                        {"after": [last[1] or "", last[2]], "rv": rv}).encode()).decode()
                items = [json.dumps(o) for _, o in matched]
            list_kind = kind_of(resource) + "List"
            if self._wants_protobuf() and list_kind in k8s_protobuf.ITEM_OF_LIST:
                data = k8s_protobuf.encode_list(list_kind, [json.loads(i) for i in items], meta)
                return self._send_list(data, k8s_protobuf.CONTENT_TYPE, fault)
            data = ('{"kind":"%s","apiVersion":"v1","metadata":%s,"items":[%s]}\n'
                    % (list_kind, json.dumps(meta), ",".join(items))).encode()
            self._send_list(data, "application/json", fault)

        def _send_list(self, data, ctype, fault):
            """A LIST answer: whole; chunked in small pieces (chunk_bytes); or,
            for a "cut" fault, its first cut_at bytes (negative: all but the
            last -cut_at) and then the connection closed."""
            if fault is not None and fault.action == "cut":
                cut = int(fault.spec.get("cut_at", len(data) // 2))
                self._answering(200, ctype)
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[:cut])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if server.chunk_bytes <= 0:
                return self._send_raw(200, data, ctype)
            self._answering(200, ctype)
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            at, size = 0, 1
            while at < len(data):
                piece = data[at:at + size]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
                at += size
                size = size % server.chunk_bytes + 1
            self._end_stream()

        # -- watch
        def _write_chunk(self, data):
            pieces = [data]
            if server.chunk_bytes > 0:
                n = server.chunk_bytes
                pieces = [data[i:i + n] for i in range(0, len(data), n)]
            for p in pieces:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(p), p))
                self.wfile.flush()

        def _event(self, etype, obj):
            self._write_chunk((json.dumps({"type": etype, "object": obj}) + "\n").encode())

        def _watch(self, resource, ns, q, fault):
            fields = parse_selector(q.get("fieldSelector"))
            labels = parse_selector(q.get("labelSelector"))
            bookmarks = q.get("allowWatchBookmarks") in ("1", "true")
            timeout = float(q.get("timeoutSeconds") or 1800)
            since = q.get("resourceVersion", "")
            deadline = time.monotonic() + timeout
            watcher = Watcher()
            with store.lock:
                if since not in ("", "0"):
                    try:
                        since_rv = int(since)
                    except ValueError:
                        raise ApiError(400, "BadRequest", "invalid resourceVersion %r" % since)
                    if since_rv < store.oldest_valid_rv:
                        raise ApiError(410, "Expired", "too old resource version: %d (%d)"
                                       % (since_rv, store.oldest_valid_rv))
                    initial = []
                else:   # no version: the current state as ADDED events, then live
                    since_rv = store.rv
                    initial = [copy.deepcopy(o) for _, o in store.select(resource, ns, fields, labels)]
                server.watchers.add(watcher)
            self._answering(200, "application/json")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            pos = since_rv
            try:
                for obj in initial:
                    self._event("ADDED", obj)
                if fault is not None and fault.action == "watch_garbage":
                    self._write_chunk((fault.body or "this is not JSON\n").encode())
                    return self._end_stream()
                if fault is not None and fault.action == "watch_error":
                    reason = fault.reason or ("Expired" if fault.status == 410 else "InternalError")
                    self._event("ERROR", status_object(fault.status, reason, fault.message or
                                                       "too old resource version: %d" % pos))
                    return self._end_stream()
                while True:
                    with store.lock:
                        pending, gone = [], False
                        while True:
                            if pos < store.oldest_valid_rv:
                                gone = True
                                break
                            pending = [e for e in store.history if e[0] > pos]
                            if (pending or watcher.drop or watcher.bookmark or server.stopping.is_set()
                                    or time.monotonic() >= deadline):
                                break
                            store.lock.wait(max(0.0, min(0.5, deadline - time.monotonic())))
                        drop, watcher.drop = watcher.drop, None
                        bookmark, watcher.bookmark = watcher.bookmark, False
                        current = store.rv
                    if gone:
                        self._event("ERROR", status_object(410, "Expired", "too old resource version: %d (%d)" % (pos, store.oldest_valid_rv)))
                        return self._end_stream()
                    for erv, etype, eres, ens, obj in pending:
                        pos = erv
                        if eres != resource or (ns and ens != ns):
                            continue
                        if field_matches(obj, fields) and label_matches(obj, labels):
                            self._event(etype, obj)
                    if bookmark and bookmarks:
                        pos = max(pos, current)
                        self._event("BOOKMARK", {"kind": kind_of(resource), "apiVersion": "v1",
                                                 "metadata": {"resourceVersion": str(pos)}})
                    if drop == "abrupt" or server.stopping.is_set():
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    if drop == "clean" or time.monotonic() >= deadline:
                        return self._end_stream()
            finally:
                with store.lock:
                    server.watchers.discard(watcher)

        def _end_stream(self):
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        # -- control endpoints (no auth, not recorded)
        def _control(self, method, path, query, body):
            q = {k: v[-1] for k, v in query.items()}
            data = json.loads(body) if body else {}
            if path == "/_fake/requests" and method == "GET":
                reqs = server.requests()
                since = int(q.get("since", 0))
                return self._send_json(200, [r for r in reqs if r["seq"] >= since])
            if path == "/_fake/requests" and method == "DELETE":
                server.clear_requests()
                return self._send_json(200, {})
            if path == "/_fake/faults" and method == "POST":
                for spec in data if isinstance(data, list) else [data]:
                    server.add_fault(**spec)
                return self._send_json(200, {})
            if path == "/_fake/faults" and method == "DELETE":
                server.clear_faults()
                return self._send_json(200, {})
            if path == "/_fake/objects" and method == "POST":
                out = [server.put_object(d["resource"], d["object"])
                       for d in (data if isinstance(data, list) else [data])]
                return self._send_json(200, out)
            if path == "/_fake/bulk" and method == "POST":
                return self._send_json(200, self._bulk(data))
            if path.startswith("/_fake/objects/") and method == "GET":
                resource = path[len("/_fake/objects/"):]
                with store.lock:
                    objs = [copy.deepcopy(o) for _, o in store.select(resource, q.get("namespace"), [], [])]
                return self._send_json(200, objs)
            if path == "/_fake/config" and method == "POST":
                if "chunk_bytes" in data:
                    server.chunk_bytes = int(data["chunk_bytes"])
                if "consumable_capacity" in data:
                    server.consumable_capacity = bool(data["consumable_capacity"])
                return self._send_json(200, {"chunk_bytes": server.chunk_bytes,
                                             "consumable_capacity": server.consumable_capacity})
            if path == "/_fake/drop_watches" and method == "POST":
                return self._send_json(200, {"dropped": server.drop_watches(bool(data.get("clean")))})
            if path == "/_fake/bookmark" and method == "POST":
                server.send_bookmarks()
                return self._send_json(200, {})
            if path == "/_fake/compact" and method == "POST":
                store.compact()
                return self._send_json(200, {"resourceVersion": store.rv})
            if path == "/_fake/state" and method == "GET":
                with store.lock:
                    state = {"resourceVersion": store.rv, "oldest_valid_rv": store.oldest_valid_rv,
                             "watches": len(server.watchers), "objects": len(store.objects)}
                with server.lock:
                    state["connections"] = server.connections
                    state["faults"] = [dict(f.spec, remaining=f.count, hits=f.hits) for f in server.faults]
                return self._send_json(200, state)
            return self._send_json(404, status_object(404, "NotFound", "no control endpoint %s %s" % (method, path)))

        def _bulk(self, spec):
            """{"resource","namespace","count","prefix","template"}: count copies."""
            resource = spec["resource"]
            template = spec.get("template") or {}
            prefix = spec.get("prefix", resource[:-1] + "-")
            width = len(str(spec["count"]))
            for i in range(int(spec["count"])):
                obj = copy.deepcopy(template)
                meta = obj.setdefault("metadata", {})
                meta["name"] = "%s%0*d" % (prefix, width, i)
                if spec.get("namespace"):
                    meta["namespace"] = spec["namespace"]
                server.put_object(resource, obj)
            return {"resourceVersion": store.rv}

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--fixture")
    ap.add_argument("--tls-dir", help="serve HTTPS with DIR/server.{crt,key}; DIR/ca.crt verifies clients")
    ap.add_argument("--make-certs", action="store_true", help="create the certificates in --tls-dir first")
    ap.add_argument("--token", action="append", default=[], help="require this bearer token (repeatable)")
    ap.add_argument("--client-cert-auth", action="store_true", help="accept a client certificate signed by ca.crt")
    ap.add_argument("--max-history", type=int, default=10000)
    ap.add_argument("--chunk-bytes", type=int, default=0)
    ap.add_argument("--ready-file", help="also write the ready line to this file")
    ap.add_argument("--binding-preconditions", action="store_true",
                    help="honour a Binding's metadata.uid/resourceVersion as 1.23+ does (1.20 ignores them)")
    args = ap.parse_args()
    if args.make_certs:
        make_certs(args.tls_dir)
    srv = FakeApiServer(fixture=args.fixture, host=args.host, port=args.port, tls_dir=args.tls_dir,
                        tokens=args.token, client_cert_auth=args.client_cert_auth,
                        max_history=args.max_history, chunk_bytes=args.chunk_bytes)
    srv.binding_preconditions = args.binding_preconditions
    srv.start()
    line = json.dumps({"url": srv.url, "port": srv.port})
    print(line, flush=True)
    if args.ready_file:
        with open(args.ready_file + ".tmp", "w") as f:
            f.write(line + "\n")
        os.rename(args.ready_file + ".tmp", args.ready_file)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
