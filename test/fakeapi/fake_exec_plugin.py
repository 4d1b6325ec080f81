#!/usr/bin/python3
"""A client.authentication.k8s.io exec credential plugin for the tests.

Configured by its environment (the kubeconfig's exec.env sets it, which
also proves env is passed):
    FAKE_EXEC_LOG      file: one line per run, KUBERNETES_EXEC_INFO as given
    FAKE_EXEC_MODE     token (default) | cert | fail | garbage | slow | version
    FAKE_EXEC_TOKENS   comma-separated tokens: run N answers the Nth (the last
                       one once they run out)
    FAKE_EXEC_EXPIRY   seconds from now for status.expirationTimestamp
                       (negative: already expired); unset: no expiry
    FAKE_EXEC_CERT, FAKE_EXEC_KEY   PEM files for mode cert
    FAKE_EXEC_STALL    file: while it exists and holds a wall-clock time (seconds
                       since 1970) in the future, every run sleeps until then
                       before answering (a slow IAM endpoint)
The answer's apiVersion is the one KUBERNETES_EXEC_INFO asks for.
"""
import datetime
import json
import os
import sys
import time


def main():
    info_text = os.environ.get("KUBERNETES_EXEC_INFO", "")
    log = os.environ.get("FAKE_EXEC_LOG")
    runs = 0
    if log:
        if os.path.exists(log):
            with open(log) as f:
                runs = sum(1 for _ in f)
        with open(log, "a") as f:
            f.write(info_text.replace("\n", " ") + "\n")
    runs += 1
    info = json.loads(info_text) if info_text else {}
    mode = os.environ.get("FAKE_EXEC_MODE", "token")
    if mode == "fail":
        sys.stderr.write("fake-plugin: you are not logged in\n")
        return 3
    if mode == "garbage":
        sys.stdout.write("this is not json {")
        return 0
    if mode == "slow":
        time.sleep(30)
    stall = os.environ.get("FAKE_EXEC_STALL")
    if stall and os.path.exists(stall):
        with open(stall) as f:
            until = float(f.read().strip() or 0)
        if until > time.time():
            time.sleep(until - time.time())
    tokens = os.environ.get("FAKE_EXEC_TOKENS", "t0k3n").split(",")
    status = {}
    if mode == "cert":
        with open(os.environ["FAKE_EXEC_CERT"]) as f:
            status["clientCertificateData"] = f.read()
        with open(os.environ["FAKE_EXEC_KEY"]) as f:
            status["clientKeyData"] = f.read()
    else:
        status["token"] = tokens[min(runs, len(tokens)) - 1]
    if "FAKE_EXEC_EXPIRY" in os.environ:
        when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
            seconds=float(os.environ["FAKE_EXEC_EXPIRY"]))
        status["expirationTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    version = info.get("apiVersion", "client.authentication.k8s.io/v1")
    if mode == "version":
        version = "client.authentication.k8s.io/v1alpha1"
    json.dump({"apiVersion": version, "kind": "ExecCredential", "status": status}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
