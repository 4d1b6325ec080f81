"""Several gpupool-scheduler-extender replicas with --leader-elect (docs/ha.md).

Two or three real extender processes share one in-process fake API server,
which keeps the coordination.k8s.io/v1 Lease like an apiserver (a
resourceVersion-guarded PUT, 409 on a stale one). The tests send binds to
any replica, as a Service would, break the Lease, the watches, the whole
API server or a replica, and check after each that no GPU holds more than
its memory (`overcommitted`, from the API server's own objects: bound pods
and their GPU annotations) and when the binds happened.
"""

import json
import os
import re
import signal
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fakeapi"))

from conftest import scaled  # noqa: E402
from fake_apiserver import FakeApiServer  # noqa: E402
from test_extender import (PREFIX, Extender, bind_args, free_port, node, pod,  # noqa: E402
                           wait_for)

LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
GPU_MEM = 16      # per GPU; node n1 has 2 GPUs
POD_MEM = 4       # 8 pods fill n1


@pytest.fixture
def api():
    srv = FakeApiServer(fixture={"nodes": [node("n1", 2 * GPU_MEM, 2)]}).start()
    yield srv
    srv.stop()


_ports_given = set()


def distinct_port():
    """A free port never handed out before in this run (free_port alone may
    return the same one twice: one replica's metrics port would then be
    another's API port)."""
    while True:
        p = free_port()
        if p not in _ports_given:
            _ports_given.add(p)
            return p


class Replica(Extender):
    """One replica: its own port (advertised), its own metrics port."""

    def __init__(self, api, tmp_path, name, args=()):
        self.name = name
        self.port_fixed = distinct_port()
        self.metrics_port = distinct_port()
        d = tmp_path / name
        d.mkdir()
        # A token of its own: the API server's log tells whose request it was.
        kubeconfig = d / "kubeconfig-own"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
            "clusters: [{name: t, cluster: {server: '%s'}}]\n"
            "users: [{name: u, user: {token: %s}}]\n"
            "contexts: [{name: t, context: {cluster: t, user: u}}]\n" % (api.url, name))
        super().__init__(api, d, ["--kubeconfig", str(kubeconfig),
                                  "--leader-elect", "--metrics-port", str(self.metrics_port),
                                  "--advertise-url", "http://127.0.0.1:%d" % self.port_fixed]
                         + list(args), port=self.port_fixed)

    def metric(self, line_prefix):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=scaled(10))
        try:
            c.request("GET", "/metrics")
            text = c.getresponse().read().decode()
        finally:
            c.close()
        for line in text.splitlines():
            if line.startswith(line_prefix + " "):
                return float(line.split()[-1])
        return None

    def role(self):
        for r in ("holder", "syncing", "follower", "candidate"):
            try:
                if self.metric('gpupool_extender_leader_state{state="%s"}' % r) == 1:
                    return r
            except OSError:
                return None
        return None

    def bind(self, p, node_name="n1", headers=None):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=scaled(30))
        try:
            c.request("POST", PREFIX + "/bind", body=json.dumps(bind_args(p, node_name)).encode(),
                      headers=dict({"Content-Type": "application/json"}, **(headers or {})))
            r = c.getresponse()
            return r.status, json.loads(r.read().decode())
        finally:
            c.close()

    def kill(self, sig):
        self.expect_exit = True
        self.proc.send_signal(sig)
        self.proc.wait(scaled(20))


@pytest.fixture
def replicas(api, tmp_path):
    started = []

    def start(n, *args):
        out = [Replica(api, tmp_path, "r%d" % (len(started) + i), args) for i in range(n)]
        started.extend(out)
        return out
    yield start
    for r in started:
        if r.proc.poll() is None:
            r.proc.send_signal(signal.SIGTERM)
            try:
                r.proc.wait(scaled(20))
            except Exception:
                r.proc.kill()
                r.proc.wait()
        if not getattr(r, "expect_exit", False):
            assert r.proc.returncode == 0, r.log()
        assert not re.search(r"ERROR: (Address|Leak)Sanitizer|runtime error:", r.log()), r.log()


def lease(api):
    try:
        return api.store.get("leases", "kube-system", "gpupool-scheduler-extender")
    except Exception:
        return None


def holder_of(api, reps):
    """The replica the Lease names, once it is in the holder role (cache proven)."""
    def find():
        ls = lease(api)
        url = ((ls or {}).get("metadata", {}).get("annotations") or {}).get("gpupool.io/bind-url", "")
        for r in reps:
            if url.startswith("http://127.0.0.1:%d/" % r.port_fixed) and r.role() == "holder":
                return r
        return None
    return wait_for(find, "a lease holder", timeout=30)


def new_pods(api, n, prefix="p"):
    out = []
    for i in range(n):
        out.append(api.put_object("pods", pod("%s%d" % (prefix, i), POD_MEM)))
    return out


def overcommitted(api):
    """{(node, gpu): charged} over GPU_MEM, from the API server's bound pods."""
    use = {}
    with api.store.lock:
        pods = [o for (res, _, _), o in api.store.objects.items() if res == "pods"]
    for p in pods:
        ann = p["metadata"].get("annotations") or {}
        if not p.get("spec", {}).get("nodeName") or "ALIYUN_COM_GPU_MEM_IDX" not in ann:
            continue
        for idx in ann["ALIYUN_COM_GPU_MEM_IDX"].split(","):
            key = (p["spec"]["nodeName"], idx)
            use[key] = use.get(key, 0) + int(ann["ALIYUN_COM_GPU_MEM_DEV"] if "," in
                                             ann["ALIYUN_COM_GPU_MEM_IDX"] else ann["ALIYUN_COM_GPU_MEM_POD"])
    return {k: v for k, v in use.items() if v > GPU_MEM}


def bound_pods(api):
    with api.store.lock:
        return sorted(o["metadata"]["name"] for (res, _, _), o in api.store.objects.items()
                      if res == "pods" and o.get("spec", {}).get("nodeName"))


def bindings(api, name=None, by=None):
    """Binding POSTs the API server accepted, in order (by: a replica)."""
    return [r for r in api.requests()
            if r["method"] == "POST" and r["path"].endswith("/binding") and r["status"] == 201
            and (name is None or r["path"].split("/")[-2] == name)
            and (by is None or r["headers"].get("Authorization") == "Bearer " + by.name)]


def lease_writes(api, ok=True):
    return [r for r in api.requests() if r["path"].startswith(LEASE_PATH)
            and r["method"] in ("PUT", "POST") and ((r["status"] or 0) < 300) == ok]


def bind_until_ok(rep, p, timeout):
    """Retries a bind as kube-scheduler would; the monotonic time it succeeded."""
    deadline = time.monotonic() + scaled(timeout)
    last = None
    while time.monotonic() < deadline:
        try:
            status, body = rep.bind(p)
            last = body
            if status == 200 and body.get("Error") == "":
                return time.monotonic()
        except OSError as e:
            last = str(e)
        time.sleep(0.2)
    pytest.fail("bind of %s never succeeded within %ss: %s\n%s" % (p["metadata"]["name"], timeout,
                                                                  last, rep.log()))


def bind_all_concurrently(reps, pods):
    """One thread per pod, each sent to a replica in turn; the answers."""
    results = [None] * len(pods)

    def one(i):
        try:
            results[i] = reps[i % len(reps)].bind(pods[i])
        except OSError as e:
            results[i] = (0, {"Error": str(e)})
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(pods))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(scaled(60))
    return results


# ---------------------------------------------------------------- tests

def test_two_replicas_forward_and_charge_once(api, replicas):
    reps = replicas(2)
    h = holder_of(api, reps)
    f = [r for r in reps if r is not h][0]
    wait_for(lambda: f.role() == "follower", "the other replica following")
    # A follower is healthy: the Service and the probes keep it.
    assert f.request("GET", "/healthz") == (200, "ok")
    p = new_pods(api, 1, "one")[0]
    status, body = f.bind(p)
    assert (status, body) == (200, {"Error": ""}), f.log()
    assert len(bindings(api, "one0")) == 1
    assert f.metric('gpupool_extender_binds_forwarded_total{result="answered"}') == 1
    assert h.metric('gpupool_extender_binds_total{result="bound"}') == 1
    assert f.metric('gpupool_extender_binds_total{result="bound"}') == 0
    # The charge is the holder's, once: 12 more pods for the 7 slots left,
    # through both replicas at once.
    results = bind_all_concurrently(reps, new_pods(api, 12))
    ok = [r for r in results if r[1].get("Error") == ""]
    assert len(ok) == 7, results
    assert len(bound_pods(api)) == 8
    assert overcommitted(api) == {}
    # A bind already forwarded once is never forwarded again.
    extra = new_pods(api, 1, "fwd")[0]
    status, body = f.bind(extra, headers={"X-Gpupool-Forwarded": "1"})
    assert status == 200 and "not the leader, retry" in body["Error"]
    assert bindings(api, "fwd0") == []


def test_three_replicas_one_holder_no_overcommit(api, replicas):
    reps = replicas(3)
    h = holder_of(api, reps)
    wait_for(lambda: sorted(r.role() for r in reps) == ["follower", "follower", "holder"],
             "one holder, two followers")
    results = bind_all_concurrently(reps, new_pods(api, 16))
    assert len([r for r in results if r[1].get("Error") == ""]) == 8, results
    assert overcommitted(api) == {}
    # Every accepted Binding came from the holder's own API clients: the
    # followers bound nothing themselves.
    for r in reps:
        if r is not h:
            assert r.metric('gpupool_extender_binds_total{result="bound"}') == 0
    assert h.metric('gpupool_extender_binds_total{result="bound"}') == 8


def test_lease_lost_mid_bind_stops_binding_before_takeover(api, replicas):
    reps = replicas(2)
    h = holder_of(api, reps)
    other = [r for r in reps if r is not h][0]
    identity = lease(api)["spec"]["holderIdentity"]
    pods = new_pods(api, 8)
    # The holder can no longer renew (its writes fail; the other's do not),
    # and every Binding takes 1 s: binds are in flight around the fence.
    api.add_fault(method="PUT", path="/leases/", body_match=identity, status=500, count=-1)
    api.add_fault(method="POST", path="/binding$", action="delay", delay_ms=1000, count=-1)
    t_fault = time.time()
    stop = threading.Event()

    def hammer():
        i = 0
        while not stop.is_set() and i < len(pods):
            try:
                status, body = h.bind(pods[i])
                if body.get("Error") == "" or "already" in body.get("Error", ""):
                    i += 1
            except OSError:
                pass
            time.sleep(0.1)
    t = threading.Thread(target=hammer)
    t.start()
    wait_for(lambda: any(r["method"] == "PUT" and r["status"] == 200 and identity not in r["body"]
                         for r in lease_writes(api)), "the other replica taking the lease",
             timeout=25)
    takeover = min(r["time"] for r in lease_writes(api) if identity not in r["body"])
    stop.set()
    t.join(scaled(30))
    # The old holder's last accepted Binding arrived before the takeover
    # (its binds since are forwarded to the new holder).
    old = [b for b in bindings(api, by=h) if b["time"] >= t_fault]
    assert old, "the holder bound nothing after its renewals began to fail"
    assert all(b["time"] + 1.0 < takeover for b in old), (takeover, [b["time"] for b in old])
    # The holder refused binds once its fence passed (renew failing).
    assert "not renewed in time" in h.log() or "stepping down" in h.log(), h.log()
    api.clear_faults()
    holder_of(api, [other])
    for p in pods:
        if p["metadata"]["name"] not in bound_pods(api):
            bind_until_ok(h, p, 20)    # the old holder now forwards to the new one
    assert overcommitted(api) == {}
    assert len(bound_pods(api)) == 8


def test_stale_replica_never_binds_on_its_stale_cache(api, replicas):
    reps = replicas(2)
    h = holder_of(api, reps)
    f = [r for r in reps if r is not h][0]
    # Every pod watch stalls: the follower's cache no longer sees the pods
    # the holder binds.
    api.add_fault(method="GET", path="/pods$", watch=True, action="stall", count=-1)
    api.drop_watches()
    time.sleep(1)
    for p in new_pods(api, 6):
        bind_until_ok(f, p, 10)      # forwarded: the holder binds
    h.kill(signal.SIGKILL)
    # Pod LISTs take 2 s from now: a new holder that bound before its LIST
    # ended would bind on its stale cache (and over-commit GPU 0 and 1).
    api.add_fault(method="GET", path="/pods$", watch=False, action="delay", delay_ms=2000,
                  count=-1)
    # The stale replica takes over; it must re-list before its first bind.
    rest = new_pods(api, 6, "late")
    t_ok = bind_until_ok(f, rest[0], 20)
    bind_until_ok(f, rest[1], 5)
    results = [f.bind(p) for p in rest[2:]]
    assert all("Error" in r[1] and r[1]["Error"] for r in results), results
    assert overcommitted(api) == {}
    assert len(bound_pods(api)) == 8
    reqs = api.requests()
    took = min(r["seq"] for r in reqs if r["path"].startswith(LEASE_PATH) and r["method"] == "PUT"
               and r["status"] == 200 and "127.0.0.1:%d" % f.port_fixed in r["body"])
    first_bind = min(b["seq"] for b in bindings(api, "late0"))
    lists = [r["seq"] for r in reqs if r["path"] == "/api/v1/pods" and r["method"] == "GET"
             and r["query"].get("watch") not in ("1", "true") and took < r["seq"] < first_bind]
    assert lists, "no fresh pod LIST between the takeover and the first bind"
    assert t_ok


def test_conflict_on_every_lease_write(api, replicas):
    api.add_fault(path="/leases", method="PUT", status=409, count=-1)
    api.add_fault(path="/leases", method="POST", status=409, count=-1)
    reps = replicas(2)
    time.sleep(5)
    pods = new_pods(api, 2)
    for r in reps:
        assert r.role() == "candidate"
        status, body = r.bind(pods[0])
        assert status == 200 and "retry" in body["Error"], body
    assert bindings(api) == []
    assert lease(api) is None
    api.clear_faults()
    holder_of(api, reps)
    bind_until_ok(reps[0], pods[0], 10)
    bind_until_ok(reps[1], pods[1], 10)
    assert overcommitted(api) == {}


def test_api_server_down_30s(api, replicas):
    reps = replicas(2)
    h = holder_of(api, reps)
    pods = new_pods(api, 10)
    bind_until_ok(h, pods[0], 10)
    roles = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            roles.append(tuple(r.role() for r in reps))
            time.sleep(0.3)
    t = threading.Thread(target=sample)
    t.start()
    api.add_fault(path=".*", action="close", count=-1)
    api.drop_watches()
    t_down = time.monotonic()
    while time.monotonic() - t_down < 30:
        for r in reps:
            try:
                status, body = r.bind(pods[1])
                assert body["Error"], "a bind succeeded while the API server was down"
            except OSError:
                pass
        time.sleep(1)
    api.clear_faults()
    t_up = time.monotonic()
    bind_until_ok(reps[1], pods[1], 15)
    assert time.monotonic() - t_up <= scaled(15)
    for i, p in enumerate(pods[2:8]):
        bind_until_ok(reps[i % 2], p, 10)
    for p in pods[8:]:
        assert reps[0].bind(p)[1]["Error"]
    stop.set()
    t.join()
    assert all(sum(1 for x in sample if x in ("holder", "syncing")) <= 1 for sample in roles), roles
    assert overcommitted(api) == {}
    assert len(bound_pods(api)) == 8


def test_sigkill_of_the_holder_fails_over_within_15s(api, replicas):
    reps = replicas(2)
    h = holder_of(api, reps)
    f = [r for r in reps if r is not h][0]
    pods = new_pods(api, 10)
    for p in pods[:4]:
        bind_until_ok(f, p, 10)
    h.kill(signal.SIGKILL)
    t0 = time.monotonic()
    t_ok = bind_until_ok(f, pods[4], 20)
    print("failover after SIGKILL: %.1f s" % (t_ok - t0))
    assert t_ok - t0 <= scaled(15), "failover took %.1f s" % (t_ok - t0)
    for p in pods[5:]:
        f.bind(p)
    assert overcommitted(api) == {}
    assert len(bound_pods(api)) == 8


def test_sigterm_releases_the_lease(api, replicas):
    reps = replicas(2)
    h = holder_of(api, reps)
    f = [r for r in reps if r is not h][0]
    pods = new_pods(api, 2)
    bind_until_ok(f, pods[0], 10)
    h.proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    assert h.proc.wait(scaled(10)) == 0
    h.expect_exit = True
    assert any('"holderIdentity":""' in w["body"] for w in lease_writes(api)), "no release"
    assert "released" in h.log(), h.log()
    t_ok = bind_until_ok(f, pods[1], 10)
    print("takeover after SIGTERM: %.1f s" % (t_ok - t0))
    assert t_ok - t0 <= scaled(3.5), "takeover after SIGTERM took %.1f s" % (t_ok - t0)
    assert overcommitted(api) == {}


@pytest.mark.parametrize("args, words", [
    (["--leader-elect-renew-deadline", "9s"], "renew deadline"),
    (["--leader-elect-lease", "no-slash"], "--leader-elect-lease"),
    (["--leader-elect-lease-duration", "10500ms"], "whole seconds"),
    (["--advertise-url", "ftp://x:1"], "--advertise-url"),
])
def test_bad_leader_flags_are_refused(tmp_path, args, words):
    from conftest import run_program
    from test_extender import EXTENDER_BIN
    proc = run_program([EXTENDER_BIN, "--kubeconfig", str(tmp_path / "none"), "--leader-elect"]
                       + args, timeout=20)
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr, proc.stderr
