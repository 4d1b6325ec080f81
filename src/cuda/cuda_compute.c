/* cuda_compute.c -- the compute limit and priority on the launch path (see
 * cuda_compute.h; the arithmetic is cuda_throttle.c's). */
#include "cuda_glibc.h"
#include "cuda_compute.h"
#include "cuda_account.h"
#include "cuda_pidmap.h"
#include "cuda_real.h"
#include "cuda_throttle.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* How often the sampler measures: the controller's lag, and so the most a
 * container runs past its share before the gate closes (the long-run share
 * is exact regardless, docs/compute.md). */
#define SAMPLE_EVERY_NS (5ull * 1000 * 1000)
/* The longest single sleep of a waiting launch: the gate is looked at again
 * after it (the share may have been re-measured meanwhile). */
#define WAIT_SLICE_NS (2ull * 1000 * 1000)
/* Samples one NVML question can return (processes on the GPU). */
#define MAX_SAMPLES 512
/* Samples in a row in which this process launched, NVML reported other
 * processes' work and none of its own, before it says it cannot see itself
 * (a pid namespace: NVML's pids are the host's, docs/compute.md). */
#define BLIND_SAMPLES 200
/* Blind samples between two looks at the node agent's pid map for this
 * process's host pid (the agent refreshes it once a second). */
#define MAP_EVERY_BLIND 20
#define COMPUTE_MAGIC 0x43435047u /* "GPCC" */
#define COMPUTE_VERSION 1u

/* The layout of both small files: the container's per-GPU compute state
 * ("<region prefix>.<GPU-UUID>.compute") and the node's per-GPU priority
 * file ("<GPUPOOL_PRIORITY_DIR>/<GPU-UUID>"). Zeros are a valid empty
 * state, so whoever comes first only sizes the file; every field is
 * updated with atomics alone, so a process killed mid-update leaves
 * nothing to repair and no lock to wedge on. */
struct compute_file {
    uint32_t magic, version;
    struct throttle_shared t; /* container file: the controller's state */
    uint64_t high_seen_ns;    /* priority file: the last sign of high-priority work */
    uint64_t spare[4];
};

enum { CDEV_UNKNOWN, CDEV_OFF, CDEV_ON };

struct compute_dev {
    int state; /* CDEV_*, atomic */
    unsigned percent;
    struct compute_file *share; /* the container's (NULL: no limit) */
    struct compute_file *prio;  /* the node's (NULL: no priority) */
    nvmlDevice_t nvml;          /* NULL: nothing to measure */
    unsigned long long last_us; /* the sampler's lastSeen */
    int launched;               /* a launch since the sampler's last look; atomic */
    unsigned blind;             /* the sampler's count towards BLIND_SAMPLES */
};

bool cuda_compute_on;
static struct compute_dev cdev[CUDACFG_MAX_DEVICES];
static pthread_mutex_t setup_lock = PTHREAD_MUTEX_INITIALIZER;
static bool sampler_running; /* written under setup_lock; cleared in a forked child */
static bool high;            /* CUDA_TASK_PRIORITY=0 */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static unsigned long long real_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000ull;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    (void)nanosleep(&ts, NULL); /* an interrupted wait only looks at the gate sooner */
}

/* Maps a compute_file at path, creating it (0666: every user of every
 * container sharing it) when absent. NULL with a reason in err. */
static struct compute_file *map_file(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0666);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    (void)fchmod(fd, 0666); /* past the umask; fails harmlessly if not ours */
    off_t size = lseek(fd, 0, SEEK_END);
    /* Two first users may both size it: the same size, zeros either way. */
    if (size == 0 && ftruncate(fd, sizeof(struct compute_file)) == 0)
        size = sizeof(struct compute_file);
    if (size != (off_t)sizeof(struct compute_file)) {
        snprintf(err, errlen, "%s is not a gpupool-cuda compute file (%lld bytes)", path,
                 (long long)size);
        close(fd);
        return NULL;
    }
    struct compute_file *f = mmap(NULL, sizeof *f, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int saved = errno;
    close(fd); /* the mapping keeps what it needs */
    if (f == MAP_FAILED) {
        snprintf(err, errlen, "cannot map %s: %s", path, strerror(saved));
        return NULL;
    }
    uint32_t zero = 0;
    if (__atomic_compare_exchange_n(&f->magic, &zero, COMPUTE_MAGIC, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
        __atomic_store_n(&f->version, COMPUTE_VERSION, __ATOMIC_RELAXED);
    if (f->magic != COMPUTE_MAGIC) {
        snprintf(err, errlen, "%s is not a gpupool-cuda compute file", path);
        munmap(f, sizeof *f);
        return NULL;
    }
    return f;
}

/* ---- the sampler ---------------------------------------------------------- */

/* Measures, every SAMPLE_EVERY_NS, the GPU time this process's kernels took
 * on each device it launches on, and hands it to the container's state
 * (and, for a high-priority process, says the GPU is in use). Runs for the
 * life of the process; touches only atomics that are shared. */
static void *sampler(void *arg)
{
    (void)arg;
    static nvmlProcessUtilizationSample_t samples[MAX_SAMPLES];
    unsigned pid = (unsigned)getpid();
    char pid_text[16];
    snprintf(pid_text, sizeof pid_text, "%u", pid);
    for (;;) {
        sleep_ns(SAMPLE_EVERY_NS);
        for (int d = 0; d < CUDACFG_MAX_DEVICES; d++) {
            struct compute_dev *c = &cdev[d];
            if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CDEV_ON || c->nvml == NULL)
                continue;
            unsigned n = MAX_SAMPLES;
            nvmlReturn_t rc =
                real.nvmlDeviceGetProcessUtilization(c->nvml, samples, &n, c->last_us);
            if (rc != NVML_SUCCESS)
                continue; /* NOT_FOUND: nothing ran since lastSeen */
            uint64_t busy = throttle_busy_from_samples(samples, n, pid, &c->last_us);
            uint64_t now = mono_ns();
            bool launched = __atomic_exchange_n(&c->launched, 0, __ATOMIC_RELAXED) != 0;
            c->blind = busy > 0 ? 0 : c->blind + (launched && n > 0);
            /* Launching, others measured, never us: in a pid namespace
             * NVML's pids are the host's; the node agent's map names ours. */
            if (c->blind > 0 && c->blind % MAP_EVERY_BLIND == 0) {
                unsigned host = cudapid_host(&cuda_cfg, (unsigned)getpid());
                if (host != 0 && host != pid) {
                    pid = host;
                    c->blind = 0;
                }
            }
            if (c->blind == BLIND_SAMPLES)
                cuda_complain("NVML reports GPU time of other processes but none of pid %s "
                              "(%s): the compute limit is not enforced here (docs/compute.md)",
                              pid_text,
                              "in a pid namespace NVML's pids are the host's, and the node "
                              "agent's pid map in the region directory does not name it");
            if (c->share != NULL)
                throttle_account(&c->share->t, now, busy, c->percent);
            if (high && c->prio != NULL && busy > 0)
                __atomic_store_n(&c->prio->high_seen_ns, now, __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

/* Under setup_lock. */
static void start_sampler(void)
{
    if (sampler_running)
        return;
    pthread_attr_t a;
    pthread_t t;
    if (pthread_attr_init(&a) != 0)
        return;
    (void)pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    /* The application's signals stay with its own threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    __atomic_store_n(&sampler_running, pthread_create(&t, &a, sampler, NULL) == 0,
                     __ATOMIC_RELEASE);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
    if (!sampler_running)
        cuda_complain("%s (%s)", "cannot start the compute sampler thread",
                      "the compute limit is not enforced");
}

/* ---- per device ----------------------------------------------------------- */

/* The NVML device of a CUDA UUID, NVML initialised for this library's own
 * use; NULL when NVML cannot answer. */
static nvmlDevice_t nvml_device(const char *uuid)
{
    nvmlDevice_t h = NULL;
    if (!cuda_nvml_ready() || real.nvmlInit_v2 == NULL || real.nvmlDeviceGetHandleByUUID == NULL ||
        real.nvmlDeviceGetProcessUtilization == NULL || real.nvmlInit_v2() != NVML_SUCCESS ||
        real.nvmlDeviceGetHandleByUUID(uuid, &h) != NVML_SUCCESS)
        return NULL;
    return h;
}

/* Decides, once, what CUDA ordinal dev's launches wait for. */
static int setup(CUdevice dev)
{
    struct compute_dev *c = &cdev[dev];
    char err[1200] = "", uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "", path[1200];
    pthread_mutex_lock(&setup_lock);
    int st = c->state;
    if (st != CDEV_UNKNOWN)
        goto out;
    unsigned percent = (unsigned)cudacfg_sm_limit(&cuda_cfg, dev);
    bool prio = cuda_cfg.priority_dir[0] != '\0';
    CUuuid u;
    st = CDEV_OFF;
    /* A percent named by UUID (the DRA driver's) is exact and wins over the
     * ordinal forms; without the UUID nothing can be looked up. */
    if (percent == 0 && !prio && cuda_cfg.uuid_count == 0)
        goto out;
    if (real.cuDeviceGetUuid == NULL || real.cuDeviceGetUuid(&u, dev) != CUDA_SUCCESS) {
        snprintf(err, sizeof err, "cannot read the UUID of CUDA device %d", dev);
        goto out;
    }
    cuda_uuid_text(&u, uuid, sizeof uuid);
    int named = cudacfg_uuid_sm_limit(&cuda_cfg, uuid);
    if (named >= 0)
        percent = (unsigned)named;
    if (percent == 0 && !prio)
        goto out;
    if (percent > 0 || (prio && high)) {
        c->nvml = nvml_device(uuid);
        c->last_us = real_us();
        if (c->nvml == NULL && percent > 0) {
            snprintf(err, sizeof err, "NVML cannot measure %s's per-process utilisation", uuid);
            percent = 0;
        }
    }
    if (percent > 0) {
        /* the device's region prefix: a DRA claim's shares meet in its
         * claim directory, as its memory regions do */
        snprintf(path, sizeof path, "%s.%s.compute", cudacfg_region_prefix(&cuda_cfg, uuid), uuid);
        c->share = map_file(path, err, sizeof err);
    }
    if (prio) {
        snprintf(path, sizeof path, "%s/%s", cuda_cfg.priority_dir, uuid);
        c->prio = map_file(path, err, sizeof err);
    }
    c->percent = percent;
    if (c->share != NULL || c->prio != NULL) {
        st = CDEV_ON;
        if (c->nvml != NULL)
            start_sampler();
    }
out:
    __atomic_store_n(&c->state, st, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&setup_lock);
    if (err[0] != '\0')
        cuda_complain("%s; the compute limit or priority is not enforced there (%s)", err,
                      "docs/compute.md");
    return st;
}

/* Whether s is being captured (only asked before a wait: a query of the
 * driver per launch would cost more than the gate itself). */
static bool capturing(CUstream s)
{
    int status = CU_STREAM_CAPTURE_STATUS_NONE;
    return real.cuStreamIsCapturing != NULL &&
           real.cuStreamIsCapturing(s, &status) == CUDA_SUCCESS &&
           status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void cuda_compute_before_launch(CUstream s)
{
    CUdevice dev;
    if (real.cuCtxGetDevice == NULL || real.cuCtxGetDevice(&dev) != CUDA_SUCCESS || dev < 0 ||
        dev >= CUDACFG_MAX_DEVICES)
        return; /* no context: the driver's own error follows */
    struct compute_dev *c = &cdev[dev];
    int st = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
    if (__builtin_expect(st == CDEV_UNKNOWN, 0))
        st = setup(dev);
    if (st != CDEV_ON)
        return;
    /* A load first: the line stays shared while the flag is already up. */
    if (__atomic_load_n(&c->launched, __ATOMIC_RELAXED) == 0)
        __atomic_store_n(&c->launched, 1, __ATOMIC_RELAXED);
    if (c->nvml != NULL && !__atomic_load_n(&sampler_running, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&setup_lock); /* a forked child's first launch */
        start_sampler();
        pthread_mutex_unlock(&setup_lock);
    }
    for (bool asked = false;; asked = true) {
        uint64_t now = mono_ns();
        if (c->prio != NULL) {
            if (high) {
                __atomic_store_n(&c->prio->high_seen_ns, now, __ATOMIC_RELAXED);
            } else if (throttle_yields(__atomic_load_n(&c->prio->high_seen_ns, __ATOMIC_RELAXED),
                                       now)) {
                if (!asked && capturing(s))
                    return;
                sleep_ns(WAIT_SLICE_NS);
                continue;
            }
        }
        uint64_t wait = c->share != NULL ? throttle_delay(&c->share->t, now) : 0;
        if (wait == 0 || (!asked && capturing(s)))
            return;
        sleep_ns(wait < WAIT_SLICE_NS ? wait : WAIT_SLICE_NS);
    }
}

static void before_fork(void)
{
    pthread_mutex_lock(&setup_lock);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&setup_lock);
}

/* A forked child has no sampler thread (only the forking thread lives on):
 * its first launch starts one, measuring the child's own pid. */
static void after_fork_child(void)
{
    sampler_running = false;
    pthread_mutex_unlock(&setup_lock);
}

/* After cuda_account's constructor (101), which reads the environment. */
__attribute__((constructor(102))) static void cuda_compute_load(void)
{
    cuda_compute_on = cuda_cfg.state == CUDACFG_ON && cuda_cfg.compute;
    high = cudacfg_high_priority(&cuda_cfg);
    if (cuda_compute_on)
        pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}
