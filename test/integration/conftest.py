"""Fixtures for the integration tests: a socket dir, the kubelet simulator, the real plugin.

    GP_BUILD_DIR       build tree holding bin/gpupool-device-plugin and test/fakenvml (default ./build)
    GP_PLUGIN_WRAPPER  command line the plugin, and every other program the suite starts
                       (extender, simulator, kubectl plugin, kube test client), runs under, e.g.
                       "valgrind --error-exitcode=99 --leak-check=full -q" (default: none)
    GP_TIMEOUT_SCALE   factor for every timeout, sleep and latency bound in the suite
                       (default 1, or 10 when GP_PLUGIN_WRAPPER is set)

Sanitizers: the plugin gets ASAN_OPTIONS / UBSAN_OPTIONS from the caller, or the defaults
below (leaks on, exit status 23; UBSan fatal, status 24). A test fails when a plugin it
started exited with a sanitizer's or the wrapper's error status, or logged a sanitizer or
valgrind report.

Run with Debian's interpreter: /usr/bin/python3 -m pytest test/integration
"""

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "test", "sim"))
sys.path.insert(0, HERE)

import kubelet_sim  # noqa: E402
from inventory import Inventory, INVENTORY_DIR  # noqa: E402

BUILD = os.path.abspath(os.environ.get("GP_BUILD_DIR", os.path.join(ROOT, "build")))
PLUGIN_BIN = os.path.join(BUILD, "bin", "gpupool-device-plugin")
FAKENVML_DIR = os.path.join(BUILD, "test", "fakenvml")
FAKENVML_LIB = os.path.join(FAKENVML_DIR, "libnvidia-ml.so.1")

# Run the plugin under a tool (valgrind): its argv is prefixed with this.
WRAPPER = shlex.split(os.environ.get("GP_PLUGIN_WRAPPER", ""))
TIMEOUT_SCALE = float(os.environ.get("GP_TIMEOUT_SCALE") or (10 if WRAPPER else 1))


def scaled(seconds):
    """A timeout, sleep or latency bound, stretched for slow runs (valgrind, loaded CI)."""
    return seconds * TIMEOUT_SCALE


# Sanitizer defaults when the caller sets none (harmless for an unsanitized binary).
ASAN_EXITCODE = 23
UBSAN_EXITCODE = 24
SANITIZER_ENV_DEFAULTS = {
    "ASAN_OPTIONS": "detect_leaks=1:exitcode=%d" % ASAN_EXITCODE,
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=%d" % UBSAN_EXITCODE,
}


def _option(opts, name):
    m = re.search(r"(?:^|[:\s,])%s=(\d+)" % re.escape(name), opts or "")
    return int(m.group(1)) if m else None


def run_program(argv, timeout=60, **kw):
    """subprocess.run() of one of our programs under WRAPPER, with `timeout` scaled; fails the
    test when a sanitizer or the wrapper reported errors (status or report on stderr)."""
    proc = subprocess.run(WRAPPER + list(argv), capture_output=True, text=True,
                          timeout=scaled(timeout), **kw)
    report = SANITIZER_REPORT.search(proc.stderr)
    assert report is None and proc.returncode not in error_exitcodes(), \
        "%s: exit status %d, sanitizer/valgrind errors:\n%s" % (argv[0], proc.returncode,
                                                                proc.stderr)
    return proc


def error_exitcodes():
    """Exit statuses that mean "a sanitizer or the wrapper found an error"."""
    codes = set()
    asan = os.environ.get("ASAN_OPTIONS", SANITIZER_ENV_DEFAULTS["ASAN_OPTIONS"])
    codes.add(_option(asan, "exitcode") or 1)
    ubsan = _option(os.environ.get("UBSAN_OPTIONS", SANITIZER_ENV_DEFAULTS["UBSAN_OPTIONS"]),
                    "exitcode")
    if ubsan:
        codes.add(ubsan)
    for a in WRAPPER:
        if a.startswith("--error-exitcode="):
            codes.add(int(a.split("=", 1)[1]))
    codes.discard(0)
    codes.discard(1)       # the plugin's own "failed" status; never a sanitizer's here
    return codes


# Reports in the plugin's log that fail a test whatever its exit status.
SANITIZER_REPORT = re.compile(
    r"ERROR: AddressSanitizer|runtime error:|LeakSanitizer|"
    r"^==\d+== (?:Invalid (?:read|write|free)|Conditional jump|Use of uninitialised|"
    r"Syscall param|Mismatched free|Source and destination overlap|Process terminating|"
    r"Argument '.*' of function|.* are (?:definitely|indirectly) lost in loss record)",
    re.M)

RESOURCE = "nvidia.com/gpu"
ENDPOINT = "gpupool-nvidia-gpu.sock"
HEALTH_READY = r"(?i)health checks? (started|enabled)"
KLOG_RE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ [\w.]+:\d+\] ")

# Environment variables the plugin reads (NVIDIA's names + ours): never inherited.
PLUGIN_ENV = {
    "MIG_STRATEGY", "FAIL_ON_INIT_ERROR", "NVIDIA_DRIVER_ROOT", "NVIDIA_DEV_ROOT",
    "PASS_DEVICE_SPECS", "DEVICE_LIST_STRATEGY", "DEVICE_ID_STRATEGY", "GDRCOPY_ENABLED",
    "GDS_ENABLED", "MOFED_ENABLED", "CDI_ANNOTATION_PREFIX", "NVIDIA_CDI_HOOK_PATH",
    "NVIDIA_CTK_PATH", "DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT", "MPS_ROOT",
    "SHARED_DEVICES_ALLOCATION_POLICY", "DEVICE_DISCOVERY_STRATEGY", "IMEX_CHANNEL_IDS",
    "IMEX_REQUIRED", "KUBELET_SOCKET", "CONFIG_FILE", "CDI_FEATURE_FLAGS", "CDI_DISABLE_HOOKS",
    "DP_DISABLE_HEALTHCHECKS", "DP_ENABLE_HEALTHCHECKS", "GP_HEALTH_RECOVERY_PROBES",
    "GP_HEALTH_PROBE_INTERVAL", "GP_CDI_SPEC_DIR", "LD_LIBRARY_PATH", "LD_PRELOAD", "FAKE_NVML_INVENTORY",
    "FAKE_NVML_CONTROL", "GP_RESOURCE_MODE", "GP_MEMORY_UNIT", "KUBECONFIG", "NODE_NAME",
    "GP_POD_RESOURCES_SOCKET", "GP_STATE_DIR", "GP_ALLOCATE_TIMEOUT",
    "GP_ISOLATION", "GP_ISOLATION_DIR", "GP_ISOLATION_LIBRARY",
}


def pytest_report_header(config):
    return "gpupool plugin: %s%s" % (PLUGIN_BIN, "" if os.path.exists(PLUGIN_BIN) else " (MISSING)")


def require_binaries(fakenvml=False):
    if not os.access(PLUGIN_BIN, os.X_OK):
        pytest.fail("plugin binary not built: %s (run make, or set GP_BUILD_DIR)" % PLUGIN_BIN)
    if fakenvml and not os.path.exists(FAKENVML_LIB):
        pytest.fail("fake NVML not built: %s" % FAKENVML_LIB)


class Plugin:
    """One gpupool-device-plugin process on a simulated node."""

    def __init__(self, sockdir, workdir, kubelet, inventory, args, env, config, control,
                 lib_dir, name, prefix=()):
        self.sockdir = sockdir
        self.kubelet = kubelet
        self.name = name
        self.inventory_name = inventory
        self.inventory = Inventory(inventory) if inventory else None
        self.log_path = os.path.join(workdir, name + ".log")
        self.control_path = os.path.join(workdir, name + ".control")
        with open(self.control_path, "w") as f:
            for line in control:
                f.write(line.rstrip("\n") + "\n")
        self.config_path = None
        if config is not None:
            self.config_path = os.path.join(workdir, name + "-config.yaml")
            with open(self.config_path, "w") as f:
                f.write(config)
        # prefix: a command that sets something up and then execs the rest (same pid).
        self.argv = list(prefix) + WRAPPER + [
            PLUGIN_BIN, "--kubelet-socket", os.path.join(sockdir, "kubelet.sock")]
        if self.config_path:
            self.argv += ["--config-file", self.config_path]
        self.argv += list(args)
        e = {k: v for k, v in os.environ.items() if k not in PLUGIN_ENV}
        for k, v in SANITIZER_ENV_DEFAULTS.items():
            e.setdefault(k, v)
        e["LD_LIBRARY_PATH"] = lib_dir if lib_dir is not None else FAKENVML_DIR
        if self.inventory:
            e["FAKE_NVML_INVENTORY"] = self.inventory.path
        e["FAKE_NVML_CONTROL"] = self.control_path
        e.update(env or {})
        self.env = e
        self.proc = None
        self.expect_clean_exit = True

    def start(self):
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    # -- state -------------------------------------------------------------
    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def log(self):
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def socket(self, endpoint=ENDPOINT):
        return os.path.join(self.sockdir, endpoint)

    def control(self, *lines):
        """Appends fake NVML control commands, e.g. control("xid 0 48")."""
        with open(self.control_path, "a") as f:
            for line in lines:
                f.write(line.rstrip("\n") + "\n")
            f.flush()
            os.fsync(f.fileno())

    def wait_exit(self, timeout=5):
        timeout = scaled(timeout)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("plugin still running after %.1fs\n--- log ---\n%s"
                                 % (timeout, self.log()))

    def wait_log(self, pattern, timeout=5):
        rx = re.compile(pattern, re.M)
        timeout = scaled(timeout)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.log())
            if m:
                return m
            if time.monotonic() > deadline:
                raise AssertionError("no log line matching %r within %.1fs\n--- log ---\n%s"
                                     % (pattern, timeout, self.log()))
            time.sleep(0.02)

    def health_ready(self, timeout=5):
        """Waits until the plugin logs that its NVML event sets are registered ("Health checks
        started ..."); fails the test when that does not happen within `timeout`. The fake
        NVML drops XIDs injected before that (no event set exists yet), as a driver would."""
        self.wait_log(HEALTH_READY, timeout)
        return self

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, timeout=5):
        """SIGTERM; returns the exit code."""
        timeout = scaled(timeout)
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("plugin ignored SIGTERM for %.1fs" % timeout)

    def sanitizer_errors(self):
        """Complaints about this (exited) process from sanitizers or the wrapper."""
        errors = []
        rc = self.proc.returncode if self.proc else None
        if rc is not None and rc in error_exitcodes():
            errors.append("%s: exit status %d: a sanitizer or %s reported errors"
                          % (self.name, rc, WRAPPER[0] if WRAPPER else "the wrapper"))
        m = SANITIZER_REPORT.search(self.log())
        if m:
            errors.append("%s: sanitizer/valgrind report in its log: %r" % (self.name, m.group(0)))
        return errors

    def close(self):
        if self.proc and self.alive():
            self.proc.kill()
            self.proc.wait()
        if getattr(self, "_log", None):
            self._log.close()


@pytest.fixture
def sockdir():
    # Short path: unix socket paths are limited to 107 bytes.
    d = tempfile.mkdtemp(prefix="gp-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def workdir(tmp_path):
    return str(tmp_path)


class KubeletSim(kubelet_sim.KubeletSim):
    """The simulator with every wait and RPC deadline stretched by GP_TIMEOUT_SCALE (tests keep
    writing the timeouts they mean at full speed)."""

    def __init__(self, directory, register_timeout=10):
        super().__init__(directory, scaled(register_timeout))

    def wait_for(self, predicate, timeout=5, what=None, raw=False):
        """raw=True: `timeout` is already scaled."""
        return super().wait_for(predicate, timeout if raw else scaled(timeout), what)

    def get_preferred_allocation(self, resource, available, must_include=(), size=1, timeout=5):
        return super().get_preferred_allocation(resource, available, must_include, size,
                                                scaled(timeout))

    def allocate(self, resource, ids, timeout=5):
        return super().allocate(resource, ids, scaled(timeout))

    def allocate_raw(self, resource, request, timeout=5):
        return super().allocate_raw(resource, request, scaled(timeout))

    def pre_start(self, resource, ids, timeout=5):
        return super().pre_start(resource, ids, scaled(timeout))


@pytest.fixture
def kubelet(sockdir):
    sim = KubeletSim(sockdir).start()
    yield sim
    sim.stop()


@pytest.fixture
def plugin(request, sockdir, workdir, kubelet):
    """Factory: plugin(inventory="4gpu.json", args=(), env=None, config=None, control=(),
    wait=RESOURCE, lib_dir=None, prefix=()). `wait` names the resource whose registration (and
    first ListAndWatch snapshot) to wait for, or None/False. `config` is YAML text written to a file
    and passed with --config-file. `control` lines are written to the control file first.
    `prefix` is argv put before the (wrapped) plugin: a command that must exec its arguments."""
    require_binaries()
    started = []
    request.node.gp_plugins = started

    def start(inventory="4gpu.json", args=(), env=None, config=None, control=(), wait=RESOURCE,
              lib_dir=None, timeout=5, prefix=()):
        require_binaries(fakenvml=lib_dir is None)
        p = Plugin(sockdir, workdir, kubelet, inventory, args, env, config, control, lib_dir,
                   "plugin%d" % len(started), prefix)
        started.append(p)
        p.start()
        if wait:
            try:
                kubelet.wait_for(lambda: not p.alive() or (
                    kubelet.endpoints.get(wait) is not None and
                    kubelet.endpoints[wait].snapshots), timeout, "registration of " + wait)
            except TimeoutError as e:
                raise AssertionError("%s; rejected: %s\n--- plugin log ---\n%s"
                                     % (e, kubelet.rejected, p.log()))
            if not p.alive():
                raise AssertionError("plugin exited with %s before registering\n--- log ---\n%s"
                                     % (p.proc.returncode, p.log()))
        return p

    yield start

    errors = []
    for p in started:
        if p.proc is None:
            continue
        if not p.alive() or not p.expect_clean_exit:
            p.close()
            errors += p.sanitizer_errors()
            continue
        endpoints = {r.endpoint for r in kubelet.registrations} or {ENDPOINT}
        try:
            rc = p.stop()
        except AssertionError as e:
            errors.append("%s: %s" % (p.name, e))
            continue
        finally:
            p.close()
            errors += p.sanitizer_errors()
        if rc != 0:
            errors.append("%s: exit code %s after SIGTERM (want 0)" % (p.name, rc))
        left = [e for e in endpoints if os.path.exists(os.path.join(sockdir, e))]
        if left:
            errors.append("%s: socket(s) not removed on SIGTERM: %s" % (p.name, left))
    if errors:
        pytest.fail("\n".join(errors), pytrace=False)


# GP_TEST_NO_SKIP=1 (.ci/run sets it): a skipped test is a failure. A skip
# names what is missing ("chromium is not installed"), which is right on a
# developer's machine without the package; on CI scripts/install-deps.sh
# installs everything, so a skip there means a test that silently ran nothing.
NO_SKIP = os.environ.get("GP_TEST_NO_SKIP", "") not in ("", "0")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if NO_SKIP and rep.skipped and not hasattr(rep, "wasxfail"):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = "skipped, and GP_TEST_NO_SKIP=1 makes a skip a failure: %s" % reason
    if rep.failed:
        for p in getattr(item, "gp_plugins", []):
            rep.sections.append(("%s log (%s)" % (p.name, " ".join(p.argv)), p.log()))
