"""The bind fence of docs/ha.md against what happens between the holder's
deadline check and its send: a stalled exec credential plugin (N1) and the
process stopped at each point of that path (N2).

One extender with --leader-elect on the in-process fake API server, whose
log of requests (arrival times) is the evidence. The fence a Binding must
arrive before is computed from that log as the holder sees it: its last
successful Lease write before the Binding, started no later than the write
arrived, plus lease duration - margin. A Binding arriving later was sent
after the holder's fence: another replica may already hold the Lease.
"""

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fakeapi"))

from conftest import scaled  # noqa: E402
from fake_apiserver import FakeApiServer  # noqa: E402
from test_extender import WRAPPER, node, pod, wait_for  # noqa: E402
from test_extender_ha import LEASE_PATH, Replica, bound_pods, overcommitted  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
PLUGIN = os.path.join(ROOT, "test", "fakeapi", "fake_exec_plugin.py")
LEASE_S = 2       # D
MARGIN_S = 0.5    # M: the fence is D - M = 1.5 s after a renew starts
ELECTION = ["--leader-elect-lease-duration", "%ds" % LEASE_S,
            "--leader-elect-renew-deadline", "1200ms",
            "--leader-elect-retry-period", "400ms",
            "--leader-elect-fence-margin", "%dms" % int(MARGIN_S * 1000)]
# Loopback: a Binding sent before the fence arrives well within this.
ARRIVAL_SLACK_S = 0.1


@pytest.fixture
def api():
    srv = FakeApiServer(fixture={"nodes": [node("n1", 32, 2)]}).start()
    yield srv
    srv.stop()


def exec_kubeconfig(api, d, stall_file, log_file):
    """A kubeconfig whose user is the fake exec plugin: 2 s credentials."""
    path = d / "kubeconfig-exec"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": api.url}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "u"}}],
        "users": [{"name": "u", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
            "args": [PLUGIN], "interactiveMode": "Never",
            "env": [{"name": "FAKE_EXEC_EXPIRY", "value": "2"},
                    {"name": "FAKE_EXEC_STALL", "value": str(stall_file)},
                    {"name": "FAKE_EXEC_LOG", "value": str(log_file)}]}}}]}))
    return path


def late_bindings(api):
    """Bindings that arrived after the fence of the Lease write before them."""
    reqs = api.requests()
    late = []
    for b in reqs:
        if not (b["method"] == "POST" and b["path"].endswith("/binding")):
            continue
        writes = [w["time"] for w in reqs if w["path"].startswith(LEASE_PATH)
                  and w["method"] in ("PUT", "POST") and (w["status"] or 500) < 300
                  and w["time"] <= b["time"]]
        fence = (max(writes) if writes else 0) + LEASE_S - MARGIN_S + ARRIVAL_SLACK_S
        if b["time"] > fence:
            late.append((b["path"], round(b["time"] - fence, 3)))
    return late


def holder(api, rep):
    wait_for(lambda: rep.role() == "holder", "the replica holding the lease", timeout=30)
    return rep


def test_stalled_exec_credential_never_carries_a_binding_past_the_fence(api, tmp_path):
    """N1: the holder's exec plugin stalls for 6 s (4 x the fence) just as
    a bind needs a new credential. Nothing may be sent after the fence, and
    the holder must step down on time instead of waiting with the plugin."""
    stall, log = tmp_path / "stall", tmp_path / "plugin.log"
    (tmp_path / "r0").mkdir()
    kc = exec_kubeconfig(api, tmp_path / "r0", stall, log)
    (tmp_path / "x").mkdir()
    rep = Replica(api, tmp_path / "x", "r0", ELECTION + ["--kubeconfig", str(kc)])
    try:
        holder(api, rep)
        p = api.put_object("pods", pod("late", 4))
        time.sleep(0.5)  # the pod watch delivers it
        runs = len(log.read_text().splitlines())
        stall_s = 6.0
        stall.write_text("%f" % (time.time() + scaled(stall_s)))
        t_stall = time.time()
        # A run has begun (the credential expired for every client): it
        # sleeps until the stall ends.
        wait_for(lambda: len(log.read_text().splitlines()) > runs, "a credential run", timeout=5)
        status, body = rep.bind(p)
        t_answer = time.time()
        assert status == 200 and body.get("Error"), (body, late_bindings(api))
        # The bind gave up by its fence, not when the plugin came back.
        assert t_answer - t_stall < LEASE_S + 1, (t_answer - t_stall, body)
        # The holder steps down within its renew deadline (1.2 s) of its
        # last renew, while the plugin still stalls.
        wait_for(lambda: rep.role() != "holder", "the holder stepping down",
                 timeout=scaled(stall_s) - 2)
        assert time.time() - t_stall < scaled(stall_s)
        # Past the stall: the late Binding never reached the API server.
        while time.time() < t_stall + scaled(stall_s) + 1:
            time.sleep(0.2)
        sent = [r["time"] - t_stall for r in api.requests()
                if r["method"] == "POST" and r["path"].endswith("/late/binding")]
        assert sent == [], sent
        assert late_bindings(api) == [], late_bindings(api)
        # Credentials are back: the replica takes its lease again and binds.
        holder(api, rep)
        deadline = time.time() + scaled(15)
        while time.time() < deadline:
            status, body = rep.bind(p)
            if body.get("Error") == "":
                break
            time.sleep(0.3)
        assert body.get("Error") == "", body
        assert late_bindings(api) == [], late_bindings(api)
        assert bound_pods(api) == ["late"] and overcommitted(api) == {}
    finally:
        if stall.exists():
            stall.unlink()
        rep.proc.terminate()
        rep.proc.wait(scaled(20))


# The path from the deadline check in perform_once to the send(), in order:
# just past the check's clock read; the first libcurl set-up call after
# it; the transfer's start; libcurl's own clock read and its poll() on the
# connection inside the transfer; the client's CURLOPT_PREREQFUNCTION
# callback (before its own clock read). Absent in a build without the
# callback (the old code), that point is reported as not on the path.
PAUSE_POINTS = ["after-check", "curl_easy_setopt", "curl_easy_perform", "clock_gettime", "poll",
                "on_prereq"]
GDB_SCRIPT = os.path.join(HERE, "fence_pause_gdb.py")


class GdbPauser:
    """gdb attached to the extender, running fence_pause_gdb.py."""

    def __init__(self, pid, points, pause_s):
        env = dict(os.environ, FENCE_POINTS=",".join(points), FENCE_PAUSE_S=str(pause_s))
        self.proc = subprocess.Popen(["gdb", "-nx", "-batch", "-p", str(pid), "-x", GDB_SCRIPT],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env)
        self.lines = queue.Queue()
        self.text = []
        self.stopped = False  # the current bind has reached its point
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stdout:
            self.text.append(line)
            if line.startswith("FENCE "):
                self.lines.put(line.split()[1:])

    def next(self, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                return self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
        pytest.fail("gdb said nothing for %ss:\n%s" % (timeout, "".join(self.text)))

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def set_holder(api, identity):
    """Writes the Lease as another replica (or a release, identity "") would."""
    def mutate(obj):
        obj["spec"]["holderIdentity"] = identity
        return obj
    api.store.update("leases", "kube-system", "gpupool-scheduler-extender", mutate)


@pytest.mark.skipif(shutil.which("gdb") is None, reason="needs gdb")
@pytest.mark.skipif(bool(WRAPPER), reason="gdb attaches to the extender, not to its wrapper")
def test_holder_paused_anywhere_between_check_and_send_sends_nothing_late(api, tmp_path):
    """N2: the whole holder process is stopped (gdb, all threads) at each
    point from its deadline check to its send, for longer than the fence;
    meanwhile another replica takes the Lease, D after the holder's last
    write. Once resumed, the holder must send no Binding: every Binding the
    API server received arrived before the fence of the holder's Lease
    write before it."""
    pause_s = LEASE_S + 0.5
    rep = Replica(api, tmp_path, "r0", ELECTION)
    gdbp = None
    outcome = {}
    try:
        holder(api, rep)
        gdbp = GdbPauser(rep.proc.pid, PAUSE_POINTS, pause_s)
        for i, point in enumerate(PAUSE_POINTS):
            holder(api, rep)
            p = api.put_object("pods", pod("g%d" % i, 4))
            assert gdbp.next(scaled(30)) == ["ARMED", point]
            time.sleep(0.3)  # the pod watch delivers it
            answer = {}

            def bind():
                # Refused before the Binding (the holder still re-listing):
                # again, as kube-scheduler would, until one reaches gdb.
                while True:
                    answer["r"] = rep.bind(p)
                    if "retry" not in answer["r"][1].get("Error", "") or gdbp.stopped:
                        return
                    time.sleep(0.1)
            th = threading.Thread(target=bind)
            th.start()
            what, *rest = gdbp.next(scaled(30))
            gdbp.stopped = True
            assert rest[0] == point, (what, rest, point)
            if what == "NOT-ON-PATH":
                outcome[point] = "not on the path"
                gdbp.stopped = False
                th.join(scaled(30))
                continue
            assert what == "PAUSED", (what, rest)
            # Another replica takes over D after its first sight of the
            # holder's last write (no sooner than that write arrived).
            last = max(w["time"] for w in api.requests() if w["path"].startswith(LEASE_PATH)
                       and w["method"] in ("PUT", "POST") and (w["status"] or 500) < 300)
            while time.time() < last + LEASE_S + 0.05:
                time.sleep(0.02)
            set_holder(api, "another-replica")
            what, *rest = gdbp.next(scaled(30))
            assert what == "RESUMED", (what, rest)
            th.join(scaled(30))
            status, body = answer["r"]
            outcome[point] = body.get("Error") or "bound"
            gdbp.stopped = False
            # The holder's next renew meets the other's write: it steps
            # down. The other "releases", and the replica takes it again.
            wait_for(lambda: rep.role() != "holder", "the holder stepping down", timeout=10)
            set_holder(api, "")
        assert gdbp.next(scaled(30))[0] == "DETACHED"
        late = late_bindings(api)
        assert late == [], (late, outcome)
        assert all(v != "not on the path" for v in outcome.values()), outcome
        # Each bind was refused (retryably), its charge given back.
        assert all("deadline" in v.lower() for v in outcome.values()), outcome
        assert overcommitted(api) == {}
        print("pause outcomes:", outcome)
    finally:
        if gdbp is not None:
            gdbp.close()
        rep.proc.terminate()
        rep.proc.wait(scaled(20))
