"""kubectl-gpupool logging in the way kubectl does, against the fake API server:
exec credential plugins (test/fakeapi/fake_exec_plugin.py: v1 and v1beta1,
expiry, caching, a 401 and a refresh, failures, garbage, a timeout), legacy
auth-providers, token files that rotate, a merged multi-file KUBECONFIG and
--context / --cluster / --user.

    GP_BUILD_DIR       build tree holding bin/kubectl-gpupool (default ./build)
"""

import json
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "test", "fakeapi"))

from fake_apiserver import FakeApiServer  # noqa: E402
from test_cli import GPUPOOL, BUILD, node, pod, run  # noqa: E402

PLUGIN = os.path.join(ROOT, "test", "fakeapi", "fake_exec_plugin.py")
KUBECTL_MIN = os.path.join(BUILD, "test", "kube", "kubectl_min")
V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"

pytestmark = pytest.mark.skipif(not os.path.exists(GPUPOOL), reason="kubectl-gpupool not built")


def cluster_fixture():
    return {"nodes": [node("gpu-a", "192.168.0.70", 16, 1)],
            "pods": [pod("default", "p", "gpu-a", 4, "0")]}


@pytest.fixture
def api():
    srv = FakeApiServer(fixture=cluster_fixture(), tokens=["good"]).start()
    yield srv
    srv.stop()


def write_config(path, clusters, users, contexts, current=None):
    cfg = {"apiVersion": "v1", "kind": "Config",
           "clusters": [{"name": n, "cluster": c} for n, c in clusters.items()],
           "users": [{"name": n, "user": u} for n, u in users.items()],
           "contexts": [{"name": n, "context": c} for n, c in contexts.items()]}
    if current:
        cfg["current-context"] = current
    with open(str(path), "w") as f:
        json.dump(cfg, f)      # JSON is YAML
    return str(path)


def exec_user(tmp_path, api_version=V1, mode="token", tokens="good", expiry=None, extra=None,
              **fields):
    env = [{"name": "FAKE_EXEC_LOG", "value": str(tmp_path / "runs.log")},
           {"name": "FAKE_EXEC_MODE", "value": mode},
           {"name": "FAKE_EXEC_TOKENS", "value": tokens}]
    if expiry is not None:
        env.append({"name": "FAKE_EXEC_EXPIRY", "value": str(expiry)})
    env += extra or []
    x = {"apiVersion": api_version, "command": PLUGIN, "env": env}
    if api_version == V1:
        x["interactiveMode"] = "Never"
    x.update(fields)
    return {"exec": x}


def exec_config(tmp_path, api, **kw):
    return write_config(tmp_path / "config", {"fake": {"server": api.url}},
                        {"u": exec_user(tmp_path, **kw)}, {"t": {"cluster": "fake", "user": "u"}},
                        "t")


def plugin_runs(tmp_path):
    log = tmp_path / "runs.log"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def statuses(api):
    return [r["status"] for r in api.requests()]


def inspect(kubeconfig, *args, env_kubeconfig=None):
    return run(GPUPOOL, ["inspect"] + list(args), kubeconfig, env_kubeconfig=env_kubeconfig)


# ---- exec plugins ----

@pytest.mark.parametrize("version", [V1, V1BETA1])
def test_exec_plugin_token_runs_once_per_process(api, tmp_path, version):
    cfg = exec_config(tmp_path, api, api_version=version)
    proc = inspect(cfg)
    assert proc.returncode == 0, proc.stderr
    assert "gpu-a" in proc.stdout
    runs = plugin_runs(tmp_path)
    # three LISTs on two connections, one run: the answer is cached in memory
    assert len(runs) == 1, runs
    assert len(api.requests()) >= 3
    assert all(r["headers"].get("Authorization") == "Bearer good" for r in api.requests())
    assert runs[0]["apiVersion"] == version and runs[0]["kind"] == "ExecCredential"
    assert runs[0]["spec"]["interactive"] is False      # stdin is not a terminal here
    assert "cluster" not in runs[0]["spec"]              # provideClusterInfo not set


def test_exec_plugin_future_expiry_is_cached(api, tmp_path):
    proc = inspect(exec_config(tmp_path, api, api_version=V1BETA1, expiry=3600))
    assert proc.returncode == 0, proc.stderr
    assert len(plugin_runs(tmp_path)) == 1


def test_exec_plugin_expired_credential_is_run_again(api, tmp_path):
    proc = inspect(exec_config(tmp_path, api, expiry=-60))
    assert proc.returncode == 0, proc.stderr
    # already expired when it came: every request asks again
    assert len(plugin_runs(tmp_path)) == len(api.requests()) >= 3


@pytest.mark.skipif(not os.path.exists(KUBECTL_MIN), reason="kubectl_min not built")
def test_exec_plugin_rerun_when_its_credential_expires(api, tmp_path):
    cfg = exec_config(tmp_path, api, expiry=2)
    p = subprocess.Popen([KUBECTL_MIN, "--kubeconfig", cfg, "--repeat", "3", "get",
                          "/api/v1/nodes/gpu-a"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdin.write("next\n")          # second GET at once: still valid
    p.stdin.flush()
    time.sleep(0.5)
    assert len(plugin_runs(tmp_path)) == 1
    time.sleep(3)                    # past its expirationTimestamp
    out, err = p.communicate("next\n", timeout=30)
    assert p.returncode == 0, out + err
    assert out.count("RESULT OK") == 3
    assert len(plugin_runs(tmp_path)) == 2


def test_exec_plugin_401_runs_it_again_once(api, tmp_path):
    # the first token is refused (revoked before its expiry): one new run
    proc = inspect(exec_config(tmp_path, api, tokens="revoked,good", expiry=3600))
    assert proc.returncode == 0, proc.stderr
    assert len(plugin_runs(tmp_path)) == 2
    assert 401 in statuses(api)


def test_exec_plugin_refused_twice_is_an_error(api, tmp_path):
    proc = inspect(exec_config(tmp_path, api, tokens="bad1,bad2,bad3"))
    assert proc.returncode == 1
    assert "Unauthorized" in proc.stderr
    assert len(plugin_runs(tmp_path)) == 2     # one retry with a new credential, not a loop


def test_exec_plugin_cluster_info_and_env(api, tmp_path):
    proc = inspect(exec_config(tmp_path, api, provideClusterInfo=True,
                               args=["--flag", "x y"]))
    assert proc.returncode == 0, proc.stderr
    spec = plugin_runs(tmp_path)[0]["spec"]
    assert spec["cluster"]["server"] == api.url
    assert spec["cluster"]["insecure-skip-tls-verify"] is False


def test_exec_plugin_failure_passes_its_stderr(api, tmp_path):
    proc = inspect(exec_config(tmp_path, api, mode="fail"))
    assert proc.returncode == 1
    assert "fake-plugin: you are not logged in" in proc.stderr
    assert "exited with status 3" in proc.stderr
    assert api.requests() == []


def test_exec_plugin_garbage_is_a_clear_error(api, tmp_path):
    proc = inspect(exec_config(tmp_path, api, mode="garbage"))
    assert proc.returncode == 1
    assert "is not an ExecCredential: malformed JSON" in proc.stderr


def test_exec_plugin_wrong_api_version(api, tmp_path):
    proc = inspect(exec_config(tmp_path, api, mode="version"))
    assert proc.returncode == 1
    assert 'apiVersion is "client.authentication.k8s.io/v1alpha1"' in proc.stderr


def test_exec_plugin_timeout_kills_it(api, tmp_path):
    cfg = exec_config(tmp_path, api, mode="slow")
    start = time.time()
    proc = inspect(cfg, "--exec-timeout", "1s")
    assert time.time() - start < 15
    assert proc.returncode == 1
    assert "did not answer within 1000 ms" in proc.stderr


def test_exec_plugin_missing_command_shows_install_hint(api, tmp_path):
    cfg = exec_config(tmp_path, api, command="no-such-auth-plugin-xyz",
                      installHint="install it with: apt install xyz")
    proc = inspect(cfg)
    assert proc.returncode == 1
    assert "no-such-auth-plugin-xyz: cannot run it" in proc.stderr
    assert "install it with: apt install xyz" in proc.stderr


def test_exec_v1_requires_interactive_mode(api, tmp_path):
    cfg = exec_config(tmp_path, api)
    data = json.load(open(cfg))
    del data["users"][0]["user"]["exec"]["interactiveMode"]
    json.dump(data, open(cfg, "w"))
    proc = inspect(cfg)
    assert proc.returncode == 1
    assert "interactiveMode is required" in proc.stderr


def test_exec_always_interactive_without_a_terminal(api, tmp_path):
    proc = inspect(exec_config(tmp_path, api, interactiveMode="Always"))
    assert proc.returncode == 1
    assert "needs a terminal" in proc.stderr
    assert plugin_runs(tmp_path) == []


# ---- auth-provider ----

def provider_config(tmp_path, api, provider):
    return write_config(tmp_path / "config", {"fake": {"server": api.url}},
                        {"u": {"auth-provider": provider}},
                        {"t": {"cluster": "fake", "user": "u"}}, "t")


def test_oidc_id_token_is_the_bearer_token(api, tmp_path):
    proc = inspect(provider_config(tmp_path, api, {"name": "oidc", "config": {
        "id-token": "good", "idp-issuer-url": "https://issuer", "client-id": "k"}}))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name,plugin", [("gcp", "gke-gcloud-auth-plugin"),
                                         ("azure", "kubelogin"),
                                         ("oidc", "kubelogin")])
def test_legacy_auth_provider_names_its_exec_plugin(api, tmp_path, name, plugin):
    proc = inspect(provider_config(tmp_path, api, {"name": name, "config": {}}))
    assert proc.returncode == 1
    assert plugin in proc.stderr
    assert api.requests() == []


# ---- token files ----

@pytest.mark.skipif(not os.path.exists(KUBECTL_MIN), reason="kubectl_min not built")
def test_token_file_rotation_is_picked_up_without_a_401(api, tmp_path):
    token = tmp_path / "token"
    token.write_text("good\n")
    cfg = write_config(tmp_path / "config", {"fake": {"server": api.url}},
                       {"u": {"tokenFile": "token"}},          # relative to the config
                       {"t": {"cluster": "fake", "user": "u"}}, "t")
    p = subprocess.Popen([KUBECTL_MIN, "--kubeconfig", cfg, "--repeat", "2", "get",
                          "/api/v1/nodes/gpu-a"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    api.tokens = {"rotated"}
    tmp = tmp_path / "token.new"
    tmp.write_text("rotated\n")
    os.rename(str(tmp), str(token))       # how a projected token is replaced
    out, err = p.communicate("next\n", timeout=30)
    assert p.returncode == 0, out + err
    assert out.count("RESULT OK") == 2
    assert statuses(api) == [200, 200]
    assert api.requests()[1]["headers"]["Authorization"] == "Bearer rotated"


# ---- KUBECONFIG merge and overrides ----

def test_kubeconfig_files_merged_first_wins(api, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (b / "token").write_text("good")
    # a: the context and the real cluster; b: a second "fake" (ignored: a
    # named it first), the user (with a tokenFile relative to b), another
    # current-context (ignored: a set one first)
    fa = write_config(a / "config", {"fake": {"server": api.url}}, {},
                      {"ctx": {"cluster": "fake", "user": "u"}}, "ctx")
    fb = write_config(b / "config", {"fake": {"server": "http://127.0.0.1:1"}},
                      {"u": {"tokenFile": "token"}},
                      {"other": {"cluster": "fake", "user": "u"}}, "other")
    missing = str(tmp_path / "missing")
    proc = inspect(None, env_kubeconfig=":".join([missing, fa, fb, fa]))
    assert proc.returncode == 0, proc.stderr
    assert "gpu-a" in proc.stdout
    assert all(r["headers"].get("Authorization") == "Bearer good" for r in api.requests())
    # reversed: b's current-context and b's "fake", which nobody listens on
    proc = inspect(None, env_kubeconfig=":".join([fb, fa]))
    assert proc.returncode == 1
    assert "127.0.0.1" in proc.stderr or "connect" in proc.stderr.lower()


def test_kubeconfig_none_of_the_files_exists(tmp_path):
    proc = inspect(None, env_kubeconfig=str(tmp_path / "x") + ":" + str(tmp_path / "y"))
    assert proc.returncode == 1
    assert "no such file" in proc.stderr


def test_context_cluster_user_flags(api, tmp_path):
    cfg = write_config(tmp_path / "config",
                       {"fake": {"server": api.url}, "nowhere": {"server": "http://127.0.0.1:1"}},
                       {"bad": {"token": "nope"}, "ok": {"token": "good"}},
                       {"cur": {"cluster": "nowhere", "user": "bad"},
                        "right": {"cluster": "fake", "user": "ok"}}, "cur")
    assert inspect(cfg, "--context", "right").returncode == 0
    proc = inspect(cfg, "--cluster", "fake", "--user", "ok")
    assert proc.returncode == 0, proc.stderr
    proc = inspect(cfg, "--cluster", "fake")          # the context's user "bad"
    assert proc.returncode == 1 and "Unauthorized" in proc.stderr
    proc = inspect(cfg, "--user", "nobody")
    assert proc.returncode == 1 and 'user "nobody" not found in users' in proc.stderr
    proc = inspect(cfg, "--context", "nothere")
    assert proc.returncode == 1 and 'context "nothere" not found in contexts' in proc.stderr
