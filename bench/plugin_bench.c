/* plugin_bench -- the real gpupool-device-plugin, measured from the kubelet's side.
 *
 *   plugin_bench [-n ROUNDS] [-c CALLS] [-x XIDS] [-F FAKENVML_DIR] [-I INVENTORY_DIR] PLUGIN
 *
 * The harness plays the kubelet: it serves Registration on <tmp>/kubelet.sock,
 * calls GetDevicePluginOptions back inside Register (as the kubelet does) and
 * then opens one ListAndWatch stream per registered resource. The plugin runs
 * on the fake NVML (LD_LIBRARY_PATH=FAKENVML_DIR, FAKE_NVML_INVENTORY,
 * FAKE_NVML_CONTROL, FAKE_NVML_EVENT_LOG). Measured:
 *
 *   exec -> Register   posix_spawn (t0 just before) to Register reaching us
 *   memory             RSS, PSS, private (/proc/<pid>/smaps_rollup) and the
 *                      peak VmHWM, ~300 ms after the first snapshot
 *   Allocate           CALLS calls on one channel, 1 and 2 device IDs
 *   XID -> snapshot    event returned by nvmlEventSetWait (fake's log) to the
 *                      ListAndWatch message with all 4 replicas Unhealthy
 *   lost GPU           XID 79: Unhealthy, stays so, other RPCs still answer
 *   message size       ListAndWatch messages as received, per resource
 *
 * Prints Markdown tables; exits 1 when any step fails or times out. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "api.pb-c.h"
#include "rpc.h"
#include "rpc_test_client.h"

#define MAX_REGS 16
#define MAX_GPUS 64
#define REPLICAS 4
#define TIMEOUT_MS 5000
#define SETTLE_MS 300
#define STOP_TIMEOUT_MS 5000
#define WARMUP_CALLS 100
#define LOST_WATCH_MS 1000

extern char **environ;

/* ---- small helpers ---------------------------------------------------------- */

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    if (fp == NULL) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    int rc = fputs(text, fp) < 0 ? -1 : 0;
    if (fclose(fp) != 0)
        rc = -1;
    if (rc != 0)
        fprintf(stderr, "%s: write failed\n", path);
    return rc;
}

/* Appends one line the way the tests do: open O_APPEND, write, close. */
static int append_line(const char *path, const char *line)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t len = strlen(line);
    ssize_t n = write(fd, line, len);
    int rc = (n == (ssize_t)len && write(fd, "\n", 1) == 1) ? 0 : -1;
    if (close(fd) != 0)
        rc = -1;
    if (rc != 0)
        fprintf(stderr, "%s: append failed\n", path);
    return rc;
}

static bool file_contains(const char *path, const char *needle)
{
    char line[1024];
    bool found = false;
    FILE *fp = fopen(path, "r");
    if (fp == NULL)
        return false;
    while (!found && fgets(line, sizeof line, fp) != NULL)
        found = strstr(line, needle) != NULL;
    fclose(fp);
    return found;
}

static int pack_message(const ProtobufCMessage *m, struct rpc_buf *out)
{
    out->len = protobuf_c_message_get_packed_size(m);
    out->data = malloc(out->len + 1);
    if (out->data == NULL)
        return -1;
    protobuf_c_message_pack(m, out->data);
    return 0;
}

/* ---- the kubelet: Registration server ---------------------------------------- */

struct registration {
    char resource[128];
    char endpoint[128];
    double arrival_us;
};

struct kubelet {
    struct rpc_runtime *rt;       /* for the callbacks and streams */
    struct rpc_test_kubelet *srv; /* serves Registration */
    char dir[64];
    char socket[128];
    pthread_mutex_t lock;
    pthread_cond_t changed;
    struct registration regs[MAX_REGS];
    int nregs;
    char last_error[256];
};

static enum rpc_status kubelet_register(void *ctx, const uint8_t *req, size_t len, char *msg,
                                        size_t msglen)
{
    struct kubelet *k = ctx;
    double arrival = now_us();
    struct registration reg = {.arrival_us = arrival};
    V1beta1__RegisterRequest *r = v1beta1__register_request__unpack(NULL, len, req);
    if (r == NULL || r->endpoint == NULL || r->endpoint[0] == '\0' ||
        strchr(r->endpoint, '/') != NULL) {
        if (r != NULL)
            v1beta1__register_request__free_unpacked(r, NULL);
        snprintf(msg, msglen, "bad RegisterRequest");
        return RPC_INVALID_ARGUMENT;
    }
    snprintf(reg.resource, sizeof reg.resource, "%s", r->resource_name);
    snprintf(reg.endpoint, sizeof reg.endpoint, "%s/%s", k->dir, r->endpoint);
    v1beta1__register_request__free_unpacked(r, NULL);

    /* The kubelet asks for the options before Register returns. */
    struct rpc_buf resp = {0};
    int status = 0;
    char err[256];
    if (rpc_test_call(k->rt, reg.endpoint, "/v1beta1.DevicePlugin/GetDevicePluginOptions",
                      (const uint8_t *)"", 0, TIMEOUT_MS, &resp, &status, err, sizeof err) != 0) {
        snprintf(msg, msglen, "GetDevicePluginOptions failed: %s", err);
        pthread_mutex_lock(&k->lock);
        snprintf(k->last_error, sizeof k->last_error, "%s", msg);
        pthread_mutex_unlock(&k->lock);
        return RPC_UNAVAILABLE;
    }
    free(resp.data);
    pthread_mutex_lock(&k->lock);
    if (k->nregs < MAX_REGS)
        k->regs[k->nregs++] = reg;
    pthread_cond_broadcast(&k->changed);
    pthread_mutex_unlock(&k->lock);
    return RPC_OK;
}

static int kubelet_start(struct kubelet *k)
{
    char err[256];
    pthread_condattr_t attr;
    snprintf(k->dir, sizeof k->dir, "/tmp/gp-pbench-XXXXXX");
    if (mkdtemp(k->dir) == NULL) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        k->dir[0] = '\0';
        return -1;
    }
    snprintf(k->socket, sizeof k->socket, "%s/kubelet.sock", k->dir);
    if (pthread_mutex_init(&k->lock, NULL) != 0 || pthread_condattr_init(&attr) != 0 ||
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&k->changed, &attr) != 0) {
        fprintf(stderr, "kubelet: pthread init failed\n");
        return -1;
    }
    pthread_condattr_destroy(&attr);
    /* gRPC's threads inherit the mask; SIGCHLD etc. stay with us. */
    sigset_t all;
    sigfillset(&all);
    sigdelset(&all, SIGINT);
    sigdelset(&all, SIGTERM);
    sigset_t old;
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = 0;
    if (rpc_runtime_start(&k->rt, err, sizeof err) != 0 ||
        rpc_test_kubelet_start(k->socket, kubelet_register, k, &k->srv, err, sizeof err) != 0) {
        fprintf(stderr, "kubelet: %s\n", err);
        rc = -1;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

static void kubelet_reset(struct kubelet *k)
{
    pthread_mutex_lock(&k->lock);
    k->nregs = 0;
    k->last_error[0] = '\0';
    pthread_mutex_unlock(&k->lock);
}

/* Waits until at least n registrations arrived; copies them out. Returns the count. */
static int kubelet_wait(struct kubelet *k, int n, int timeout_ms, struct registration *out)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&k->lock);
    while (k->nregs < n)
        if (pthread_cond_timedwait(&k->changed, &k->lock, &deadline) == ETIMEDOUT)
            break;
    int got = k->nregs;
    memcpy(out, k->regs, sizeof k->regs[0] * (size_t)got);
    pthread_mutex_unlock(&k->lock);
    return got;
}

static void kubelet_stop(struct kubelet *k)
{
    rpc_test_kubelet_stop(k->srv);
    k->srv = NULL;
    if (k->rt != NULL)
        rpc_runtime_stop(k->rt);
    k->rt = NULL;
}

/* ---- the plugin process ------------------------------------------------------------ */

struct plugin_spec {
    const char *label;
    const char *inventory; /* file name under the inventory dir */
    int replicas;          /* 0: no config file */
    bool mig_mixed;
    bool fast_health; /* --health-recovery-probes 1 --health-probe-interval 50ms */
};

struct plugin_proc {
    pid_t pid;
    double t0_us;
    char control[PATH_MAX];
    char event_log[PATH_MAX];
    char log[PATH_MAX];
    char config[PATH_MAX];
};

/* The variables the plugin or the fake read: never inherited from our caller. */
static const char *const plugin_env[] = {
    "MIG_STRATEGY",
    "FAIL_ON_INIT_ERROR",
    "NVIDIA_DRIVER_ROOT",
    "NVIDIA_DEV_ROOT",
    "PASS_DEVICE_SPECS",
    "DEVICE_LIST_STRATEGY",
    "DEVICE_ID_STRATEGY",
    "GDRCOPY_ENABLED",
    "GDS_ENABLED",
    "MOFED_ENABLED",
    "CDI_ANNOTATION_PREFIX",
    "NVIDIA_CDI_HOOK_PATH",
    "NVIDIA_CTK_PATH",
    "DRIVER_ROOT_CTR_PATH",
    "CONTAINER_DRIVER_ROOT",
    "MPS_ROOT",
    "SHARED_DEVICES_ALLOCATION_POLICY",
    "DEVICE_DISCOVERY_STRATEGY",
    "IMEX_CHANNEL_IDS",
    "IMEX_REQUIRED",
    "KUBELET_SOCKET",
    "CONFIG_FILE",
    "CDI_FEATURE_FLAGS",
    "CDI_DISABLE_HOOKS",
    "DP_DISABLE_HEALTHCHECKS",
    "DP_ENABLE_HEALTHCHECKS",
    "GP_HEALTH_RECOVERY_PROBES",
    "GP_HEALTH_PROBE_INTERVAL",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "FAKE_NVML_INVENTORY",
    "FAKE_NVML_CONTROL",
    "FAKE_NVML_EVENT_LOG",
    NULL,
};

static bool is_plugin_env(const char *entry)
{
    for (const char *const *name = plugin_env; *name != NULL; name++) {
        size_t len = strlen(*name);
        if (strncmp(entry, *name, len) == 0 && entry[len] == '=')
            return true;
    }
    return false;
}

#define EXTRA_ENV 4

struct env_block {
    char **vars;
    char extra[EXTRA_ENV][2 * PATH_MAX];
};

static int env_build(struct env_block *e, const char *fakenvml, const char *inventory,
                     const struct plugin_proc *p)
{
    size_t n = 0, kept = 0;
    while (environ[n] != NULL)
        n++;
    e->vars = calloc(n + EXTRA_ENV + 1, sizeof *e->vars);
    if (e->vars == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!is_plugin_env(environ[i]))
            e->vars[kept++] = environ[i];
    snprintf(e->extra[0], sizeof e->extra[0], "LD_LIBRARY_PATH=%s", fakenvml);
    snprintf(e->extra[1], sizeof e->extra[1], "FAKE_NVML_INVENTORY=%s", inventory);
    snprintf(e->extra[2], sizeof e->extra[2], "FAKE_NVML_CONTROL=%s", p->control);
    snprintf(e->extra[3], sizeof e->extra[3], "FAKE_NVML_EVENT_LOG=%s", p->event_log);
    for (int i = 0; i < EXTRA_ENV; i++)
        e->vars[kept++] = e->extra[i];
    return 0;
}

struct bench {
    struct kubelet k;
    const char *plugin;
    char fakenvml[PATH_MAX];
    char inventories[PATH_MAX];
    int rounds;
    int calls;
    int xid_samples;
    int failures;
};

static int plugin_files(struct bench *b, const struct plugin_spec *spec, struct plugin_proc *p)
{
    /* The fake watches the control file's directory with inotify: a directory
     * of its own, so the plugin's log lines do not wake its EventSetWait. */
    snprintf(p->control, sizeof p->control, "%s/nvml", b->k.dir);
    if (mkdir(p->control, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "%s: %s\n", p->control, strerror(errno));
        return -1;
    }
    snprintf(p->control, sizeof p->control, "%s/nvml/control", b->k.dir);
    snprintf(p->event_log, sizeof p->event_log, "%s/events.log", b->k.dir);
    snprintf(p->log, sizeof p->log, "%s/plugin.log", b->k.dir);
    snprintf(p->config, sizeof p->config, "%s/config.yaml", b->k.dir);
    if (write_file(p->control, "") != 0 || write_file(p->event_log, "") != 0)
        return -1;
    if (spec->replicas > 0) {
        char yaml[512];
        snprintf(yaml, sizeof yaml,
                 "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                 "    - name: nvidia.com/gpu\n      replicas: %d\n",
                 spec->replicas);
        if (write_file(p->config, yaml) != 0)
            return -1;
    }
    return 0;
}

static int plugin_spawn(struct bench *b, const struct plugin_spec *spec, struct plugin_proc *p)
{
    char inventory[PATH_MAX + 64];
    struct env_block env = {0};
    posix_spawn_file_actions_t fa;
    snprintf(inventory, sizeof inventory, "%s/%s", b->inventories, spec->inventory);
    if (plugin_files(b, spec, p) != 0 || env_build(&env, b->fakenvml, inventory, p) != 0)
        return -1;
    char *argv[16];
    int argc = 0;
    argv[argc++] = (char *)b->plugin;
    argv[argc++] = "--kubelet-socket";
    argv[argc++] = b->k.socket;
    if (spec->replicas > 0) {
        argv[argc++] = "--config-file";
        argv[argc++] = p->config;
    }
    if (spec->mig_mixed) {
        argv[argc++] = "--mig-strategy";
        argv[argc++] = "mixed";
    }
    if (spec->fast_health) {
        argv[argc++] = "--health-recovery-probes";
        argv[argc++] = "1";
        argv[argc++] = "--health-probe-interval";
        argv[argc++] = "50ms";
    }
    argv[argc] = NULL;

    int rc = posix_spawn_file_actions_init(&fa);
    if (rc == 0)
        rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (rc == 0)
        rc = posix_spawn_file_actions_addopen(&fa, 1, p->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (rc == 0)
        rc = posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (rc == 0) {
        kubelet_reset(&b->k);
        p->t0_us = now_us();
        rc = posix_spawn(&p->pid, b->plugin, &fa, NULL, argv, env.vars);
    }
    posix_spawn_file_actions_destroy(&fa);
    free(env.vars);
    if (rc != 0) {
        fprintf(stderr, "posix_spawn %s: %s\n", b->plugin, strerror(rc));
        p->pid = 0;
        return -1;
    }
    return 0;
}

static void dump_log(const struct plugin_proc *p)
{
    char line[1024];
    FILE *fp = fopen(p->log, "r");
    if (fp == NULL)
        return;
    fprintf(stderr, "--- plugin log (%s) ---\n", p->log);
    while (fgets(line, sizeof line, fp) != NULL)
        fputs(line, stderr);
    fclose(fp);
}

/* SIGTERM, then waits; returns ms to exit, or -1 (killed, or exit status not 0). */
static double plugin_stop(struct plugin_proc *p)
{
    if (p->pid <= 0)
        return 0;
    double t0 = now_us();
    int wstatus = 0;
    pid_t got = 0;
    if (kill(p->pid, SIGTERM) != 0)
        fprintf(stderr, "kill %d: %s\n", (int)p->pid, strerror(errno));
    while ((got = waitpid(p->pid, &wstatus, WNOHANG)) == 0 && now_us() - t0 < STOP_TIMEOUT_MS * 1e3)
        sleep_ms(1);
    double ms = (now_us() - t0) / 1e3;
    if (got == 0) {
        fprintf(stderr, "plugin %d ignored SIGTERM for %d ms; killing it\n", (int)p->pid,
                STOP_TIMEOUT_MS);
        if (kill(p->pid, SIGKILL) != 0 || waitpid(p->pid, &wstatus, 0) != p->pid)
            fprintf(stderr, "cannot reap plugin %d: %s\n", (int)p->pid, strerror(errno));
        ms = -1;
    } else if (got < 0 || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
        fprintf(stderr, "plugin %d ended with wait status 0x%x after SIGTERM\n", (int)p->pid,
                (unsigned)wstatus);
        dump_log(p);
        ms = -1;
    }
    p->pid = 0;
    return ms;
}

/* Memory as the kernel accounts it. RSS counts every resident page, shared
 * or not; PSS divides each shared page among the processes that map it;
 * private (Private_Clean + Private_Dirty) is what exiting would give back. */
struct proc_status {
    long rss_kb, pss_kb, private_kb, hwm_kb, threads;
};

static long status_field(FILE *fp, const char *name)
{
    char line[256];
    size_t len = strlen(name);
    rewind(fp);
    while (fgets(line, sizeof line, fp) != NULL)
        if (strncmp(line, name, len) == 0 && line[len] == ':')
            return strtol(line + len + 1, NULL, 10);
    return -1;
}

static FILE *open_proc_file(pid_t pid, const char *name)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
    FILE *fp = fopen(path, "r");
    if (fp == NULL)
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
    return fp;
}

/* RSS, PSS and private from smaps_rollup; the peak and threads from status. */
static int read_status(pid_t pid, struct proc_status *s)
{
    FILE *fp = open_proc_file(pid, "smaps_rollup");
    if (fp == NULL)
        return -1;
    s->rss_kb = status_field(fp, "Rss");
    s->pss_kb = status_field(fp, "Pss");
    long clean = status_field(fp, "Private_Clean"), dirty = status_field(fp, "Private_Dirty");
    s->private_kb = clean < 0 || dirty < 0 ? -1 : clean + dirty;
    fclose(fp);
    if ((fp = open_proc_file(pid, "status")) == NULL)
        return -1;
    s->hwm_kb = status_field(fp, "VmHWM");
    s->threads = status_field(fp, "Threads");
    fclose(fp);
    return s->rss_kb < 0 || s->pss_kb < 0 || s->private_kb < 0 || s->hwm_kb < 0 ? -1 : 0;
}

/* ---- the kubelet's streams ------------------------------------------------------------ */

struct stream {
    struct registration reg;
    struct rpc_client *client;
    struct rpc_watch *watch;
    size_t first_bytes;
    size_t first_devices;
};

static int stream_open(struct kubelet *k, struct stream *s)
{
    char err[256];
    if (rpc_client_open(k->rt, s->reg.endpoint, &s->client, err, sizeof err) != 0 ||
        rpc_test_watch_open(s->client, &s->watch, err, sizeof err) != 0) {
        fprintf(stderr, "ListAndWatch %s: %s\n", s->reg.resource, err);
        return -1;
    }
    return 0;
}

/* Next message, decoded; *arrival_us taken as soon as it is in hand. 1, 0 (timeout), -1. */
static int stream_next(struct stream *s, int timeout_ms, V1beta1__ListAndWatchResponse **out,
                       size_t *bytes, double *arrival_us)
{
    struct rpc_buf msg = {0};
    char err[256];
    int rc = rpc_test_watch_next(s->watch, timeout_ms, &msg, NULL, err, sizeof err);
    if (arrival_us != NULL)
        *arrival_us = now_us();
    if (rc == 0)
        return 0;
    if (rc < 0) {
        fprintf(stderr, "ListAndWatch %s ended: %s\n", s->reg.resource, err);
        return -1;
    }
    if (bytes != NULL)
        *bytes = msg.len;
    *out = v1beta1__list_and_watch_response__unpack(NULL, msg.len, msg.data);
    free(msg.data);
    if (*out == NULL) {
        fprintf(stderr, "ListAndWatch %s: undecodable message\n", s->reg.resource);
        return -1;
    }
    return 1;
}

static int stream_first(struct stream *s)
{
    V1beta1__ListAndWatchResponse *list = NULL;
    if (stream_next(s, TIMEOUT_MS, &list, &s->first_bytes, NULL) != 1) {
        fprintf(stderr, "ListAndWatch %s: no first message\n", s->reg.resource);
        return -1;
    }
    s->first_devices = list->n_devices;
    v1beta1__list_and_watch_response__free_unpacked(list, NULL);
    return 0;
}

static void stream_close(struct stream *s)
{
    rpc_test_watch_close(s->watch);
    rpc_client_close(s->client);
    s->watch = NULL;
    s->client = NULL;
}

/* ---- one plugin session: spawn, registrations, streams -------------------------------- */

struct session {
    struct plugin_proc proc;
    struct stream streams[MAX_REGS];
    int nstreams;
    double exec_to_register_ms;
    struct proc_status status;
    double stop_ms;
};

/* Opens a stream (and reads its first message) for every registration not yet
 * streamed. Returns the number of new streams, -1 on failure. */
static int session_follow(struct bench *b, struct session *s, int wait_for, int timeout_ms)
{
    struct registration regs[MAX_REGS];
    int n = kubelet_wait(&b->k, wait_for, timeout_ms, regs), added = 0;
    for (int i = s->nstreams; i < n; i++) {
        struct stream *st = &s->streams[s->nstreams];
        memset(st, 0, sizeof *st);
        st->reg = regs[i];
        s->nstreams++;
        if (stream_open(&b->k, st) != 0 || stream_first(st) != 0)
            return -1;
        added++;
    }
    return added;
}

static void session_end(struct session *s)
{
    for (int i = 0; i < s->nstreams; i++)
        stream_close(&s->streams[i]);
    s->nstreams = 0;
    s->stop_ms = plugin_stop(&s->proc);
}

/* Waits for the first Register, failing early when the plugin exits first. */
static int wait_first_registration(struct bench *b, struct plugin_proc *p,
                                   struct registration *first)
{
    double deadline = now_us() + TIMEOUT_MS * 1e3;
    while (kubelet_wait(&b->k, 1, 50, first) < 1) {
        int wstatus = 0;
        if (waitpid(p->pid, &wstatus, WNOHANG) == p->pid) {
            fprintf(stderr, "plugin exited (wait status 0x%x) before registering\n",
                    (unsigned)wstatus);
            p->pid = 0;
            return -1;
        }
        if (now_us() > deadline) {
            fprintf(stderr, "no Register within %d ms\n", TIMEOUT_MS);
            return -1;
        }
    }
    return 0;
}

/* Spawn, wait for Register, stream every resource, settle, read /proc. */
static int session_start(struct bench *b, const struct plugin_spec *spec, struct session *s)
{
    struct registration first;
    memset(s, 0, sizeof *s);
    if (plugin_spawn(b, spec, &s->proc) != 0)
        return -1;
    if (wait_first_registration(b, &s->proc, &first) != 0) {
        fprintf(stderr, "%s: no Register %s\n", spec->label, b->k.last_error);
        dump_log(&s->proc);
        return -1;
    }
    s->exec_to_register_ms = (first.arrival_us - s->proc.t0_us) / 1e3;
    if (session_follow(b, s, 1, 0) < 0)
        return -1;
    /* Settle; resources registering later (MIG mixed) are streamed too. */
    int added;
    do {
        sleep_ms(SETTLE_MS);
        added = session_follow(b, s, 0, 0);
        if (added < 0)
            return -1;
    } while (added > 0);
    return read_status(s->proc.pid, &s->status);
}

/* ---- start-up, memory and message size ------------------------------------------------ */

struct startup_result {
    const char *label;
    int rounds;
    double *exec_ms;
    double *stop_ms;
    struct proc_status *status;
    struct stream streams[MAX_REGS]; /* of the last round, for sizes */
    int nstreams;
};

static int run_startup(struct bench *b, const struct plugin_spec *spec, int rounds,
                       struct startup_result *r)
{
    r->label = spec->label;
    r->exec_ms = calloc((size_t)rounds, sizeof *r->exec_ms);
    r->stop_ms = calloc((size_t)rounds, sizeof *r->stop_ms);
    r->status = calloc((size_t)rounds, sizeof *r->status);
    if (r->exec_ms == NULL || r->stop_ms == NULL || r->status == NULL) {
        fprintf(stderr, "out of memory\n");
        return -1;
    }
    for (int i = 0; i < rounds; i++) {
        struct session s;
        int rc = session_start(b, spec, &s);
        if (rc == 0) {
            r->exec_ms[i] = s.exec_to_register_ms;
            r->status[i] = s.status;
            memcpy(r->streams, s.streams, sizeof s.streams);
            r->nstreams = s.nstreams;
            for (int j = 0; j < r->nstreams; j++) {
                r->streams[j].client = NULL; /* closed below; only sizes are kept */
                r->streams[j].watch = NULL;
            }
        }
        session_end(&s);
        r->stop_ms[i] = s.stop_ms;
        if (rc != 0 || s.stop_ms < 0) {
            fprintf(stderr, "%s: round %d failed\n", spec->label, i + 1);
            return -1;
        }
        r->rounds = i + 1;
    }
    return 0;
}

static void startup_free(struct startup_result *r)
{
    free(r->exec_ms);
    free(r->stop_ms);
    free(r->status);
}

static void print_startup(const struct startup_result *r, int n)
{
    printf("\n### Start-up: exec → Register (ms)\n\n");
    printf("| node | starts | min | p50 | p90 | max | SIGTERM → exit p50 |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n; i++) {
        size_t c = (size_t)r[i].rounds;
        qsort(r[i].exec_ms, c, sizeof(double), compare_double);
        qsort(r[i].stop_ms, c, sizeof(double), compare_double);
        printf("| %s | %zu | %.2f | %.2f | %.2f | %.2f | %.1f |\n", r[i].label, c, r[i].exec_ms[0],
               percentile(r[i].exec_ms, c, 0.5), percentile(r[i].exec_ms, c, 0.9),
               r[i].exec_ms[c - 1], percentile(r[i].stop_ms, c, 0.5));
    }
}

static double status_column(const struct startup_result *r, size_t offset, double p)
{
    double v[1024];
    size_t c = (size_t)r->rounds < 1024 ? (size_t)r->rounds : 1024;
    for (size_t i = 0; i < c; i++)
        v[i] = (double)*(const long *)((const char *)&r->status[i] + offset);
    qsort(v, c, sizeof v[0], compare_double);
    return percentile(v, c, p);
}

static void print_memory(const struct startup_result *r, int n)
{
    printf("\n### Memory ~%d ms after registration and the first snapshot (KiB; p50 of "
           "starts, max in brackets)\n\n",
           SETTLE_MS);
    printf("| node | RSS | PSS | private | VmHWM | threads |\n");
    printf("|---|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n; i++) {
        printf("| %s", r[i].label);
        size_t offs[] = {offsetof(struct proc_status, rss_kb), offsetof(struct proc_status, pss_kb),
                         offsetof(struct proc_status, private_kb),
                         offsetof(struct proc_status, hwm_kb),
                         offsetof(struct proc_status, threads)};
        for (size_t f = 0; f < sizeof offs / sizeof offs[0]; f++)
            printf(" | %.0f (%.0f)", status_column(&r[i], offs[f], 0.5),
                   status_column(&r[i], offs[f], 1.0));
        printf(" |\n");
    }
}

static void print_sizes(const struct startup_result *r, int n)
{
    printf("\n### ListAndWatch message size as received (first snapshot)\n\n");
    printf("| node | resource | devices | bytes |\n");
    printf("|---|---|---:|---:|\n");
    for (int i = 0; i < n; i++) {
        size_t devices = 0, bytes = 0;
        for (int j = 0; j < r[i].nstreams; j++) {
            const struct stream *s = &r[i].streams[j];
            printf("| %s | %s | %zu | %zu |\n", r[i].label, s->reg.resource, s->first_devices,
                   s->first_bytes);
            devices += s->first_devices;
            bytes += s->first_bytes;
        }
        if (r[i].nstreams > 1)
            printf("| %s | **all %d resources** | %zu | %zu |\n", r[i].label, r[i].nstreams,
                   devices, bytes);
    }
}

/* ---- Allocate latency --------------------------------------------------------------- */

/* One Allocate; 0 when OK (and *us its time), else -1 with the status. */
static int allocate_once(struct rpc_client *c, const struct rpc_buf *req, double *us, int *status,
                         char *msg, size_t msglen)
{
    struct rpc_buf resp = {0};
    double t0 = now_us();
    int rc = rpc_test_client_call(c, "/v1beta1.DevicePlugin/Allocate", req->data, req->len,
                                  TIMEOUT_MS, &resp, status, msg, msglen);
    if (us != NULL)
        *us = now_us() - t0;
    free(resp.data);
    return rc;
}

static int allocate_series(struct rpc_client *c, char **ids, size_t n, int calls, double *samples)
{
    struct rpc_buf req = {0};
    char msg[512];
    int status = 0;
    if (encode_allocate(ids, n, &req) != 0)
        return -1;
    for (int i = -WARMUP_CALLS; i < calls; i++) {
        double us = 0;
        if (allocate_once(c, &req, &us, &status, msg, sizeof msg) != 0) {
            fprintf(stderr, "Allocate %s: status %d: %s\n", ids[0], status, msg);
            free(req.data);
            return -1;
        }
        if (i >= 0)
            samples[i] = us;
    }
    free(req.data);
    qsort(samples, (size_t)calls, sizeof *samples, compare_double);
    return 0;
}

/* Device IDs of the stream's current snapshot (first message re-read on a new stream). */
struct id_list {
    V1beta1__ListAndWatchResponse *list;
    char *ids[MAX_GPUS * 64];
    size_t n;
};

static int current_ids(struct kubelet *k, const struct registration *reg, struct id_list *out)
{
    struct stream s = {.reg = *reg};
    int rc = -1;
    out->list = NULL;
    out->n = 0;
    if (stream_open(k, &s) == 0 && stream_next(&s, TIMEOUT_MS, &out->list, NULL, NULL) == 1) {
        for (size_t i = 0;
             i < out->list->n_devices && out->n < sizeof out->ids / sizeof out->ids[0]; i++)
            out->ids[out->n++] = out->list->devices[i]->id;
        rc = out->n >= 2 ? 0 : -1;
    }
    stream_close(&s);
    if (rc != 0)
        fprintf(stderr, "%s: need at least 2 devices\n", reg->resource);
    return rc;
}

static void id_list_free(struct id_list *l)
{
    if (l->list != NULL)
        v1beta1__list_and_watch_response__free_unpacked(l->list, NULL);
    l->list = NULL;
}

static int run_allocate(struct bench *b)
{
    const struct plugin_spec spec = {"8 GPUs", "8gpu-nvlink.json", 0, false, false};
    static struct session s;
    memset(&s, 0, sizeof s);
    struct id_list ids = {0};
    double *one = calloc((size_t)b->calls, sizeof *one);
    double *two = calloc((size_t)b->calls, sizeof *two);
    int rc = -1;
    if (one == NULL || two == NULL || session_start(b, &spec, &s) != 0)
        goto out;
    if (current_ids(&b->k, &s.streams[0].reg, &ids) != 0)
        goto out;
    /* The stream's channel, as the kubelet uses one connection per plugin. */
    struct rpc_client *c = s.streams[0].client;
    if (allocate_series(c, ids.ids, 1, b->calls, one) != 0 ||
        allocate_series(c, ids.ids, 2, b->calls, two) != 0)
        goto out;
    printf(
        "\n### Allocate latency, C client, one channel (%d calls each, after %d warm-up; µs)\n\n",
        b->calls, WARMUP_CALLS);
    printf("| node | IDs per call | p50 | p90 | p99 | max |\n");
    printf("|---|---:|---:|---:|---:|---:|\n");
    size_t n = (size_t)b->calls;
    printf("| %s | 1 | %.1f | %.1f | %.1f | %.1f |\n", spec.label, percentile(one, n, 0.5),
           percentile(one, n, 0.9), percentile(one, n, 0.99), one[n - 1]);
    printf("| %s | 2 | %.1f | %.1f | %.1f | %.1f |\n", spec.label, percentile(two, n, 0.5),
           percentile(two, n, 0.9), percentile(two, n, 0.99), two[n - 1]);
    rc = 0;
out:
    id_list_free(&ids);
    session_end(&s);
    if (s.stop_ms < 0)
        rc = -1;
    free(one);
    free(two);
    return rc;
}

/* ---- XID -> ListAndWatch ---------------------------------------------------------------- */

/* "<uuid>::<k>" -> does it belong to uuid? */
static bool replica_of(const char *id, const char *uuid)
{
    size_t len = strlen(uuid);
    return strncmp(id, uuid, len) == 0 &&
           (id[len] == '\0' || (id[len] == ':' && id[len + 1] == ':'));
}

struct gpu_state {
    int total, unhealthy;
};

static struct gpu_state state_of(const V1beta1__ListAndWatchResponse *list, const char *uuid)
{
    struct gpu_state st = {0, 0};
    for (size_t i = 0; i < list->n_devices; i++) {
        if (!replica_of(list->devices[i]->id, uuid))
            continue;
        st.total++;
        if (strcmp(list->devices[i]->health, "Healthy") != 0)
            st.unhealthy++;
    }
    return st;
}

/* The fake's event log, read incrementally. */
struct event_log {
    const char *path;
    long offset;
};

/* Finds the first new event "<ns> <uuid> <xid>" with this xid; fills uuid and ns. */
static int event_next(struct event_log *log, unsigned xid, char *uuid, size_t uuidlen,
                      double *event_us)
{
    char line[256], id[128];
    unsigned long long ns = 0;
    unsigned x = 0;
    int found = -1;
    FILE *fp = fopen(log->path, "r");
    if (fp == NULL || fseek(fp, log->offset, SEEK_SET) != 0) {
        if (fp != NULL)
            fclose(fp);
        return -1;
    }
    while (found != 0 && fgets(line, sizeof line, fp) != NULL) {
        if (strchr(line, '\n') == NULL)
            break; /* a line still being written */
        log->offset = ftell(fp);
        if (sscanf(line, "%llu %127s %u", &ns, id, &x) == 3 && x == xid) {
            snprintf(uuid, uuidlen, "%s", id);
            *event_us = (double)ns / 1e3;
            found = 0;
        }
    }
    fclose(fp);
    return found;
}

struct xid_stats {
    double *latency_us;
    double *recovery_ms;
    int samples;
    int split; /* first message showing the GPU Unhealthy had < all replicas */
    int within_1ms;
};

/* Reads messages until fn(list, uuid) holds; *arrival_us of that message.
 * *partial counts messages where the GPU was partly Unhealthy. */
static int wait_for_state(struct stream *s, const char *uuid, bool unhealthy, int timeout_ms,
                          double *arrival_us, int *partial)
{
    double deadline = now_us() + timeout_ms * 1e3;
    for (;;) {
        int left = (int)((deadline - now_us()) / 1e3);
        if (left <= 0)
            return -1;
        V1beta1__ListAndWatchResponse *list = NULL;
        int rc = stream_next(s, left, &list, NULL, arrival_us);
        if (rc < 0)
            return -1;
        if (rc == 0)
            continue;
        struct gpu_state st = state_of(list, uuid);
        v1beta1__list_and_watch_response__free_unpacked(list, NULL);
        if (st.total == 0)
            return -1;
        if (st.unhealthy > 0 && st.unhealthy < st.total && partial != NULL)
            (*partial)++;
        if (unhealthy ? st.unhealthy == st.total : st.unhealthy == 0)
            return 0;
    }
}

/* Waits for the first new event of xid in the log (the fake writes it before
 * nvmlEventSetWait returns, so it is there once the plugin acted on it). */
static int wait_event(struct event_log *log, unsigned xid, char *uuid, size_t len, double *event_us)
{
    double deadline = now_us() + TIMEOUT_MS * 1e3;
    while (event_next(log, xid, uuid, len, event_us) != 0) {
        if (now_us() > deadline) {
            fprintf(stderr, "no XID %u in the fake's event log %s\n", xid, log->path);
            return -1;
        }
        sleep_ms(1);
    }
    return 0;
}

/* Reads messages until some GPU has Unhealthy replicas; names it. */
static int wait_any_unhealthy(struct stream *s, const struct id_list *gpus, int timeout_ms,
                              double *arrival_us, char *uuid, size_t uuidlen, bool *all)
{
    double deadline = now_us() + timeout_ms * 1e3;
    for (;;) {
        int left = (int)((deadline - now_us()) / 1e3);
        if (left <= 0)
            return -1;
        V1beta1__ListAndWatchResponse *list = NULL;
        int rc = stream_next(s, left, &list, NULL, arrival_us);
        if (rc < 0)
            return -1;
        if (rc == 0)
            continue;
        int hit = -1;
        struct gpu_state st = {0, 0};
        for (size_t g = 0; g < gpus->n && hit < 0; g++) {
            st = state_of(list, gpus->ids[g]);
            if (st.unhealthy > 0)
                hit = (int)g;
        }
        v1beta1__list_and_watch_response__free_unpacked(list, NULL);
        if (hit >= 0) {
            snprintf(uuid, uuidlen, "%s", gpus->ids[hit]);
            *all = st.unhealthy == st.total;
            return 0;
        }
    }
}

/* Distinct physical UUIDs of a replicated snapshot (ids point into the list). */
static int physical_gpus(const struct id_list *replicas, struct id_list *gpus, char store[][96])
{
    gpus->n = 0;
    gpus->list = NULL;
    for (size_t i = 0; i < replicas->n; i++) {
        const char *id = replicas->ids[i];
        const char *sep = strstr(id, "::");
        size_t len = sep != NULL ? (size_t)(sep - id) : strlen(id);
        bool seen = false;
        for (size_t g = 0; g < gpus->n && !seen; g++)
            seen = strlen(gpus->ids[g]) == len && strncmp(gpus->ids[g], id, len) == 0;
        if (seen)
            continue;
        if (gpus->n >= MAX_GPUS || len >= 96)
            return -1;
        memcpy(store[gpus->n], id, len);
        store[gpus->n][len] = '\0';
        gpus->ids[gpus->n] = store[gpus->n];
        gpus->n++;
    }
    return 0;
}

/* Appends a control line and waits for the snapshot in which every replica of
 * the GPU that went Unhealthy is Unhealthy; then matches the fake's event for
 * xid. *latency_us = that snapshot's arrival - the event; *split when the
 * first snapshot showing the GPU had only some replicas Unhealthy. */
static int inject(struct session *s, struct event_log *log, const struct id_list *gpus,
                  const char *line, unsigned xid, char *uuid, size_t uuidlen, double *latency_us,
                  bool *split)
{
    char event_uuid[128];
    double arrival = 0, event_us = 0;
    bool all = false;
    if (append_line(s->proc.control, line) != 0)
        return -1;
    if (wait_any_unhealthy(&s->streams[0], gpus, TIMEOUT_MS, &arrival, uuid, uuidlen, &all) != 0) {
        fprintf(stderr, "`%s`: no Unhealthy snapshot\n", line);
        return -1;
    }
    *split = !all;
    if (!all && wait_for_state(&s->streams[0], uuid, true, TIMEOUT_MS, &arrival, NULL) != 0) {
        fprintf(stderr, "`%s`: not every replica of %s went Unhealthy\n", line, uuid);
        return -1;
    }
    if (wait_event(log, xid, event_uuid, sizeof event_uuid, &event_us) != 0)
        return -1;
    if (strcmp(uuid, event_uuid) != 0) {
        fprintf(stderr, "`%s`: event for %s but %s went Unhealthy\n", line, event_uuid, uuid);
        return -1;
    }
    *latency_us = arrival - event_us;
    return 0;
}

/* One XID 48: inject, all replicas Unhealthy, then back to Healthy. */
static int xid_sample(struct session *s, struct event_log *log, const struct id_list *gpus,
                      int index, struct xid_stats *st)
{
    char line[64], uuid[96];
    double latency = 0, unhealthy_at = now_us(), healthy_at = 0;
    bool split = false;
    snprintf(line, sizeof line, "xid %d 48", index);
    if (inject(s, log, gpus, line, 48, uuid, sizeof uuid, &latency, &split) != 0)
        return -1;
    unhealthy_at = now_us();
    if (wait_for_state(&s->streams[0], uuid, false, TIMEOUT_MS, &healthy_at, NULL) != 0) {
        fprintf(stderr, "GPU %s did not recover to Healthy\n", uuid);
        return -1;
    }
    st->latency_us[st->samples] = latency;
    st->recovery_ms[st->samples] = (healthy_at - unhealthy_at) / 1e3;
    st->within_1ms += latency <= 1000.0;
    st->split += split;
    st->samples++;
    return 0;
}

struct lost_result {
    double latency_us;
    bool all_unhealthy, stayed_unhealthy;
    double other_allocate_us;
    int other_status;
    int lost_status;
    int preferred_status;
};

static int encode_preferred(char **ids, size_t n, struct rpc_buf *out)
{
    V1beta1__ContainerPreferredAllocationRequest c =
        V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT;
    V1beta1__ContainerPreferredAllocationRequest *cs[] = {&c};
    V1beta1__PreferredAllocationRequest req = V1BETA1__PREFERRED_ALLOCATION_REQUEST__INIT;
    c.n_available_deviceids = n;
    c.available_deviceids = ids;
    c.allocation_size = 2;
    req.n_container_requests = 1;
    req.container_requests = cs;
    return pack_message(&req.base, out);
}

/* Other RPCs while one GPU is lost: Allocate elsewhere, Allocate on it, GetPreferredAllocation. */
static int lost_rpcs(struct rpc_client *c, const struct id_list *replicas, const char *lost,
                     struct lost_result *r)
{
    char *other = NULL, *mine = NULL, *healthy[MAX_GPUS * 64];
    size_t nh = 0;
    char msg[512];
    for (size_t i = 0; i < replicas->n; i++) {
        if (replica_of(replicas->ids[i], lost)) {
            mine = mine != NULL ? mine : replicas->ids[i];
        } else {
            other = other != NULL ? other : replicas->ids[i];
            healthy[nh++] = replicas->ids[i];
        }
    }
    struct rpc_buf req = {0};
    if (other == NULL || mine == NULL || encode_allocate(&other, 1, &req) != 0)
        return -1;
    r->other_status = 0;
    if (allocate_once(c, &req, &r->other_allocate_us, &r->other_status, msg, sizeof msg) != 0)
        fprintf(stderr, "Allocate %s while %s is lost: status %d: %s\n", other, lost,
                r->other_status, msg);
    free(req.data);
    if (encode_allocate(&mine, 1, &req) != 0)
        return -1;
    r->lost_status = 0;
    allocate_once(c, &req, NULL, &r->lost_status, msg, sizeof msg);
    free(req.data);
    if (encode_preferred(healthy, nh, &req) != 0)
        return -1;
    struct rpc_buf resp = {0};
    r->preferred_status = 0;
    if (rpc_test_client_call(c, "/v1beta1.DevicePlugin/GetPreferredAllocation", req.data, req.len,
                             TIMEOUT_MS, &resp, &r->preferred_status, msg, sizeof msg) != 0)
        fprintf(stderr, "GetPreferredAllocation while %s is lost: status %d: %s\n", lost,
                r->preferred_status, msg);
    free(resp.data);
    free(req.data);
    return r->other_status == 0 && r->preferred_status == 0 ? 0 : -1;
}

/* Watches for LOST_WATCH_MS: the lost GPU must not come back. */
static bool stays_unhealthy(struct stream *s, const char *uuid)
{
    double deadline = now_us() + LOST_WATCH_MS * 1e3;
    for (;;) {
        int left = (int)((deadline - now_us()) / 1e3);
        if (left <= 0)
            return true;
        V1beta1__ListAndWatchResponse *list = NULL;
        int rc = stream_next(s, left, &list, NULL, NULL);
        if (rc < 0)
            return false;
        if (rc == 0)
            continue;
        struct gpu_state st = state_of(list, uuid);
        v1beta1__list_and_watch_response__free_unpacked(list, NULL);
        if (st.unhealthy != st.total)
            return false;
    }
}

static int lost_gpu(struct session *s, struct event_log *log, const struct id_list *gpus,
                    const struct id_list *replicas, int index, struct lost_result *r)
{
    char line[64], uuid[96];
    bool split = false;
    snprintf(line, sizeof line, "lost %d", index);
    if (inject(s, log, gpus, line, 79, uuid, sizeof uuid, &r->latency_us, &split) != 0)
        return -1;
    r->all_unhealthy = !split;
    r->stayed_unhealthy = stays_unhealthy(&s->streams[0], uuid);
    int rc = lost_rpcs(s->streams[0].client, replicas, uuid, r);
    return rc == 0 && r->all_unhealthy && r->stayed_unhealthy ? 0 : -1;
}

static bool wait_health_started(const struct plugin_proc *p)
{
    double deadline = now_us() + TIMEOUT_MS * 1e3;
    while (!file_contains(p->log, "Health checks started")) {
        if (now_us() > deadline)
            return false;
        sleep_ms(5);
    }
    return true;
}

static void print_xid(const struct xid_stats *st, const struct lost_result *lost, int lost_rc)
{
    size_t n = (size_t)st->samples;
    qsort(st->latency_us, n, sizeof(double), compare_double);
    qsort(st->recovery_ms, n, sizeof(double), compare_double);
    printf("\n### XID → ListAndWatch (8 GPUs × replicas %d, --health-recovery-probes 1 "
           "--health-probe-interval 50ms)\n\n",
           REPLICAS);
    printf("| measurement | samples | p50 | p99 | max |\n");
    printf("|---|---:|---:|---:|---:|\n");
    printf("| XID 48: event returned by NVML → snapshot with all %d replicas Unhealthy (µs) "
           "| %zu | %.0f | %.0f | %.0f |\n",
           REPLICAS, n, percentile(st->latency_us, n, 0.5), percentile(st->latency_us, n, 0.99),
           st->latency_us[n - 1]);
    printf("| XID 48: Unhealthy snapshot → Healthy snapshot (ms) | %zu | %.1f | %.1f | %.1f |\n", n,
           percentile(st->recovery_ms, n, 0.5), percentile(st->recovery_ms, n, 0.99),
           st->recovery_ms[n - 1]);
    printf("\n| check | result |\n|---|---|\n");
    printf("| XID 48 samples within 1 ms | %d of %zu |\n", st->within_1ms, n);
    printf("| XID 48 snapshots with only some replicas Unhealthy | %d of %zu |\n", st->split, n);
    if (lost_rc == 0 || lost->latency_us > 0) {
        printf("| XID 79 (`lost`): event → all %d replicas Unhealthy | %.0f µs, %s |\n", REPLICAS,
               lost->latency_us, lost->all_unhealthy ? "same snapshot" : "**split**");
        printf("| XID 79: still Unhealthy %d ms later (20 probe intervals) | %s |\n", LOST_WATCH_MS,
               lost->stayed_unhealthy ? "yes" : "**no**");
        printf("| XID 79: Allocate of another GPU's replica | %s (%.0f µs) |\n",
               lost->other_status == 0 ? "OK" : "**failed**", lost->other_allocate_us);
        printf("| XID 79: GetPreferredAllocation over the healthy replicas | %s |\n",
               lost->preferred_status == 0 ? "OK" : "**failed**");
        printf("| XID 79: Allocate of the lost GPU's replica (informational) | gRPC status %d |\n",
               lost->lost_status);
    } else {
        printf("| XID 79 (`lost`) | **failed** |\n");
    }
}

static int run_xid(struct bench *b)
{
    const struct plugin_spec spec = {"8 GPUs × 4", "8gpu-nvlink.json", REPLICAS, false, true};
    static struct session s;
    memset(&s, 0, sizeof s);
    struct id_list replicas = {0}, gpus = {0};
    static char store[MAX_GPUS][96];
    struct xid_stats st = {0};
    struct lost_result lost = {0};
    int rc = -1, lost_rc = -1;
    st.latency_us = calloc((size_t)b->xid_samples, sizeof(double));
    st.recovery_ms = calloc((size_t)b->xid_samples, sizeof(double));
    if (st.latency_us == NULL || st.recovery_ms == NULL || session_start(b, &spec, &s) != 0)
        goto out;
    struct event_log log = {s.proc.event_log, 0};
    if (!wait_health_started(&s.proc)) {
        fprintf(stderr, "no \"Health checks started\" in the plugin log\n");
        dump_log(&s.proc);
        goto out;
    }
    if (current_ids(&b->k, &s.streams[0].reg, &replicas) != 0 ||
        physical_gpus(&replicas, &gpus, store) != 0 || gpus.n != 8 || replicas.n != 8 * REPLICAS) {
        fprintf(stderr, "expected 8 GPUs x %d replicas, got %zu devices\n", REPLICAS, replicas.n);
        goto out;
    }
    for (int i = 0; i < b->xid_samples; i++)
        if (xid_sample(&s, &log, &gpus, i % 8, &st) != 0) {
            dump_log(&s.proc);
            goto out;
        }
    lost_rc = lost_gpu(&s, &log, &gpus, &replicas, 3, &lost);
    print_xid(&st, &lost, lost_rc);
    rc = lost_rc;
out:
    id_list_free(&replicas);
    session_end(&s);
    if (s.stop_ms < 0)
        rc = -1;
    free(st.latency_us);
    free(st.recovery_ms);
    return rc;
}

/* ---- main ------------------------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr,
            "usage: plugin_bench [-n ROUNDS] [-c CALLS] [-x XIDS] [-F FAKENVML_DIR] "
            "[-I INVENTORY_DIR] PLUGIN\n"
            "  ROUNDS  plugin starts at 8 GPUs, 1-1000 (default 20; 8x64 and MIG get a quarter)\n"
            "  CALLS   Allocate calls per series (default 10000)\n"
            "  XIDS    XID 48 samples (default 40)\n"
            "  FAKENVML_DIR   default: <dir of PLUGIN>/test/fakenvml\n"
            "  INVENTORY_DIR  default: test/fakenvml/inventories of this source tree\n");
}

static int parse_args(struct bench *b, int argc, char **argv)
{
    int opt;
    b->rounds = 20;
    b->calls = 10000;
    b->xid_samples = 40;
    b->fakenvml[0] = b->inventories[0] = '\0';
    while ((opt = getopt(argc, argv, "n:c:x:F:I:h")) != -1) {
        if (opt == 'n' && atoi(optarg) > 0 && atoi(optarg) <= 1000)
            b->rounds = atoi(optarg);
        else if (opt == 'c' && atoi(optarg) > 0)
            b->calls = atoi(optarg);
        else if (opt == 'x' && atoi(optarg) > 0)
            b->xid_samples = atoi(optarg);
        else if (opt == 'F')
            snprintf(b->fakenvml, sizeof b->fakenvml, "%s", optarg);
        else if (opt == 'I')
            snprintf(b->inventories, sizeof b->inventories, "%s", optarg);
        else
            return -1;
    }
    if (argc - optind != 1)
        return -1;
    b->plugin = argv[optind];
    if (b->fakenvml[0] == '\0') {
        const char *slash = strrchr(b->plugin, '/');
        int dirlen = slash != NULL ? (int)(slash - b->plugin) : 1;
        snprintf(b->fakenvml, sizeof b->fakenvml, "%.*s/test/fakenvml", dirlen,
                 slash != NULL ? b->plugin : ".");
    }
    if (b->inventories[0] == '\0') {
        /* __FILE__ is bench/plugin_bench.c under the source root (absolute with CMake). */
        const char *self = __FILE__, *end = strstr(self, "bench/plugin_bench.c");
        int len = end != NULL ? (int)(end - self) : 0;
        snprintf(b->inventories, sizeof b->inventories, "%.*stest/fakenvml/inventories", len, self);
    }
    return 0;
}

static int check_paths(const struct bench *b)
{
    char lib[PATH_MAX + 32], inv[PATH_MAX + 32];
    snprintf(lib, sizeof lib, "%s/libnvidia-ml.so.1", b->fakenvml);
    snprintf(inv, sizeof inv, "%s/8gpu-nvlink.json", b->inventories);
    const char *need[] = {b->plugin, lib, inv};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (access(need[i], R_OK) != 0) {
            fprintf(stderr, "%s: %s\n", need[i], strerror(errno));
            return -1;
        }
    return 0;
}

static void remove_tmpdir(struct kubelet *k)
{
    const char *files[] = {"nvml/control", "nvml",        "events.log",
                           "plugin.log",   "config.yaml", "kubelet.sock"};
    char path[PATH_MAX];
    if (k->dir[0] == '\0')
        return;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", k->dir, files[i]);
        if (unlink(path) != 0 && (errno == EISDIR || errno == EPERM))
            rmdir(path);
    }
    if (rmdir(k->dir) != 0)
        fprintf(stderr, "note: %s left behind: %s\n", k->dir, strerror(errno));
}

static int run_all(struct bench *b)
{
    const struct plugin_spec specs[] = {
        {"8 GPUs", "8gpu-nvlink.json", 0, false, false},
        {"8 GPUs × 64 replicas", "8gpu-nvlink.json", 64, false, false},
        {"8 A100 MIG mixed", "8a100-mig-mixed.json", 0, true, false},
    };
    const int n = (int)(sizeof specs / sizeof specs[0]);
    struct startup_result res[3] = {{0}};
    int rc = 0, done = 0;
    for (; done < n && rc == 0; done++) {
        int rounds = done == 0 ? b->rounds : (b->rounds + 3) / 4;
        rc = run_startup(b, &specs[done], rounds, &res[done]);
    }
    if (rc == 0) {
        print_startup(res, n);
        print_memory(res, n);
        print_sizes(res, n);
        fflush(stdout);
    } else {
        b->failures++;
    }
    for (int i = 0; i < done; i++)
        startup_free(&res[i]);
    if (run_allocate(b) != 0)
        b->failures++;
    fflush(stdout);
    if (run_xid(b) != 0)
        b->failures++;
    return b->failures == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    struct bench b = {0};
    if (parse_args(&b, argc, argv) != 0) {
        usage();
        return 2;
    }
    if (check_paths(&b) != 0)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    int rc = kubelet_start(&b.k);
    if (rc == 0) {
        printf("plugin_bench: %s (fake NVML %s)\n", b.plugin, b.fakenvml);
        rc = run_all(&b);
    }
    kubelet_stop(&b.k);
    remove_tmpdir(&b.k);
    if (rc != 0)
        fprintf(stderr, "plugin_bench: %d part(s) failed\n", b.failures > 0 ? b.failures : 1);
    return rc == 0 ? 0 : 1;
}
