#!/usr/bin/python3
"""sim_latency -- Allocate latency as the Python kubelet simulator (grpcio) sees it.

    bench/sim_latency.py [--calls N] BUILD_DIR

Starts BUILD_DIR/bin/gpupool-device-plugin on the fake NVML (8 GPUs,
test/fakenvml/inventories/8gpu-nvlink.json) against test/sim/kubelet_sim.py,
which registers it the way the kubelet does. Then times N sequential Allocate
calls with 1 and with 2 device IDs on the simulator's one channel (the stub
the simulator itself uses), with the request built once. Prints a Markdown
table (µs). The same measurement from a C client is in plugin_bench; the
difference is the cost of Python's grpcio per call.

Needs Debian's /usr/bin/python3 with python3-grpcio, python3-grpc-tools,
python3-protobuf.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "test", "sim"))

import kubelet_sim  # noqa: E402

INVENTORY = os.path.join(ROOT, "test", "fakenvml", "inventories", "8gpu-nvlink.json")
WARMUP = 200
# Variables the plugin or the fake read: never inherited.
PLUGIN_ENV_PREFIXES = ("FAKE_NVML_", "DP_", "GP_HEALTH_", "NVIDIA_", "MIG_", "DEVICE_",
                       "CONFIG_FILE", "KUBELET_SOCKET", "LD_LIBRARY_PATH", "LD_PRELOAD",
                       "PASS_DEVICE_SPECS", "FAIL_ON_INIT_ERROR")


def percentile(sorted_values, p):
    i = int(p * (len(sorted_values) - 1) + 0.5)
    return sorted_values[min(i, len(sorted_values) - 1)]


def start_plugin(build, sockdir, workdir):
    env = {k: v for k, v in os.environ.items() if not k.startswith(PLUGIN_ENV_PREFIXES)}
    env["LD_LIBRARY_PATH"] = os.path.join(build, "test", "fakenvml")
    env["FAKE_NVML_INVENTORY"] = INVENTORY
    env["FAKE_NVML_CONTROL"] = os.path.join(workdir, "control")
    open(env["FAKE_NVML_CONTROL"], "w").close()
    log = open(os.path.join(workdir, "plugin.log"), "wb")
    argv = [os.path.join(build, "bin", "gpupool-device-plugin"),
            "--kubelet-socket", os.path.join(sockdir, "kubelet.sock")]
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    log.close()
    return proc


def stop_plugin(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return -1
    return proc.returncode


def series(stub, ids, calls):
    pb = kubelet_sim.pb
    req = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])
    samples = []
    for i in range(WARMUP + calls):
        t0 = time.perf_counter()
        resp = stub.Allocate(req, timeout=5)
        dt = (time.perf_counter() - t0) * 1e6
        if len(resp.container_responses) != 1:
            raise RuntimeError("Allocate %s: %d container responses" % (ids, len(resp.container_responses)))
        if i >= WARMUP:
            samples.append(dt)
    samples.sort()
    return samples


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--calls", type=int, default=5000, help="Allocate calls per series")
    ap.add_argument("build", help="build directory (holds gpupool-device-plugin)")
    a = ap.parse_args(argv)
    build = os.path.abspath(a.build)
    workdir = tempfile.mkdtemp(prefix="gp-simlat-")
    sim = kubelet_sim.KubeletSim(workdir).start()
    proc = start_plugin(build, workdir, workdir)
    rc = 1
    try:
        ep = sim.wait_registered("nvidia.com/gpu", timeout=10)
        ids = [d.ID for d in sim.devices("nvidia.com/gpu")]
        if len(ids) < 2:
            raise RuntimeError("need 2 devices, plugin lists %d" % len(ids))
        rows = [(n, series(ep.stub, ids[:n], a.calls)) for n in (1, 2)]
        print("\n### Allocate latency, Python kubelet simulator (grpcio %s), one channel "
              "(%d calls each, after %d warm-up; µs)\n" % (kubelet_sim.grpc.__version__,
                                                          a.calls, WARMUP))
        print("| node | IDs per call | p50 | p90 | p99 | max |")
        print("|---|---:|---:|---:|---:|---:|")
        for n, s in rows:
            print("| 8 GPUs | %d | %.1f | %.1f | %.1f | %.1f |"
                  % (n, percentile(s, 0.5), percentile(s, 0.9), percentile(s, 0.99), s[-1]))
        rc = 0
    except Exception as e:  # report, clean up, exit non-zero
        print("sim_latency: %s" % e, file=sys.stderr)
        try:
            with open(os.path.join(workdir, "plugin.log"), errors="replace") as f:
                sys.stderr.write(f.read())
        except OSError:
            pass
    finally:
        status = stop_plugin(proc)
        sim.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    if status != 0:
        print("sim_latency: plugin exit status %s after SIGTERM" % status, file=sys.stderr)
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
