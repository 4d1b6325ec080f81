/* mps_control.c -- see mps_control.h. */
#include "mps_control.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "mps_edits.h"

#define MPS_BINARY "nvidia-cuda-mps-control"
#define PROBE_MS 1000
#define BACKOFF_FIRST_MS 1000
#define BACKOFF_MAX_MS 30000
/* Longest a control client (or `-d`) may take: a hung one is killed. */
#define CLIENT_DEADLINE_MS 5000
#define ENV_MAX 4

struct mps_daemon {
    char resource[CONFIG_NAME_LEN];
    char dir[4096];         /* <root>/<resource> */
    char commands[4096];    /* the defaults it is told after each start */
    char *env[ENV_MAX + 1]; /* owned strings: pipe, log, visible devices */
    int64_t next_start_ns;  /* 0 = running */
    bool started;           /* told its defaults at least once: stop sends quit */
    int backoff_ms;
};

struct mps_control {
    char binary[4096];
    size_t count;
    struct mps_daemon *daemons;
    pthread_t watcher;
    bool watching;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stopping;
};

/* Runs the control binary (argv1 = "-d" or NULL for a client) with its
 * input on stdin; out gets what it printed. Returns its exit status, 128 +
 * signal, or -1 when it could not be run (out says why). */
static int run_control(const char *binary, const char *argv1, char *const *env, const char *input,
                       char *out, size_t outlen)
{
    int in[2], res[2];
    out[0] = '\0';
    if (pipe2(in, O_CLOEXEC) != 0)
        return snprintf(out, outlen, "pipe: %s", strerror(errno)), -1;
    if (pipe2(res, O_CLOEXEC) != 0) {
        snprintf(out, outlen, "pipe: %s", strerror(errno));
        close(in[0]);
        close(in[1]);
        return -1;
    }
    char *argv[] = {(char *)binary, (char *)argv1, NULL};
    pid_t pid = fork();
    if (pid == 0) {
        /* async-signal-safe only: the agent has threads */
        if (dup2(in[0], 0) < 0 || dup2(res[1], 1) < 0 || dup2(res[1], 2) < 0)
            _exit(126);
        execve(binary, argv, env);
        _exit(127);
    }
    close(in[0]);
    close(res[1]);
    if (pid < 0) {
        snprintf(out, outlen, "fork: %s", strerror(errno));
        close(in[1]);
        close(res[0]);
        return -1;
    }
    size_t len = strlen(input);
    /* Commands are a few lines: they fit in the pipe, so no deadlock. */
    if (len > 0 && write(in[1], input, len) != (ssize_t)len)
        log_warn("MPS control %s: short write of its commands", binary);
    close(in[1]);
    size_t used = 0;
    int64_t deadline = clock_now_ns() + (int64_t)CLIENT_DEADLINE_MS * 1000000;
    for (;;) {
        int64_t left = (deadline - clock_now_ns()) / 1000000;
        struct pollfd p = {res[0], POLLIN, 0};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            break; /* a daemon that kept our pipe open: its output ends here */
        char buf[512];
        ssize_t n = read(res[0], buf, sizeof buf);
        if (n <= 0)
            break;
        size_t take = (size_t)n < outlen - 1 - used ? (size_t)n : outlen - 1 - used;
        memcpy(out + used, buf, take);
        used += take;
        out[used] = '\0';
    }
    close(res[0]);
    int status;
    for (int i = 0; waitpid(pid, &status, WNOHANG) == 0; i++) {
        if (i == 50)
            kill(pid, SIGKILL);
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    while (used > 0 && (out[used - 1] == '\n' || out[used - 1] == ' '))
        out[--used] = '\0';
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

static int make_dirs(const char *path, char *err, size_t errlen)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot create %s: %s", p, strerror(errno));
            return -1;
        }
        if ((*s = c) == '\0')
            return 0;
    }
}

/* Starts one daemon and tells it its defaults. */
static int start_daemon(const struct mps_control *m, struct mps_daemon *d, char *err, size_t errlen)
{
    char out[2048];
    int rc = run_control(m->binary, "-d", d->env, "", out, sizeof out);
    if (rc != 0) {
        snprintf(err, errlen, "%s -d for %s exited with %d: %s", m->binary, d->resource, rc,
                 out[0] ? out : "(no output)");
        return -1;
    }
    rc = run_control(m->binary, NULL, d->env, d->commands, out, sizeof out);
    if (rc != 0) {
        snprintf(err, errlen, "the MPS control daemon of %s refused its defaults (%d): %s",
                 d->resource, rc, out[0] ? out : "(no output)");
        return -1;
    }
    char started[4200];
    snprintf(started, sizeof started, "%s/.started", d->dir);
    int fd = open(started, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0)
        close(fd);
    d->started = true;
    char told[sizeof d->commands];
    snprintf(told, sizeof told, "%s", d->commands);
    for (char *c = told; *c; c++) /* one log line */
        *c = *c == '\n' && c[1] != '\0' ? ';' : *c == '\n' ? '\0' : *c;
    log_info("MPS control daemon of %s running (pipe %s/pipe), told: %s", d->resource, d->dir,
             told);
    return 0;
}

static bool answers(const struct mps_control *m, const struct mps_daemon *d)
{
    char out[512];
    return run_control(m->binary, NULL, d->env, "get_default_active_thread_percentage\n", out,
                       sizeof out) == 0;
}

static void *watch(void *arg)
{
    struct mps_control *m = arg;
    pthread_mutex_lock(&m->lock);
    while (!m->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += PROBE_MS / 1000;
        pthread_cond_timedwait(&m->wake, &m->lock, &until);
        for (size_t i = 0; i < m->count && !m->stopping; i++) {
            struct mps_daemon *d = &m->daemons[i];
            char err[4096];
            if (d->next_start_ns == 0) {
                if (answers(m, d))
                    continue;
                log_error("MPS control daemon of %s is gone (no answer on %s/pipe); starting it "
                          "again in %d ms",
                          d->resource, d->dir, d->backoff_ms);
                d->next_start_ns = clock_now_ns() + (int64_t)d->backoff_ms * 1000000;
                continue;
            }
            if (clock_now_ns() < d->next_start_ns)
                continue;
            if (start_daemon(m, d, err, sizeof err) == 0) {
                d->next_start_ns = 0;
                d->backoff_ms = BACKOFF_FIRST_MS;
                continue;
            }
            d->backoff_ms = d->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : d->backoff_ms * 2;
            log_error("%s; next try in %d ms", err, d->backoff_ms);
            d->next_start_ns = clock_now_ns() + (int64_t)d->backoff_ms * 1000000;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

static void free_control(struct mps_control *m)
{
    for (size_t i = 0; i < m->count; i++)
        for (size_t k = 0; k < ENV_MAX; k++)
            free(m->daemons[i].env[k]);
    free(m->daemons);
    pthread_mutex_destroy(&m->lock);
    pthread_cond_destroy(&m->wake);
    free(m);
}

static int find_binary(const struct gp_config *cfg, char *out, size_t outlen, char *err,
                       size_t errlen)
{
    if (cfg->mps_control != NULL && cfg->mps_control[0] != '\0') {
        snprintf(out, outlen, "%s", cfg->mps_control);
        if (access(out, X_OK) == 0)
            return 0;
        snprintf(err, errlen, "the MPS control binary %s (--mps-control) cannot be run: %s", out,
                 strerror(errno));
        return -1;
    }
    const char *root = cfg->nvidia_driver_root ? cfg->nvidia_driver_root : "/";
    static const char *const dirs[] = {"usr/bin", "bin"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(out, outlen, "%s%s%s/" MPS_BINARY, root, root[strlen(root) - 1] == '/' ? "" : "/",
                 dirs[i]);
        if (access(out, X_OK) == 0)
            return 0;
    }
    snprintf(err, errlen,
             MPS_BINARY " not found under the driver root %s (usr/bin, bin): the driver is too "
                        "old or its utilities are not mounted; name it with --mps-control",
             root);
    return -1;
}

/* The daemon of one shared resource: its GPUs, directories and defaults. */
static int plan_daemon(const struct gp_config *cfg, const struct gpu_inventory *inv,
                       const struct resource *res, struct mps_daemon *d, char *err, size_t errlen)
{
    char visible[4096] = "", path[4200];
    size_t used = 0, ordinal = 0;
    snprintf(d->resource, sizeof d->resource, "%s", res->name);
    if (mps_resource_dir(cfg->mps_root, res->name, "", path, sizeof path) != 0)
        return snprintf(err, errlen, "MPS root %s is too long", cfg->mps_root), -1;
    snprintf(d->dir, sizeof d->dir, "%.*s", (int)strlen(path) - 1, path);
    d->backoff_ms = BACKOFF_FIRST_MS;
    size_t cmd = 0;
    for (size_t i = 0; i < res->device_count; i++) {
        const struct resource_device *rd = &res->devices[i];
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = res->devices[j].gpu == rd->gpu;
        if (seen)
            continue;
        const struct gpu_device *g = &inv->gpus[rd->gpu];
        if (rd->mig != RESOURCE_NO_MIG || g->mig_enabled)
            return snprintf(err, errlen,
                            "MPS cannot share %s: GPU %u (%s) has MIG enabled (MPS runs on "
                            "whole GPUs only; disable MIG or drop it from sharing.mps)",
                            res->name, g->index, g->uuid),
                   -1;
        size_t replicas = 0;
        for (size_t j = 0; j < res->device_count; j++)
            replicas += res->devices[j].gpu == rd->gpu;
        int w = snprintf(visible + used, sizeof visible - used, "%s%s", used ? "," : "", g->uuid);
        used += w > 0 ? (size_t)w : 0;
        w = snprintf(d->commands + cmd, sizeof d->commands - cmd,
                     "set_default_device_pinned_mem_limit %zu %lluM\n", ordinal++,
                     (g->memory_bytes / (replicas ? replicas : 1)) >> 20);
        cmd += w > 0 ? (size_t)w : 0;
        if (cmd >= sizeof d->commands || used >= sizeof visible)
            return snprintf(err, errlen, "too many GPUs in %s", res->name), -1;
        if (ordinal == 1) { /* one share for the whole daemon: the first GPU's */
            w = snprintf(d->commands + cmd, sizeof d->commands - cmd,
                         "set_default_active_thread_percentage %zu\n",
                         replicas ? 100 / replicas : 100);
            cmd += w > 0 ? (size_t)w : 0;
        }
    }
    char log_dir[4200];
    snprintf(log_dir, sizeof log_dir, "%s/log", d->dir);
    snprintf(path, sizeof path, "%s/pipe", d->dir);
    if (make_dirs(path, err, errlen) != 0 || make_dirs(log_dir, err, errlen) != 0)
        return -1;
    char shm[4200];
    snprintf(shm, sizeof shm, "%s/shm", cfg->mps_root);
    if (make_dirs(shm, err, errlen) != 0)
        return -1;
    if (asprintf(&d->env[0], "CUDA_MPS_PIPE_DIRECTORY=%s", path) < 0 ||
        asprintf(&d->env[1], "CUDA_MPS_LOG_DIRECTORY=%s", log_dir) < 0 ||
        asprintf(&d->env[2], "CUDA_VISIBLE_DEVICES=%s", visible) < 0 ||
        asprintf(&d->env[3], "PATH=/usr/bin:/bin") < 0)
        return snprintf(err, errlen, "out of memory"), -1;
    return 0;
}

int mps_control_start(const struct gp_config *cfg, const struct gpu_inventory *inv,
                      const struct plugin_node *node, struct mps_control **out, char *err,
                      size_t errlen)
{
    *out = NULL;
    if (!cfg->sharing_mps)
        return 0;
    struct mps_control *m = calloc(1, sizeof *m);
    size_t n = plugin_node_resource_count(node);
    if (m == NULL || (m->daemons = calloc(n ? n : 1, sizeof *m->daemons)) == NULL) {
        free(m);
        return snprintf(err, errlen, "out of memory"), -1;
    }
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->wake, NULL);
    if (find_binary(cfg, m->binary, sizeof m->binary, err, errlen) != 0)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        const struct resource *res = plugin_node_resource(node, i);
        if (!res->shared)
            continue;
        struct mps_daemon *d = &m->daemons[m->count++];
        if (plan_daemon(cfg, inv, res, d, err, errlen) != 0 || start_daemon(m, d, err, errlen) != 0)
            goto fail;
    }
    if (pthread_create(&m->watcher, NULL, watch, m) != 0) {
        snprintf(err, errlen, "cannot start the MPS watcher thread");
        goto fail;
    }
    m->watching = true;
    *out = m;
    return 0;
fail:
    mps_control_stop(m);
    return -1;
}

void mps_control_stop(struct mps_control *m)
{
    if (m == NULL)
        return;
    if (m->watching) {
        pthread_mutex_lock(&m->lock);
        m->stopping = true;
        pthread_cond_signal(&m->wake);
        pthread_mutex_unlock(&m->lock);
        pthread_join(m->watcher, NULL);
    }
    for (size_t i = 0; i < m->count; i++) {
        struct mps_daemon *d = &m->daemons[i];
        char out[512], started[4200];
        if (!d->started)
            continue; /* never ran: nothing to quit */
        int rc = run_control(m->binary, NULL, d->env, "quit\n", out, sizeof out);
        snprintf(started, sizeof started, "%s/.started", d->dir);
        unlink(started);
        if (rc == 0)
            log_info("MPS control daemon of %s stopped", d->resource);
        else
            log_warn("MPS control daemon of %s did not take quit (%d): %s", d->resource, rc, out);
    }
    free_control(m);
}
