"""Used, not only booked (issue 26 item 1): the node agent's per-container and per-process series.

The real plugin in gpu-mem mode (fake NVML, kubelet_sim, the gpu-mem kubelet model, fake_apiserver)
gives a pod a region directory; a real process (gpupool-cudaprobe with libgpupool-cuda.so over the
fake libcuda) charges memory into that region, and the fake NVML lists the same host pid as a
compute process (`process` control lines). A scrape must name the container through the pod view,
read its use and limit from the region, and name the NVML process after the region slot it holds.
Exposition parsed with prometheus_client's parser.
"""

import os
import subprocess
import time

from test_gpumem import api, create, gpumem, make_pod  # noqa: F401
from test_gpumem_isolation import iso_dir, uid_of
from test_isolation import FAKECUDA, FAKENVML, PRELOAD, PROBE, TIMEOUT_SCALE
from test_plugin_metrics import ADDR_RE, scrape, value

GIB = 1 << 30
MIB = 1 << 20


def start(gpumem):
    p, k = gpumem(args=["--metrics-addr", "127.0.0.1:0"])
    p.metrics_url = "http://%s/metrics" % p.wait_log(ADDR_RE).group(1)
    return p, k


def charge(region_dir, uuid, limit, script):
    """A process of the container: the library preloaded over the fake driver, its region in the
    directory the plugin made. Prints one line per command, then holds."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUDA_DEVICE_MEMORY", "ALIYUN_COM_GPU_MEM", "FAKECUDA"))}
    env.update({"LD_LIBRARY_PATH": FAKECUDA + ":" + FAKENVML, "FAKECUDA_DEVICES": uuid + "=40g",
                "CUDA_DEVICE_MEMORY_SHARED_CACHE": os.path.join(region_dir, "region"),
                "CUDA_DEVICE_MEMORY_LIMIT": str(limit), "LD_PRELOAD": PRELOAD})
    env.setdefault("ASAN_OPTIONS", "detect_leaks=0:verify_asan_link_order=0")
    proc = subprocess.Popen([PROBE] + script.split(), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    for _ in script.split(" hold")[0].split(" alloc "):
        line = proc.stdout.readline()
        assert "CUDA_SUCCESS" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc


def owner(ns, pod, container, uuid):
    return {"namespace": ns, "pod": pod, "container": container, "gpu_uuid": uuid}


def test_container_and_process_use_named_through_the_region(gpumem, api, workdir):
    p, k = start(gpumem)
    uuid = p.inventory.gpus[2].uuid
    create(api, make_pod("train", containers=[("main", 4)], idx=2, ns="ml"))
    k.admit("ml", "train")
    region_dir = os.path.join(iso_dir(workdir), "containers", uid_of(api, "train", "ml") + "_0")
    holder = charge(region_dir, uuid, 4 * GIB, "init alloc 1g alloc 512m hold")
    stranger = subprocess.Popen(["sleep", "30"])   # on the GPU, in no container of ours
    try:
        p.control("process 2 %d 1536 37 12" % holder.pid, "process 2 %d 100 5 1" % stranger.pid)
        fams, s = scrape(p)
        me = owner("ml", "train", "main", uuid)
        assert value(s, "gpupool_container_gpu_memory_used_bytes", **me) == 1536 * MIB
        assert value(s, "gpupool_container_gpu_memory_limit_bytes", **me) == 4 * GIB
        assert fams["gpupool_container_gpu_memory_used_bytes"].type == "gauge"
        assert value(s, "gpupool_process_gpu_memory_used_bytes", pid=holder.pid, **me) == 1536 * MIB
        assert value(s, "gpupool_process_gpu_sm_utilization_ratio", pid=holder.pid, **me) == 0.37
        assert value(s, "gpupool_process_gpu_memory_utilization_ratio", pid=holder.pid,
                     **me) == 0.12
        nobody = owner("", "", "", uuid)
        assert value(s, "gpupool_process_gpu_memory_used_bytes", pid=stranger.pid,
                     **nobody) == 100 * MIB
        # Only the container that has a region gets container series.
        rows = [key for key in s if key[0] == "gpupool_container_gpu_memory_used_bytes"]
        assert len(rows) == 1
        # The process exits: its charge leaves the region, NVML forgets it.
        holder.kill()
        holder.wait()
        p.control("process 2 %d gone" % holder.pid)
        # Its slot is still in the file, but no process holds its liveness lock any more:
        # the agent counts nothing for it, before any process of the container reaps it.
        _, s = scrape(p)
        assert value(s, "gpupool_container_gpu_memory_used_bytes", **me) == 0
        charge(region_dir, uuid, 4 * GIB, "init").wait()  # attaching reaps the dead slot
        _, s = scrape(p)
        assert value(s, "gpupool_container_gpu_memory_used_bytes", **me) == 0
        assert value(s, "gpupool_process_gpu_memory_used_bytes", pid=holder.pid, **me) is None
    finally:
        for proc in (holder, stranger):
            proc.kill()
            proc.wait()


def test_a_hostile_region_file_cannot_hurt_the_scrape(gpumem, api, workdir):
    p, k = start(gpumem)
    uuid = p.inventory.gpus[0].uuid
    create(api, make_pod("evil", containers=[("main", 2)], idx=0))
    k.admit("default", "evil")
    region_dir = os.path.join(iso_dir(workdir), "containers", uid_of(api, "evil") + "_0")
    holder = charge(region_dir, uuid, 2 * GIB, "init alloc 1g hold")
    try:
        region = os.path.join(region_dir, "region." + uuid)
        # The container truncates its file under the agent: a mapping would SIGBUS.
        os.truncate(region, 4096)
        fams, s = scrape(p)
        assert [key for key in s if key[0] == "gpupool_container_gpu_memory_used_bytes"] == []
        os.unlink(region)
        os.mkfifo(region)   # a FIFO in its place must not block the scrape
        fams, s = scrape(p)
        assert "gpupool_gpu_healthy" in fams and p.alive()
    finally:
        holder.kill()
        holder.wait()


def pidfds(pid):
    """The process descriptors (pidfd_open) the agent holds."""
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            n += os.readlink("/proc/%d/fd/%s" % (pid, fd)) == "anon_inode:[pidfd]"
        except FileNotFoundError:
            pass
    return n


def test_processes_are_read_once_and_forgotten_when_they_exit(gpumem, api, workdir):
    """The agent reads /proc once per GPU process and keeps a pidfd to know when it exits
    (docs/metrics.md): names stay right scrape after scrape, and every descriptor goes back
    once the processes are gone, whatever their number."""
    p, k = start(gpumem)
    uuid = p.inventory.gpus[1].uuid
    create(api, make_pod("infer", containers=[("main", 4)], idx=1, ns="ml"))
    k.admit("ml", "infer")
    region_dir = os.path.join(iso_dir(workdir), "containers", uid_of(api, "infer", "ml") + "_0")
    holder = charge(region_dir, uuid, 4 * GIB, "init alloc 256m hold")
    strangers = [subprocess.Popen(["sleep", "60"]) for _ in range(40)]
    try:
        scrape(p)
        assert pidfds(p.pid) == 0
        p.control("process 1 %d 256 10 1" % holder.pid,
                  *["process 1 %d 1 1 1" % s.pid for s in strangers])
        me = owner("ml", "infer", "main", uuid)
        for _ in range(3):
            _, s = scrape(p)
            assert value(s, "gpupool_process_gpu_memory_used_bytes", pid=holder.pid,
                         **me) == 256 * MIB
            for st in strangers:
                assert value(s, "gpupool_process_gpu_memory_used_bytes", pid=st.pid,
                             **owner("", "", "", uuid)) == MIB
        assert pidfds(p.pid) == 41  # the processes are held, not read again
        for proc in [holder] + strangers:
            proc.kill()
            proc.wait()
        p.control("process 1 %d gone" % holder.pid,
                  *["process 1 %d gone" % s.pid for s in strangers])
        scrape(p)
        assert pidfds(p.pid) == 0
    finally:
        for proc in [holder] + strangers:
            proc.kill()
            proc.wait()


def test_agent_maps_a_containers_host_pids_for_nvml_inside_it(gpumem, api, workdir):
    """The agent writes each limited container's pid map (host pid -> pid in the container)
    into its region directory within a second of NVML listing the process, without any
    scrape; inside the container, nvmlDeviceGetProcessUtilization then answers with the
    container's process under its own pid, not the neighbour on the same GPU."""
    p, k = gpumem()
    uuid = p.inventory.gpus[0].uuid
    create(api, make_pod("nb", containers=[("main", 4)], idx=0, ns="ml"))
    k.admit("ml", "nb")
    region_dir = os.path.join(iso_dir(workdir), "containers", uid_of(api, "nb", "ml") + "_0")
    # The container's process in a pid namespace of its own, as in a container.
    env = {k2: v for k2, v in os.environ.items()
           if not k2.startswith(("CUDA_DEVICE_MEMORY", "ALIYUN_COM_GPU_MEM", "FAKECUDA"))}
    env.update({"LD_LIBRARY_PATH": FAKECUDA + ":" + FAKENVML, "FAKECUDA_DEVICES": uuid + "=16g",
                "CUDA_DEVICE_MEMORY_SHARED_CACHE": os.path.join(region_dir, "region"),
                "CUDA_DEVICE_MEMORY_LIMIT": str(4 * GIB), "LD_PRELOAD": PRELOAD,
                "FAKE_NVML_INVENTORY": p.inventory.path, "FAKE_NVML_CONTROL": p.control_path})
    env.setdefault("ASAN_OPTIONS", "detect_leaks=0:verify_asan_link_order=0")
    holder = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", PROBE, "init",
                               "alloc", "256m", "hold"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        for _ in range(2):
            assert "CUDA_SUCCESS" in holder.stdout.readline()
        with open("/proc/%d/task/%d/children" % (holder.pid, holder.pid)) as f:
            host = int(f.read().split()[0])   # the probe, pid 1 in its namespace
        p.control("process 0 %d 256 41 3" % host, "process 0 %d 100 77 1" % stranger.pid)
        pid_map = os.path.join(region_dir, "pids")
        deadline = time.time() + 5 * TIMEOUT_SCALE
        while time.time() < deadline:
            if os.path.exists(pid_map) and open(pid_map).read() == "gpupool-pids 1\n%d 1\n" % host:
                break
            time.sleep(0.05)
        assert open(pid_map).read() == "gpupool-pids 1\n%d 1\n" % host
        # In the container's pid namespace, through the library: only its own process.
        # LeakSanitizer cannot stop the world inside another pid namespace (a sanitized
        # build): leaks are checked by every other test.
        inside = dict(env, ASAN_OPTIONS="detect_leaks=0:verify_asan_link_order=0")
        r = subprocess.run(["nsenter", "--target", str(host), "--pid", "--", PROBE, "init",
                            "nvml-util"], env=inside, capture_output=True, text=True,
                           timeout=30 * TIMEOUT_SCALE)
        assert "samples=1:41" in r.stdout, (r.stdout, r.stderr)
        # The process goes: it leaves the map.
        holder.kill()
        holder.wait()
        p.control("process 0 %d gone" % host)
        deadline = time.time() + 5 * TIMEOUT_SCALE
        while time.time() < deadline and open(pid_map).read() != "gpupool-pids 1\n":
            time.sleep(0.05)
        assert open(pid_map).read() == "gpupool-pids 1\n"
    finally:
        for proc in (holder, stranger):
            proc.kill()
            proc.wait()
