#!/usr/bin/python3
"""kubelet_restart_bench -- kubelet restart -> Register latency of the device plugin (issue 17).

Setting: the real plugin on the fake NVML (4 GPUs), the kubelet simulator. Each of N
restarts stops the simulator, cleans the socket directory as a starting kubelet does,
keeps it down for --down seconds, then creates kubelet.sock --listen-delay seconds
before it listens (connects in between are refused, so the plugin's first attempt
fails). Latency: from listen() to the simulator's Register handler, which the
plugin reaches through a relay on kubelet.sock (sub-millisecond).

    GP_BUILD_DIR=build bench/kubelet_restart_bench.py [--restarts 100] [--down 0.2]
        [--listen-delay 0.05] [--remove-dir]

--remove-dir: each restart removes the whole socket directory (rm -rf) instead of
cleaning it, and the simulator creates it again just before kubelet.sock (issue 27 N5:
a kubelet on a fresh --root-dir or tmpfs, an operator's rm -rf).

Prints one JSON object: p50/p90/p99/max in ms over the restarts.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "test", "sim"))
import kubelet_sim  # noqa: E402

RESOURCE = "nvidia.com/gpu"


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--restarts", type=int, default=100)
    ap.add_argument("--down", type=float, default=0.2, help="seconds without kubelet.sock")
    ap.add_argument("--listen-delay", type=float, default=0.05,
                    help="seconds between kubelet.sock's creation and listen()")
    ap.add_argument("--remove-dir", action="store_true",
                    help="remove and re-create the socket directory on each restart")
    args = ap.parse_args()
    build = os.path.abspath(os.environ.get("GP_BUILD_DIR", os.path.join(ROOT, "build")))
    work = tempfile.mkdtemp(prefix="gp-krb-")
    kubelet = kubelet_sim.KubeletSim(work).start()
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "test", "fakenvml"),
               FAKE_NVML_INVENTORY=os.path.join(ROOT, "test", "fakenvml", "inventories",
                                                "4gpu.json"))
    fd, log_path = tempfile.mkstemp(prefix="gp-krb-", suffix=".log")  # outside the cleaned dir
    log = os.fdopen(fd, "wb")
    proc = subprocess.Popen([os.path.join(build, "bin", "gpupool-device-plugin"),
                             "--kubelet-socket", kubelet.socket],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    late = []
    try:
        kubelet.wait_registered(RESOURCE, timeout=20)
        for i in range(args.restarts):
            n = len(kubelet.registrations_for(RESOURCE))
            kubelet.restart(wait=False, down=args.down, listen_delay=args.listen_delay,
                            remove_dir=args.remove_dir)
            kubelet.wait_for(lambda: len(kubelet.registrations_for(RESOURCE)) > n and
                             kubelet.endpoint(RESOURCE).snapshots, 10,
                             "re-registration after restart %d" % (i + 1))
            late.append(kubelet.registrations_for(RESOURCE)[n].time - kubelet.listening_at)
    finally:
        proc.terminate()
        proc.wait(10)
        kubelet.stop()
        log.close()
        os.unlink(log_path)
        shutil.rmtree(work, ignore_errors=True)
    ms = [x * 1000 for x in late]
    print(json.dumps({"restarts": len(ms), "down_s": args.down, "listen_delay_s": args.listen_delay,
                      "remove_dir": args.remove_dir,
                      "register_after_listen_ms": {
                          "p50": round(percentile(ms, 50), 1), "p90": round(percentile(ms, 90), 1),
                          "p99": round(percentile(ms, 99), 1), "max": round(max(ms), 1)}}))


if __name__ == "__main__":
    main()
