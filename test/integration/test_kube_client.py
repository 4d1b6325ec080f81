"""gp_kube (src/kube) against the fake API server (test/fakeapi), driven through
the test-only program test/kube/kubectl_min.

    GP_BUILD_DIR      build tree holding test/kube/kubectl_min (default ./build)
    GP_KUBE_WRAPPER   command line kubectl_min runs under (default: GP_PLUGIN_WRAPPER)
    GP_TIMEOUT_SCALE  factor for every wait (default 1, 10 under a wrapper)

Time is only ever a generous upper bound on waiting for something to happen,
or a lower bound the client must respect (backoff, Retry-After): never a
speed requirement.
"""

import base64
import json
import os
import queue
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "test", "fakeapi"))

from fake_apiserver import FakeApiServer, make_certs  # noqa: E402

BUILD = os.path.abspath(os.environ.get("GP_BUILD_DIR", os.path.join(ROOT, "build")))
KUBECTL_MIN = os.path.join(BUILD, "test", "kube", "kubectl_min")
WRAPPER = shlex.split(os.environ.get("GP_KUBE_WRAPPER", os.environ.get("GP_PLUGIN_WRAPPER", "")))
SCALE = float(os.environ.get("GP_TIMEOUT_SCALE") or (10 if WRAPPER else 1))
SAN_ENV = {"ASAN_OPTIONS": "detect_leaks=1:exitcode=23",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=24"}
SAN_MARKERS = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "definitely lost",
               "Invalid read", "Invalid write", "uninitialised")

pytestmark = pytest.mark.skipif(not os.path.exists(KUBECTL_MIN),
                                reason="kubectl_min not built in %s" % BUILD)


def env_for_child(extra=None):
    env = dict(os.environ)
    for k, v in SAN_ENV.items():
        env.setdefault(k, v)
    env.pop("KUBECONFIG", None)
    env.update(extra or {})
    return env


class Output:
    """Parsed kubectl_min output."""

    def __init__(self, rc, stdout, stderr):
        self.rc, self.stdout, self.stderr = rc, stdout, stderr
        self.lines = stdout.splitlines()
        self.result = next((l for l in self.lines if l.startswith("RESULT ")), "")
        stats = next((l for l in self.lines if l.startswith("STATS ")), "STATS")
        self.stats = {k: int(v) for k, v in (kv.split("=") for kv in stats.split()[1:])}
        self.items = [l.split()[1] for l in self.lines if l.startswith("ITEM ")]
        self.events = [tuple(l.split()[1:]) for l in self.lines if l.startswith("EVENT ")]
        objs = [l[len("OBJECT "):] for l in self.lines if l.startswith("OBJECT ")]
        self.object = json.loads(objs[0]) if objs else None
        assert not any(m in stderr for m in SAN_MARKERS), stderr
        assert rc not in (23, 24, 99), "sanitizer/valgrind error status %d: %s" % (rc, stderr)

    def field(self, name):
        """'http', 'reason', 'rv' from the RESULT line; message is the rest."""
        if name == "message":
            return self.result.split(" message=", 1)[1] if " message=" in self.result else None
        for tok in self.result.split(" message=")[0].split()[2:]:
            k, _, v = tok.partition("=")
            if k == name:
                return v
        return None


def kubectl(kubeconfig, *args, extra_env=None, options=(), timeout=60):
    argv = WRAPPER + [KUBECTL_MIN]
    if kubeconfig:
        argv += ["--kubeconfig", kubeconfig]
    argv += list(options) + list(args)
    p = subprocess.run(argv, capture_output=True, text=True, env=env_for_child(extra_env),
                       timeout=timeout * SCALE)
    return Output(p.returncode, p.stdout, p.stderr)


def write_kubeconfig(path, server, user=None, cluster_extra=None, namespace=None):
    cluster = {"server": server}
    cluster.update(cluster_extra or {})
    context = {"cluster": "c"}
    if namespace:
        context["namespace"] = namespace
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "t",
           "clusters": [{"name": "c", "cluster": cluster}],
           "contexts": [{"name": "t", "context": context}]}
    if user is not None:
        context["user"] = "u"
        cfg["users"] = [{"name": "u", "user": user}]
    with open(path, "w") as f:
        json.dump(cfg, f)    # JSON is YAML
    return str(path)


@pytest.fixture
def api(tmp_path):
    srv = FakeApiServer().start()
    srv.kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", srv.url)
    yield srv
    srv.stop()


def pods_created(srv, count, prefix="p-", ns="default", padding=0):
    tmpl = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    if padding:
        tmpl["metadata"] = {"annotations": {"pad": "x" * padding}}
    width = len(str(count))
    for i in range(count):
        obj = json.loads(json.dumps(tmpl))
        obj.setdefault("metadata", {})["name"] = "%s%0*d" % (prefix, width, i)
        obj["metadata"]["namespace"] = ns
        srv.put_object("pods", obj)


def wait_until(condition, what, timeout=20):
    deadline = time.monotonic() + timeout * SCALE
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.05)


def requests_to(srv, path_part, method=None):
    return [r for r in srv.requests() if path_part in r["path"]
            and (method is None or r["method"] == method)]


# ------------------------------------------------------------------ GET / errors

def test_get_object_and_not_found_status(api):
    pods_created(api, 1)
    out = kubectl(api.kubeconfig, "get", "/api/v1/namespaces/default/pods/p-0")
    assert out.rc == 0 and out.result.startswith("RESULT OK")
    assert out.object["metadata"]["name"] == "p-0"
    out = kubectl(api.kubeconfig, "get", "/api/v1/namespaces/default/pods/nope")
    assert out.rc == 1
    assert out.field("http") == "404" and out.field("reason") == "NotFound"
    assert out.field("message") == 'pods "nope" not found'
    reqs = api.requests()
    assert [r["headers"].get("Accept") for r in reqs] == ["application/json"] * 2
    assert all(r["headers"]["User-Agent"].startswith("gpupool/") for r in reqs)


def test_malformed_json_is_an_error_not_a_crash(api):
    api.add_fault(method="GET", path="/api/v1/nodes/n1", action="malformed")
    out = kubectl(api.kubeconfig, "get", "/api/v1/nodes/n1")
    assert out.rc == 1 and out.field("reason") == "BadResponse"
    assert "malformed JSON from the server" in out.field("message")


def test_body_over_the_bound_is_refused(api):
    pods_created(api, 1, padding=5000)
    out = kubectl(api.kubeconfig, "get", "/api/v1/namespaces/default/pods/p-0",
                  options=["--max-body", "4096"])
    assert out.rc == 1 and out.field("reason") == "TooLarge"
    assert len(requests_to(api, "/pods/p-0")) == 1     # not retried


def test_non_status_error_body_is_quoted(api):
    api.add_fault(method="GET", path="/api/v1/nodes", status=502, body="<html>bad gateway</html>",
                  count=-1)
    out = kubectl(api.kubeconfig, "get", "/api/v1/nodes/x", options=["--attempts", "1"])
    assert out.field("http") == "502"
    assert "HTTP 502: <html>bad gateway</html>" in out.field("message")


# ------------------------------------------------------------------ LIST

def test_paginated_list_keeps_one_page_in_memory(api):
    total = 2000
    pods_created(api, total, padding=400)
    small = kubectl(api.kubeconfig, "list", "/api/v1/pods", "50")
    assert small.rc == 0, small.stdout
    assert small.items == ["default/p-%04d" % i for i in range(total)]
    pages = requests_to(api, "/api/v1/pods")
    assert len(pages) == total // 50
    assert "continue" not in pages[0]["query"] and all("continue" in p["query"] for p in pages[1:])
    assert all(p["query"]["limit"] == "50" for p in pages)
    assert small.field("rv") == str(api.store.rv)
    # One page of text held at a time: the body high-water mark does not
    # grow with the list (the single-page run shows the measurement can
    # tell), and items are parsed one by one, so jansson never holds more
    # than about one item (~0.5 KB of text here) whatever the page size.
    whole = kubectl(api.kubeconfig, "list", "/api/v1/pods", str(total))
    assert whole.items == small.items
    assert small.stats["peak_body"] * 10 < whole.stats["peak_body"]
    assert whole.stats["json_peak"] < 16384, whole.stats
    assert whole.stats["json_peak"] * 100 < whole.stats["peak_body"], whole.stats
    assert small.stats["json_live"] == 0 and whole.stats["json_live"] == 0


def test_any_version_list_is_one_watch_cache_answer(api):
    pods_created(api, 120)
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "50", "any")
    assert out.rc == 0, out.stdout
    assert out.items == ["default/p-%03d" % i for i in range(120)]
    pages = requests_to(api, "/api/v1/pods")
    assert len(pages) == 1
    assert pages[0]["query"]["resourceVersion"] == "0" and pages[0]["query"]["limit"] == "50"


def test_any_version_list_pages_without_a_watch_cache(api):
    """resourceVersion=0 goes on the first page only: the apiserver refuses
    it beside a continue token."""
    api.watch_cache = False
    pods_created(api, 120)
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "50", "any")
    assert out.rc == 0, out.stdout
    assert out.items == ["default/p-%03d" % i for i in range(120)]
    pages = requests_to(api, "/api/v1/pods")
    assert len(pages) == 3
    assert pages[0]["query"].get("resourceVersion") == "0"
    assert all("resourceVersion" not in p["query"] and "continue" in p["query"]
               for p in pages[1:])


def test_consistent_list_sends_no_resource_version(api):
    pods_created(api, 3)
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "2")
    assert out.rc == 0 and len(out.items) == 3
    assert all("resourceVersion" not in p["query"] for p in requests_to(api, "/api/v1/pods"))


@pytest.mark.parametrize("body, what", [
    ('{"kind":"PodList","items":[{"metadata":{"name":"a"}},', "malformed"),
    ('{"kind":"PodList","items":{"a":1}}', "\"items\" is not a list"),
    ('{"kind":"PodList","items":[]} trailing', "text after the object"),
    ('[1,2]', "not a JSON object"),
    ('{"items":[{"metadata":{"name":"a"}} {"metadata":{}}]}', "expected ',' or ']'"),
])
def test_malformed_list_answer_is_a_clear_error(api, body, what):
    api.add_fault(method="GET", path="/api/v1/pods", status=200, body=body, count=-1)
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "10")
    assert out.rc != 0
    assert out.field("reason") == "BadResponse", out.stdout
    assert what in out.field("message"), out.stdout


def test_list_connection_is_reused(api):
    pods_created(api, 30)
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "5")
    assert out.rc == 0 and len(out.items) == 30
    conns = {r["conn"] for r in requests_to(api, "/api/v1/pods")}
    assert len(conns) == 1


def test_list_selectors_pass_through(api):
    pods_created(api, 4)
    for i, node in enumerate(["n1", "n2", "n1", ""]):
        api.store.update("pods", "default", "p-%d" % i,
                         lambda p, node=node: (p["spec"].__setitem__("nodeName", node), p)[1])
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", "1")
    assert out.items == ["default/p-0", "default/p-2"]
    assert all(r["query"]["fieldSelector"] == "spec.nodeName=n1" for r in api.requests())


def test_expired_continue_token_is_gone(api):
    pods_created(api, 10)
    api.add_fault(method="GET", path="/api/v1/pods", query="continue=", status=410,
                  reason="Expired", message="The provided continue parameter is too old")
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "3")
    assert out.rc == 2 and out.result.startswith("RESULT GONE")
    assert out.items == ["default/p-00", "default/p-01", "default/p-02"]
    assert "too old" in out.field("message")


# ------------------------------------------------- protobuf (KUBE_LIST_PROTOBUF)

import k8s_protobuf  # noqa: E402  (test/fakeapi)

PROTOBUF = "application/vnd.kubernetes.protobuf"


def item_dumps(out):
    return [json.loads(l[len("ITEMJSON "):]) for l in out.lines if l.startswith("ITEMJSON ")]


def subset(obj, descriptor):
    """What a protobuf item must hold: the JSON object cut to the fields of
    proto/k8s_list.proto, empty strings/lists/maps left out (empty messages
    stay), Quantities as strings (kube.h, KUBE_LIST_PROTOBUF)."""
    out = {}
    for f in descriptor.fields:
        v = obj.get(f.name)
        is_map = f.message_type is not None and f.message_type.GetOptions().map_entry
        if v is None or v == "" or v == [] or (is_map and v == {}):
            continue   # an empty object that is a message stays: {} in both
        if is_map:
            vt = f.message_type.fields_by_name["value"].message_type
            out[f.name] = {k: (str(x) if vt is not None else x) for k, x in v.items()}
        elif f.label == f.LABEL_REPEATED:
            out[f.name] = [subset(x, f.message_type) for x in v]
        elif f.message_type is not None:
            out[f.name] = subset(v, f.message_type)
        else:
            out[f.name] = v
    return out


def rich_objects(api):
    api.put_object("nodes", {
        "metadata": {"name": "n1", "labels": {"a": "b"},
                     "annotations": {"gpupool.io/gpus": "[{\"index\":0}]", "x": ""}},
        "spec": {"podCIDR": "10.0.0.0/24"},
        "status": {"capacity": {"cpu": "8"},
                   "allocatable": {"aliyun.com/gpu-mem": 32, "nvidia.com/gpu": "4", "cpu": "7500m"},
                   "addresses": [{"type": "InternalIP", "address": "10.1.2.3"},
                                 {"type": "Hostname", "address": "n1"}],
                   "images": [{"names": ["busybox"], "sizeBytes": 1000}]}})
    api.put_object("nodes", {"metadata": {"name": "n2"}, "status": {}})
    api.put_object("pods", {
        "metadata": {"name": "p", "namespace": "ml", "annotations": {"ALIYUN_COM_GPU_MEM_IDX": "1"}},
        "spec": {"nodeName": "n1", "restartPolicy": "Never",
                 "initContainers": [{"name": "init", "image": "i",
                                     "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
                 "containers": [{"name": "main", "image": "m", "command": ["sh"],
                                 "resources": {"limits": {"aliyun.com/gpu-mem": "8"},
                                               "requests": {"cpu": "1"}}},
                                {"name": "side", "image": "s"}]},
        "status": {"phase": "Running", "podIP": "10.0.0.9"}})
    api.put_object("pods", {"metadata": {"name": "pending", "namespace": "ml"},
                            "spec": {"nodeName": "", "containers": [{"name": "c"}]}})
    api.put_object("configmaps", {"metadata": {"name": "unhealthy-gpu-n1", "namespace": "kube-system"},
                                  "data": {"gpus": "0,1", "empty": ""}})


@pytest.mark.parametrize("resource, path", [
    ("nodes", "/api/v1/nodes"), ("pods", "/api/v1/pods"),
    ("configmaps", "/api/v1/namespaces/kube-system/configmaps")])
def test_protobuf_list_items_equal_json_items(api, resource, path):
    rich_objects(api)
    as_json = kubectl(api.kubeconfig, "list", path, "10", "dump")
    as_protobuf = kubectl(api.kubeconfig, "list", path, "10", "protobuf", "dump")
    assert as_json.rc == 0 and as_protobuf.rc == 0, as_protobuf.stdout
    reqs = requests_to(api, path)
    assert reqs[0]["headers"]["Accept"] == "application/json"
    assert reqs[0]["content_type"] == "application/json"
    assert reqs[1]["headers"]["Accept"] == PROTOBUF + ", application/json"
    assert reqs[1]["content_type"] == PROTOBUF
    assert as_protobuf.items == as_json.items and as_protobuf.items
    assert as_protobuf.field("rv") == as_json.field("rv") == str(api.store.rv)
    item_type = getattr(k8s_protobuf.pb2(), k8s_protobuf.ITEM_OF_LIST[
        {"nodes": "NodeList", "pods": "PodList", "configmaps": "ConfigMapList"}[resource]])
    for pb_item, json_item in zip(item_dumps(as_protobuf), item_dumps(as_json)):
        assert pb_item == subset(json_item, item_type.DESCRIPTOR)


def test_protobuf_pod_fields_spelled_out(api):
    """The same check without the subset() helper, for one pod."""
    rich_objects(api)
    out = kubectl(api.kubeconfig, "list", "/api/v1/namespaces/ml/pods", "10", "protobuf", "dump")
    assert out.rc == 0, out.stdout
    assert item_dumps(out) == [
        {"metadata": {"name": "p", "namespace": "ml",
                      "annotations": {"ALIYUN_COM_GPU_MEM_IDX": "1"}},
         "spec": {"nodeName": "n1",
                  "initContainers": [{"name": "init",
                                      "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
                  "containers": [{"name": "main",
                                  "resources": {"limits": {"aliyun.com/gpu-mem": "8"},
                                                "requests": {"cpu": "1"}}},
                                 {"name": "side"}]},
         "status": {"phase": "Running"}},
        {"metadata": {"name": "pending", "namespace": "ml"},
         "spec": {"containers": [{"name": "c"}]}},
    ]


def test_protobuf_list_pages_with_continue(api):
    pods_created(api, 120)
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "50", "protobuf")
    assert out.rc == 0, out.stdout
    assert out.items == ["default/p-%03d" % i for i in range(120)]
    assert out.field("rv") == str(api.store.rv)
    pages = requests_to(api, "/api/v1/pods")
    assert len(pages) == 3 and all(p["content_type"] == PROTOBUF for p in pages)
    assert "continue" not in pages[0]["query"] and all("continue" in p["query"] for p in pages[1:])


def test_protobuf_flag_walks_a_json_answer(api):
    """An apiserver (or a CRD) without protobuf answers JSON: listed as usual."""
    pods_created(api, 7)
    api.protobuf = False
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "3", "protobuf")
    assert out.rc == 0 and len(out.items) == 7, out.stdout
    pages = requests_to(api, "/api/v1/pods")
    assert all(PROTOBUF in p["headers"]["Accept"] and p["content_type"] == "application/json"
               for p in pages)
    api.protobuf = True
    api.put_object("widgets", {"metadata": {"name": "w", "namespace": "default"}})
    out = kubectl(api.kubeconfig, "list", "/api/v1/namespaces/default/widgets", "3", "protobuf")
    assert out.rc == 0 and out.items == ["default/w"], out.stdout


def protobuf_answer(kind="PodList"):
    return k8s_protobuf.encode_list(kind, [{"metadata": {"name": "a", "namespace": "d"}}],
                                    {"resourceVersion": "5"})


@pytest.mark.parametrize("body, what", [
    (protobuf_answer()[:-3], "truncated after 0 items"),
    (protobuf_answer()[:-1], "truncated after 0 items"),
    (k8s_protobuf.MAGIC, "unexpected kind \"\""),
    (k8s_protobuf.MAGIC + b"\x0a\x09\x12\x07PodList", "the envelope holds no list"),
    # Go writes the kind (field 1) first: without it the items cannot be read
    (k8s_protobuf.MAGIC + b"\x12\x04\x12\x02\x0a\x00\x0a\x09\x12\x07PodList",
     "the list comes before its kind"),
    # the List says 3 bytes, its item 4
    (k8s_protobuf.MAGIC + b"\x0a\x09\x12\x07PodList\x12\x03\x12\x02\x0a\x00",
     "overruns the list"),
    (k8s_protobuf.MAGIC + b"\x0a\x09\x12\x07PodList\x13", "unsupported wire type"),
    (b"k9s\x00" + protobuf_answer()[4:], "does not start with"),
    (b"k8s", "does not start with"),
    (protobuf_answer("NodeList").replace(b"NodeList", b"Foo_List"), 'unexpected kind "Foo_List"'),
    (protobuf_answer().replace(b"PodList", b"PodLisX"), 'unexpected kind "PodLisX"'),
    # the item's bytes say a 0x7f-byte field follows: not a valid Pod
    (protobuf_answer().replace(b"\n\x01a", b"\n\x7fa"), "item 0 is not a valid Pod"),
    (b"{\"kind\":\"PodList\"}", "does not start with"),
])
def test_malformed_protobuf_answer_is_a_clear_error(api, body, what):
    api.add_fault(method="GET", path="/api/v1/pods", action="malformed", body=body,
                  content_type=PROTOBUF, count=-1)
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "10", "protobuf")
    assert out.rc == 1 and out.items == []
    assert out.field("reason") == "BadResponse", out.stdout
    assert "malformed protobuf answer" in out.field("message"), out.stdout
    assert what in out.field("message"), out.stdout


def pb_varint(n):
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([low])
        out += bytes([low | 0x80])


def pb_field(number, payload):
    return pb_varint(number << 3 | 2) + pb_varint(len(payload)) + payload


def test_protobuf_map_entry_without_value(api):
    """D6: a map<string, Quantity> entry with a key and no value (a broken
    or hostile server) is read as Go reads it, the zero Quantity "0"; it
    used to crash the client (NULL message)."""
    node = pb_field(1, pb_field(1, b"n1")) + pb_field(3, pb_field(2, pb_field(1, b"cpu")))
    lst = pb_field(1, pb_field(2, b"7")) + pb_field(2, node)
    body = k8s_protobuf.MAGIC + pb_field(1, pb_field(1, b"v1") + pb_field(2, b"NodeList")) + \
        pb_field(2, lst)
    api.add_fault(method="GET", path="/api/v1/nodes", action="malformed", body=body,
                  content_type=PROTOBUF, count=-1)
    out = kubectl(api.kubeconfig, "list", "/api/v1/nodes", "10", "protobuf", "dump")
    assert out.rc == 0, (out.stdout, out.stderr)
    assert item_dumps(out) == [{"metadata": {"name": "n1"},
                                "status": {"allocatable": {"cpu": "0"}}}], out.stdout


def test_protobuf_error_status_is_read(api):
    """Errors to a protobuf request come as protobuf Statuses: reason,
    message and code read as from JSON, 410 still means GONE."""
    pods_created(api, 10)
    api.add_fault(method="GET", path="/api/v1/pods", query="continue=", status=410,
                  reason="Expired", message="The provided continue parameter is too old")
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "3", "protobuf")
    assert out.rc == 2 and out.result.startswith("RESULT GONE"), out.stdout
    assert requests_to(api, "/api/v1/pods")[-1]["content_type"] == PROTOBUF
    assert out.field("message") == "The provided continue parameter is too old"
    api.add_fault(method="GET", path="/api/v1/pods", status=403, reason="Forbidden",
                  message="pods is forbidden: no")
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "3", "protobuf")
    assert out.rc == 1 and out.field("http") == "403" and out.field("reason") == "Forbidden"
    assert out.field("message") == "pods is forbidden: no"


# The protobuf answer is decoded while it arrives (list_protobuf.c): items
# are handed on as their last byte comes in, nothing grows with the list,
# and a transfer that broke off after handing items on is not retried.

def pod_names(count, prefix="p-"):
    return ["default/%s%0*d" % (prefix, len(str(count)), i) for i in range(count)]


@pytest.mark.parametrize("chunk", [1, 7])
def test_protobuf_list_in_tiny_chunks(api, chunk):
    rich_objects(api)
    pods_created(api, 40)
    whole = kubectl(api.kubeconfig, "list", "/api/v1/pods", "500", "protobuf", "dump")
    api.chunk_bytes = chunk   # pieces of 1 byte, or of 1, 2, ... 7 bytes
    pieces = kubectl(api.kubeconfig, "list", "/api/v1/pods", "500", "protobuf", "dump")
    assert whole.rc == 0 and pieces.rc == 0, pieces.stdout
    assert len(pieces.items) == 42 and pieces.items == whole.items
    assert item_dumps(pieces) == item_dumps(whole)
    assert pieces.field("rv") == whole.field("rv") == str(api.store.rv)
    last = requests_to(api, "/api/v1/pods")[-1]
    assert last["content_type"] == PROTOBUF and pieces.stats["requests"] == 1
    assert pieces.stats["peak_body"] > 0   # items were collected across pieces


def test_protobuf_list_meta_read_where_it_comes(api):
    """ListMeta after the items (Go writes it first) is read all the same."""
    m = k8s_protobuf.pb2()
    item = m.Pod()
    item.metadata.name, item.metadata.namespace = "a", "d"
    lst = m.List()
    lst.items.append(item.SerializeToString())
    meta = m.List()
    meta.metadata.resourceVersion = "77"
    raw = lst.SerializeToString() + meta.SerializeToString()
    body = k8s_protobuf.MAGIC + b"\x0a\x09\x12\x07PodList\x12" + bytes([len(raw)]) + raw
    api.add_fault(method="GET", path="/api/v1/pods", action="malformed", body=body,
                  content_type=PROTOBUF)
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "10", "protobuf")
    assert out.rc == 0 and out.items == ["d/a"] and out.field("rv") == "77", out.stdout


def test_protobuf_list_memory_does_not_grow_with_the_list(api):
    """One item and one network chunk: the high-water mark of the body
    buffer is the same for a 50-item page and a 2,000-item one (the JSON
    answer's shows the measurement can tell)."""
    total = 2000
    pods_created(api, total, padding=400)
    small = kubectl(api.kubeconfig, "list", "/api/v1/pods", "50", "protobuf")
    whole = kubectl(api.kubeconfig, "list", "/api/v1/pods", str(total), "protobuf")
    as_json = kubectl(api.kubeconfig, "list", "/api/v1/pods", str(total))
    assert small.rc == whole.rc == as_json.rc == 0, whole.stdout
    assert small.items == whole.items == as_json.items == pod_names(total)
    assert 0 < whole.stats["peak_body"] < 4096, whole.stats   # a ~0.5 KB item
    assert whole.stats["peak_body"] <= 2 * small.stats["peak_body"], (small.stats, whole.stats)
    assert whole.stats["peak_body"] * 200 < as_json.stats["peak_body"], as_json.stats
    assert whole.stats["json_peak"] < 16384 and whole.stats["json_live"] == 0, whole.stats


def test_protobuf_list_broken_off_after_items_is_not_retried(api):
    pods_created(api, 200, padding=200)
    api.add_fault(method="GET", path="/api/v1/pods", action="cut", count=1)  # half of it
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "500", "protobuf",
                  options=["--backoff-ms", "1"])
    assert out.rc == 1 and out.field("reason") == "Interrupted", out.stdout
    n = len(out.items)
    assert 0 < n < 200 and out.items == pod_names(200)[:n]
    assert ("broke off after %d items" % n) in out.field("message"), out.stdout
    assert len(requests_to(api, "/api/v1/pods")) == 1 and out.stats["retries"] == 0


def test_protobuf_list_broken_off_before_the_first_item_is_retried(api):
    pods_created(api, 200, padding=200)
    api.add_fault(method="GET", path="/api/v1/pods", action="cut", cut_at=12, count=1)
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "500", "protobuf",
                  options=["--backoff-ms", "1"])
    assert out.rc == 0 and out.items == pod_names(200), out.stdout
    assert out.field("rv") == str(api.store.rv)
    assert len(requests_to(api, "/api/v1/pods")) == 2 and out.stats["retries"] == 1


def test_protobuf_list_truncated_answer_is_not_retried(api):
    """A complete transfer that ends mid-item is the server's error."""
    pods_created(api, 20)
    api.add_fault(method="GET", path="/api/v1/pods", action="malformed", count=-1,
                  body=k8s_protobuf.encode_list("PodList", [{"metadata": {"name": "p-%d" % i}}
                                                            for i in range(5)],
                                                {"resourceVersion": "3"})[:-2],
                  content_type=PROTOBUF)
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "500", "protobuf")
    assert out.rc == 1 and out.field("reason") == "BadResponse", out.stdout
    assert "truncated after 4 items" in out.field("message")
    assert len(out.items) == 4 and len(requests_to(api, "/api/v1/pods")) == 1


def test_protobuf_list_bound_is_per_item(api):
    """max_body bounds what is held: one item of a streamed answer, not the
    answer (a JSON answer still is bounded as a whole)."""
    pods_created(api, 100, padding=300)
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "500", "protobuf",
                  options=["--max-body", "4096"])
    assert out.rc == 0 and out.items == pod_names(100), out.stdout
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "500", options=["--max-body", "4096"])
    assert out.rc == 1 and out.field("reason") == "TooLarge", out.stdout
    api.put_object("pods", {"metadata": {"name": "zz-big", "namespace": "default",
                                         "annotations": {"pad": "x" * 5000}}})
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "500", "protobuf",
                  options=["--max-body", "4096"])
    assert out.rc == 1 and out.field("reason") == "BadResponse", out.stdout
    assert "over the bound of 4096 bytes" in out.field("message")
    assert out.items == pod_names(100)


def test_protobuf_list_callback_stop_aborts_the_transfer(api):
    pods_created(api, 300, padding=200)
    out = kubectl(api.kubeconfig, "list", "/api/v1/pods", "500", "protobuf",
                  options=["--stop-after", "3"])
    assert out.rc == 1 and out.field("reason") == "CallbackError", out.stdout
    assert len(out.items) == 3 and len(requests_to(api, "/api/v1/pods")) == 1


# ------------------------------------------------------------------ retries

def test_get_retried_on_500_with_backoff(api):
    api.put_object("nodes", {"metadata": {"name": "n1"}})
    api.add_fault(method="GET", path="/api/v1/nodes/n1", status=500, count=2)
    out = kubectl(api.kubeconfig, "get", "/api/v1/nodes/n1", options=["--backoff-ms", "200"])
    assert out.rc == 0 and out.object["metadata"]["name"] == "n1"
    reqs = requests_to(api, "/nodes/n1")
    assert [r["status"] for r in reqs] == [500, 500, 200]
    assert out.stats["retries"] == 2
    # Exponential backoff with jitter in [base/2, base): >= 100 ms, then >= 200 ms.
    gaps = [b["time"] - a["time"] for a, b in zip(reqs, reqs[1:])]
    assert gaps[0] >= 0.095 and gaps[1] >= 0.195, gaps


def test_429_honours_retry_after(api):
    api.put_object("nodes", {"metadata": {"name": "n1"}})
    api.add_fault(method="GET", path="/api/v1/nodes/n1", status=429, retry_after=1)
    out = kubectl(api.kubeconfig, "get", "/api/v1/nodes/n1", options=["--backoff-ms", "1"])
    assert out.rc == 0
    reqs = requests_to(api, "/nodes/n1")
    assert [r["status"] for r in reqs] == [429, 200]
    assert reqs[1]["time"] - reqs[0]["time"] >= 0.95


@pytest.mark.parametrize("status,retry_after,transient", [
    (429, 7, "1"), (503, 2, "1"), (500, None, "1"), (404, None, "0"), (409, 3, "0")])
def test_error_carries_retry_after_and_transience(api, status, retry_after, transient):
    """struct kube_error holds the last answer's Retry-After and kube_error_transient() says
    whether a caller's own retry loop may try again (issue 17 item 4)."""
    spec = dict(method="GET", path="/api/v1/nodes/n1", status=status, count=-1)
    if retry_after is not None:
        spec["retry_after"] = retry_after
    api.add_fault(**spec)
    out = kubectl(api.kubeconfig, "get", "/api/v1/nodes/n1", options=["--attempts", "1"])
    assert out.rc == 1 and out.field("http") == str(status), out.stdout
    assert out.field("retry_after_ms") == str((retry_after or 0) * 1000), out.stdout
    assert out.field("transient") == transient, out.stdout


def test_unreachable_server_is_transient(api, tmp_path):
    kc = str(tmp_path / "dead.kubeconfig")
    write_kubeconfig(kc, "http://127.0.0.1:1")
    out = kubectl(kc, "get", "/api/v1/nodes/n1", options=["--attempts", "1"])
    assert out.rc == 1 and out.field("reason") == "ConnectError", out.stdout
    assert out.field("transient") == "1" and out.field("retry_after_ms") == "0", out.stdout


def test_retries_are_bounded(api):
    api.add_fault(method="GET", path="/api/v1/nodes", status=503, count=-1,
                  message="etcd is sulking")
    out = kubectl(api.kubeconfig, "list", "/api/v1/nodes",
                  options=["--attempts", "3", "--backoff-ms", "1"])
    assert out.rc == 1
    assert out.field("http") == "503" and out.field("message") == "etcd is sulking"
    assert len(requests_to(api, "/api/v1/nodes")) == 3


def test_binding_not_retried_on_500(api):
    pods_created(api, 1)
    api.add_fault(method="POST", path="/binding$", status=500, count=-1)
    out = kubectl(api.kubeconfig, "bind", "default", "p-0", "n1", options=["--backoff-ms", "1"])
    assert out.rc == 1 and out.field("http") == "500"
    assert len(requests_to(api, "/binding", "POST")) == 1


def test_binding_retried_on_429_then_conflict_surfaced(api):
    pods_created(api, 1)
    uid = api.store.get("pods", "default", "p-0")["metadata"]["uid"]
    api.add_fault(method="POST", path="/binding$", status=429, retry_after=0)
    out = kubectl(api.kubeconfig, "bind", "default", "p-0", "n1", uid,
                  options=["--backoff-ms", "1"])
    assert out.rc == 0, out.stdout
    posts = requests_to(api, "/binding", "POST")
    assert [r["status"] for r in posts] == [429, 201]
    body = json.loads(posts[1]["body"])
    assert body["kind"] == "Binding" and body["target"] == {"apiVersion": "v1", "kind": "Node",
                                                            "name": "n1"}
    assert body["metadata"]["uid"] == uid
    assert api.store.get("pods", "default", "p-0")["spec"]["nodeName"] == "n1"
    again = kubectl(api.kubeconfig, "bind", "default", "p-0", "n2")
    assert again.rc == 1 and again.field("reason") == "Conflict"
    assert 'already assigned to node "n1"' in again.field("message")
    assert len(requests_to(api, "/binding", "POST")) == 3


def test_connect_error_retried_then_reported(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()     # nothing listens there now
    kc = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:%d" % port)
    out = kubectl(kc, "get", "/api/v1/nodes", options=["--attempts", "3", "--backoff-ms", "1"])
    assert out.rc == 1 and out.field("reason") == "ConnectError"
    assert out.stats["requests"] == 3 and out.stats["retries"] == 2


def test_timeout_retried_for_get_not_for_post(api):
    api.add_fault(method="*", path="/api/v1/namespaces/default/configmaps", action="stall",
                  delay_ms=int(5000 * SCALE), count=-1)
    # The request timeout must leave room for the request itself to reach the
    # server (under valgrind too); the stall outlasts it ten times.
    opts = ["--timeout-ms", str(int(500 * SCALE)), "--attempts", "2", "--backoff-ms", "1"]
    out = kubectl(api.kubeconfig, "get", "/api/v1/namespaces/default/configmaps/x", options=opts)
    assert out.rc == 1 and out.field("reason") == "Timeout"
    assert len(requests_to(api, "/configmaps", "GET")) == 2
    out = kubectl(api.kubeconfig, "post", "/api/v1/namespaces/default/configmaps",
                  '{"metadata":{"name":"x"}}', options=opts)
    assert out.rc == 1 and out.field("reason") == "Timeout"
    assert len(requests_to(api, "/configmaps", "POST")) == 1


# ------------------------------------------------------------------ PATCH / POST

def test_patch_kinds(api):
    pods_created(api, 1)
    api.put_object("nodes", {"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4"}}})
    out = kubectl(api.kubeconfig, "patch", "/api/v1/namespaces/default/pods/p-0", "strategic",
                  '{"metadata":{"annotations":{"gpupool.io/gpu":"1"}}}')
    assert out.rc == 0 and out.object["metadata"]["annotations"] == {"gpupool.io/gpu": "1"}
    out = kubectl(api.kubeconfig, "patch", "/api/v1/nodes/n1/status", "merge",
                  '{"status":{"capacity":{"example.com/gpu-mem":"80"}}}')
    assert out.rc == 0
    assert out.object["status"]["capacity"] == {"cpu": "4", "example.com/gpu-mem": "80"}
    out = kubectl(api.kubeconfig, "patch", "/api/v1/nodes/n1", "json",
                  '[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]')
    assert out.rc == 0 and out.object["metadata"]["labels"] == {"a": "b"}
    ctypes = [r["headers"]["Content-Type"] for r in api.requests() if r["method"] == "PATCH"]
    assert ctypes == ["application/strategic-merge-patch+json", "application/merge-patch+json",
                      "application/json-patch+json"]


def test_patch_conflict_not_retried(api):
    pods_created(api, 1)
    out = kubectl(api.kubeconfig, "patch", "/api/v1/namespaces/default/pods/p-0", "strategic",
                  '{"metadata":{"resourceVersion":"1","annotations":{"a":"b"}}}')
    assert out.rc == 1 and out.field("reason") == "Conflict"
    assert "the object has been modified" in out.field("message")
    api.add_fault(method="PATCH", path="/pods/p-0", status=500, count=-1)
    out = kubectl(api.kubeconfig, "patch", "/api/v1/namespaces/default/pods/p-0", "merge", '{}',
                  options=["--backoff-ms", "1"])
    assert out.rc == 1
    assert len(requests_to(api, "/pods/p-0", "PATCH")) == 2     # one per call


def test_post_create_and_already_exists(api):
    body = '{"metadata":{"name":"unhealthy-gpu-n1"},"data":{"gpus":"0,3"}}'
    out = kubectl(api.kubeconfig, "post", "/api/v1/namespaces/kube-system/configmaps", body)
    assert out.rc == 0 and out.object["metadata"]["namespace"] == "kube-system"
    out = kubectl(api.kubeconfig, "post", "/api/v1/namespaces/kube-system/configmaps", body)
    assert out.rc == 1 and out.field("reason") == "AlreadyExists"


# ------------------------------------------------------------------ WATCH

def test_watch_events_split_across_chunks(api):
    pods_created(api, 3, padding=300)
    start = str(api.store.rv)
    pods_created(api, 5, prefix="w-", padding=300)
    api.chunk_bytes = 7      # every event arrives in 7-byte pieces
    out = kubectl(api.kubeconfig, "watch", "/api/v1/pods", start,
                  options=["--watch-timeout-s", "1"])
    assert out.rc == 0, out.stdout
    assert [e[1] for e in out.events] == ["default/w-%d" % i for i in range(5)]
    assert all(e[0] == "ADDED" for e in out.events)
    assert out.field("rv") == out.events[-1][2] == str(api.store.rv)
    assert out.stats["peak_body"] > 0         # lines really were reassembled
    q = requests_to(api, "/api/v1/pods")[0]["query"]
    assert q == {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": "1",
                 "resourceVersion": start}


def test_watch_too_old_http_410(api):
    pods_created(api, 2)
    old = str(api.store.rv - 1)
    api.store.compact()
    out = kubectl(api.kubeconfig, "watch", "/api/v1/pods", old)
    assert out.rc == 2 and out.field("http") == "410"
    assert "too old resource version" in out.field("message")


def test_watch_error_event_410_is_gone(api):
    api.add_fault(method="GET", path="/api/v1/pods", watch=True, action="watch_error", status=410)
    out = kubectl(api.kubeconfig, "watch", "/api/v1/pods", str(api.store.rv))
    assert out.rc == 2 and out.field("reason") == "Expired"


def test_watch_error_event_other_and_garbage(api):
    api.add_fault(method="GET", path="/api/v1/pods", watch=True, action="watch_error", status=500,
                  message="internal watch trouble")
    out = kubectl(api.kubeconfig, "watch", "/api/v1/pods", str(api.store.rv))
    assert out.rc == 1 and out.field("message") == "internal watch trouble"
    api.add_fault(method="GET", path="/api/v1/pods", watch=True, action="watch_garbage")
    out = kubectl(api.kubeconfig, "watch", "/api/v1/pods", str(api.store.rv))
    assert out.rc == 1 and out.field("reason") == "BadResponse"
    assert "malformed event" in out.field("message")


# ------------------------------------------------------------------ reflector

class Reflector:
    """kubectl_min reflect in the background; lines collected as they come."""

    def __init__(self, kubeconfig, path, limit="2", options=()):
        argv = WRAPPER + [KUBECTL_MIN, "--kubeconfig", kubeconfig, "--backoff-ms", "20"]
        argv += list(options) + ["reflect", path, limit]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env_for_child())
        self.lines = []
        self.q = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.q.put(line.rstrip("\n"))

    def wait_for(self, predicate, what, timeout=20):
        deadline = time.monotonic() + timeout * SCALE
        while not any(predicate(l) for l in self.lines):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("timed out waiting for %s; got %r" % (what, self.lines))
            try:
                self.lines.append(self.q.get(timeout=left))
            except queue.Empty:
                pass
        return [l for l in self.lines if predicate(l)]

    def stop(self):
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        rc = self.proc.wait(timeout=30 * SCALE)
        stderr = self.proc.stderr.read()
        while True:
            try:
                self.lines.append(self.q.get(timeout=5))
            except queue.Empty:
                break
            if self.lines[-1].startswith("STATS"):
                break
        out = Output(rc, "\n".join(self.lines) + "\n", stderr)
        assert rc == 3 and out.result.startswith("RESULT CANCELLED"), (rc, self.lines, stderr)
        return out


def create_cm(api, name):
    return api.put_object("configmaps", {"metadata": {"name": name, "namespace": "default"}})


CM_PATH = "/api/v1/namespaces/default/configmaps"


def test_reflector_lists_watches_and_resumes_after_drop(api):
    for i in range(5):
        create_cm(api, "cm-%d" % i)
    r = Reflector(api.kubeconfig, CM_PATH)
    r.wait_for(lambda l: l.startswith("LIST_END"), "the list")
    assert [l.split()[1] for l in r.lines if l.startswith("ITEM")] == \
        ["default/cm-%d" % i for i in range(5)]
    wait_until(lambda: api.watch_count() > 0, "an open watch")
    six = create_cm(api, "cm-6")["metadata"]["resourceVersion"]
    r.wait_for(lambda l: l.startswith("EVENT ADDED default/cm-6"), "cm-6")
    assert api.drop_watches() == 1                  # abrupt: connection cut mid-stream
    r.wait_for(lambda l: l.startswith("RETRY"), "the dropped watch reported")
    create_cm(api, "cm-7")
    r.wait_for(lambda l: l.startswith("EVENT ADDED default/cm-7"), "cm-7 after the resume")
    out = r.stop()
    assert sum(1 for l in out.lines if l == "LIST_BEGIN") == 1     # resumed, not re-listed
    watches = [q for q in requests_to(api, CM_PATH) if q["query"].get("watch")]
    assert watches[1]["query"]["resourceVersion"] == six
    assert sum(1 for l in out.lines if "cm-6" in l) == 1           # no duplicate event


def test_reflector_relists_on_410(api):
    create_cm(api, "a")
    r = Reflector(api.kubeconfig, CM_PATH)
    r.wait_for(lambda l: l.startswith("LIST_END"), "the first list")
    wait_until(lambda: api.watch_count() > 0, "an open watch")
    # Next watch: 410 as an ERROR event; the one after: 410 as an HTTP status.
    api.add_fault(method="GET", path=CM_PATH, watch=True, action="watch_error", status=410)
    api.add_fault(method="GET", path=CM_PATH, watch=True, status=410, reason="Expired")
    create_cm(api, "b")
    r.wait_for(lambda l: l.startswith("EVENT ADDED default/b"), "b")
    api.drop_watches(clean=True)
    lists = lambda l: l.startswith("LIST_END")    # noqa: E731
    while len(r.wait_for(lists, "two re-lists")) < 3:
        r.lines.append(r.q.get(timeout=20 * SCALE))
    wait_until(lambda: api.watch_count() > 0, "an open watch")
    create_cm(api, "c")
    r.wait_for(lambda l: l.startswith("EVENT ADDED default/c"), "c after the re-lists")
    out = r.stop()
    retries = [l for l in out.lines if l.startswith("RETRY 410")]
    assert len(retries) == 2, out.lines
    last_list = out.lines[len(out.lines) - 1 - out.lines[::-1].index("LIST_BEGIN"):]
    assert [l.split()[1] for l in last_list if l.startswith("ITEM")] == ["default/a", "default/b"]


def test_reflector_bookmark_moves_resume_point(api):
    create_cm(api, "a")
    r = Reflector(api.kubeconfig, CM_PATH)
    r.wait_for(lambda l: l.startswith("LIST_END"), "the list")
    wait_until(lambda: api.watch_count() > 0, "an open watch")
    api.put_object("pods", {"metadata": {"name": "unrelated", "namespace": "default"}})
    api.send_bookmarks()
    bm = r.wait_for(lambda l: l.startswith("EVENT BOOKMARK"), "a bookmark")[0]
    assert bm.split()[3] == str(api.store.rv)
    api.drop_watches(clean=True)
    wait_until(lambda: len([q for q in requests_to(api, CM_PATH) if q["query"].get("watch")]) >= 2,
               "the second watch")
    r.stop()
    watches = [q for q in requests_to(api, CM_PATH) if q["query"].get("watch")]
    assert watches[1]["query"]["resourceVersion"] == bm.split()[3]


def test_reflector_backs_off_while_server_fails(api):
    api.add_fault(method="GET", path=CM_PATH, status=503, count=4)
    r = Reflector(api.kubeconfig, CM_PATH, options=["--attempts", "1"])
    r.wait_for(lambda l: l.startswith("LIST_END"), "the list after the failures")
    out = r.stop()
    assert len([l for l in out.lines if l.startswith("RETRY 503")]) == 4
    lists = [q for q in requests_to(api, CM_PATH) if not q["query"].get("watch")]
    gaps = [b["time"] - a["time"] for a, b in zip(lists, lists[1:])]
    # 20 ms doubling with jitter in [base/2, base): >= 10, 20, 40, 80 ms.
    assert [g >= m for g, m in zip(gaps, (0.0095, 0.0195, 0.0395, 0.0795))] == [True] * 4, gaps


# ------------------------------------------------------------------ TLS and auth

@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    return make_certs(str(tmp_path_factory.mktemp("certs")))


@pytest.fixture
def tls_api(certs):
    srv = FakeApiServer(tls_dir=certs, tokens=["good-token"], client_cert_auth=True).start()
    srv.put_object("nodes", {"metadata": {"name": "n1"}})
    yield srv
    srv.stop()


def b64(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def test_https_bearer_token(tls_api, certs, tmp_path):
    ca = os.path.join(certs, "ca.crt")
    kc = write_kubeconfig(tmp_path / "kc", tls_api.url, {"token": "good-token"},
                          {"certificate-authority": ca})
    out = kubectl(kc, "get", "/api/v1/nodes/n1")
    assert out.rc == 0 and out.object["metadata"]["name"] == "n1"
    assert tls_api.requests()[-1]["headers"]["Authorization"] == "Bearer good-token"
    kc = write_kubeconfig(tmp_path / "kc2", tls_api.url, {"token": "bad-token"},
                          {"certificate-authority-data": b64(ca)})
    out = kubectl(kc, "get", "/api/v1/nodes/n1")
    assert out.rc == 1 and out.field("http") == "401" and out.field("reason") == "Unauthorized"


def test_https_client_certificate(tls_api, certs, tmp_path):
    user = {"client-certificate-data": b64(os.path.join(certs, "client.crt")),
            "client-key-data": b64(os.path.join(certs, "client.key"))}
    kc = write_kubeconfig(tmp_path / "kc", tls_api.url, user,
                          {"certificate-authority-data": b64(os.path.join(certs, "ca.crt"))})
    out = kubectl(kc, "list", "/api/v1/nodes")
    assert out.rc == 0 and out.items == ["n1"]
    req = tls_api.requests()[-1]
    assert req["client_cn"] == "gpupool-test" and "Authorization" not in req["headers"]
    # Files relative to the kubeconfig work the same.
    for name in ("client.crt", "client.key", "ca.crt"):
        shutil.copy(os.path.join(certs, name), tmp_path / name)
    kc = write_kubeconfig(tmp_path / "kc3", tls_api.url,
                          {"client-certificate": "client.crt", "client-key": "client.key"},
                          {"certificate-authority": "ca.crt"})
    assert kubectl(kc, "get", "/api/v1/nodes/n1").rc == 0


def test_https_untrusted_server_and_insecure(tls_api, certs, tmp_path):
    kc = write_kubeconfig(tmp_path / "kc", tls_api.url, {"token": "good-token"},
                          {"certificate-authority": os.path.join(certs, "other-ca.crt")})
    out = kubectl(kc, "get", "/api/v1/nodes/n1", options=["--attempts", "3"])
    assert out.rc == 1 and out.field("reason") == "TLSError"
    assert out.stats["requests"] == 1              # a TLS failure is not retried
    kc = write_kubeconfig(tmp_path / "kc2", tls_api.url, {"token": "good-token"},
                          {"insecure-skip-tls-verify": True})
    assert kubectl(kc, "get", "/api/v1/nodes/n1").rc == 0


def test_https_watch_and_reflector(tls_api, certs, tmp_path):
    kc = write_kubeconfig(tmp_path / "kc", tls_api.url, {"token": "good-token"},
                          {"certificate-authority": os.path.join(certs, "ca.crt")})
    r = Reflector(kc, "/api/v1/nodes")
    r.wait_for(lambda l: l.startswith("LIST_END"), "the list")
    wait_until(lambda: tls_api.watch_count() > 0, "an open watch")
    tls_api.put_object("nodes", {"metadata": {"name": "n2"}})
    r.wait_for(lambda l: l.startswith("EVENT ADDED n2"), "n2")
    r.stop()


def test_rotated_token_file_is_reread_on_401(tls_api, certs, tmp_path):
    token = tmp_path / "token"
    token.write_text("good-token\n")
    kc = write_kubeconfig(tmp_path / "kc", tls_api.url, {"tokenFile": "token"},
                          {"certificate-authority": os.path.join(certs, "ca.crt")})
    tls_api.tokens.clear()
    tls_api.tokens.add("rotated-token")
    token.write_text("rotated-token\n")
    out = kubectl(kc, "get", "/api/v1/nodes/n1")
    assert out.rc == 0
    # Rotate under a running client, the server first: its next watch gets a
    # 401 with the token it holds (the file has not changed yet); once the
    # file changes it is re-read at once (not a minute later) and the
    # client goes on with the new token. The 401 is waited for before the
    # file is written, so the test does not depend on which comes first.
    r = Reflector(kc, "/api/v1/nodes")
    r.wait_for(lambda l: l.startswith("LIST_END"), "the list")
    tls_api.tokens.clear()
    tls_api.tokens.add("third-token")
    tls_api.drop_watches(clean=True)
    wait_until(lambda: any(q["headers"].get("Authorization") == "Bearer rotated-token"
                           and q["status"] == 401 for q in tls_api.requests()),
               "a 401 for the old token")
    token.write_text("third-token")
    wait_until(lambda: any(q["headers"].get("Authorization") == "Bearer third-token"
                           for q in tls_api.requests()), "a request with the new token")
    tls_api.put_object("nodes", {"metadata": {"name": "n3"}})
    r.wait_for(lambda l: l.startswith("EVENT ADDED n3"), "n3 with the rotated token")
    r.stop()


def test_in_cluster_config(tls_api, certs, tmp_path):
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("good-token")
    shutil.copy(os.path.join(certs, "ca.crt"), sa / "ca.crt")
    (sa / "namespace").write_text("gpu-system\n")
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(tls_api.port)}
    out = kubectl(None, "config", options=["--in-cluster", "--sa-dir", str(sa)], extra_env=env)
    assert out.lines[:2] == ["SERVER https://127.0.0.1:%d" % tls_api.port, "NAMESPACE gpu-system"]
    out = kubectl(None, "get", "/api/v1/nodes/n1", options=["--in-cluster", "--sa-dir", str(sa)],
                  extra_env=env)
    assert out.rc == 0


def test_bad_kubeconfig_is_reported(tmp_path):
    kc = tmp_path / "kc"
    kc.write_text("current-context: x\nclusters: []\ncontexts: [{name: x, context: {cluster: c}}]\n")
    out = kubectl(str(kc), "get", "/api/v1/nodes")
    assert out.rc == 1 and out.field("reason") == "Config"
    assert '%s:3: cluster "c" not found in clusters' % kc in out.field("message")


def test_delete_sends_delete_options_and_reports_not_found(api):
    api.put_object("configmaps", {"metadata": {"name": "cm", "namespace": "default"}})
    uid = api.store.get("configmaps", "default", "cm")["metadata"]["uid"]
    out = kubectl(api.kubeconfig, "delete", "/api/v1/namespaces/default/configmaps/cm", uid)
    assert out.rc == 0, out.stdout
    sent = requests_to(api, "/configmaps/cm", "DELETE")
    body = json.loads(sent[0]["body"])
    assert body["kind"] == "DeleteOptions" and body["preconditions"] == {"uid": uid}
    assert body["propagationPolicy"] == "Background"
    out = kubectl(api.kubeconfig, "delete", "/api/v1/namespaces/default/configmaps/cm")
    assert out.rc == 1 and out.field("http") == "404" and out.field("reason") == "NotFound"


def test_delete_is_retried_after_a_server_error(api):
    api.put_object("configmaps", {"metadata": {"name": "cm", "namespace": "default"}})
    api.add_fault(method="DELETE", path="/configmaps/cm", status=503)
    out = kubectl(api.kubeconfig, "delete", "/api/v1/namespaces/default/configmaps/cm",
                  options=["--backoff-ms", "10"])
    assert out.rc == 0, out.stdout
    assert len(requests_to(api, "/configmaps/cm", "DELETE")) == 2


def test_writer_retries_until_the_write_lands_and_warns_with_an_event(api):
    api.put_object("configmaps", {"metadata": {"name": "cm", "namespace": "default"}})
    api.add_fault(method="PATCH", path="/configmaps/cm", status=403, reason="Forbidden",
                  message="configmaps is forbidden", count=3)
    out = kubectl(api.kubeconfig, "writer", "/api/v1/namespaces/default/configmaps/cm",
                  '{"data":{"k":"v"}}', "n1", "10000")
    assert out.rc == 0, out.stdout + out.stderr
    assert "WRITER attempts=4 failures=3 events=1 synced=1" in out.lines, out.stdout
    assert api.store.get("configmaps", "default", "cm")["data"] == {"k": "v"}
    # One Event per failure streak, about the node, in "default", naming the refusal.
    events = [e for e in api.store.objects.values() if e.get("kind") == "Event"]
    assert len(events) == 1, events
    ev = events[0]
    assert ev["type"] == "Warning" and ev["reason"] == "TestWriteFailed"
    assert ev["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    assert ev["metadata"]["namespace"] == "default"
    assert "configmaps is forbidden" in ev["message"]
    # The backoff grew: the gaps between the PATCHes are not all the first one.
    times = [q["time"] for q in requests_to(api, "/configmaps/cm", "PATCH")]
    assert len(times) == 4


def test_writer_that_never_lands_reports_unsynced(api):
    out = kubectl(api.kubeconfig, "writer", "/api/v1/namespaces/default/configmaps/missing",
                  '{"data":{"k":"v"}}', "n1", "400")
    assert out.rc == 1
    line = next(l for l in out.lines if l.startswith("WRITER "))
    assert "synced=0" in line and "failures=0" not in line
