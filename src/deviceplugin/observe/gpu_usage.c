/* gpu_usage.c -- per-container and per-process GPU use (see gpu_usage.h). */
#include "gpu_usage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cuda_region.h"
#include "isolation.h"
#include "poolapi_names.h"
#include "prom.h"

#define NAME_LEN 256
/* Processes asked of NVML at first; grown once when it says more. */
#define FIRST_PROCESSES 64

/* A region directory: its key and, once asked, the names of its container. */
struct owner {
    char key[NAME_LEN];
    char ns[NAME_LEN], pod[NAME_LEN], container[NAME_LEN];
};

struct region_row {
    size_t owner;
    size_t gpu;
    int64_t limit, used;
};

/* A used slot: who holds it, to name host pids. */
struct slot_row {
    uint32_t pidns;
    int32_t pid;
    size_t owner;
    size_t gpu;
};

struct scan {
    struct owner *owners;
    size_t n_owners, cap_owners;
    struct region_row *regions;
    size_t n_regions, cap_regions;
    struct slot_row *slots;
    size_t n_slots, cap_slots;
    bool oom;
};

/* Grows *v (n used of *cap, elements of size) by one; NULL when out of memory. */
static void *push(void **v, size_t *n, size_t *cap, size_t size, bool *oom)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        void *p = realloc(*v, c * size);
        if (p == NULL) {
            *oom = true;
            return NULL;
        }
        *v = p;
        *cap = c;
    }
    return (char *)*v + (*n)++ * size;
}

struct slot_ctx {
    struct scan *scan;
    size_t owner, gpu;
};

static void on_slot(void *ctx, const struct cudareg_slot_view *v)
{
    struct slot_ctx *c = ctx;
    struct scan *s = c->scan;
    struct slot_row *r = push((void **)&s->slots, &s->n_slots, &s->cap_slots, sizeof *r, &s->oom);
    if (r != NULL)
        *r = (struct slot_row){v->pidns, v->pid, c->owner, c->gpu};
}

/* Names the owner of key "<pod-uid>_<n>"; any other key (time-sliced
 * replicas) or an unknown pod: namespace and pod "", container = the key,
 * so every region keeps a series of its own. */
static void name_owner(struct owner *o, const struct usage_names *names)
{
    o->ns[0] = o->pod[0] = '\0';
    snprintf(o->container, sizeof o->container, "%s", o->key);
    const char *us = strrchr(o->key, '_');
    if (names == NULL || names->name == NULL || us == NULL || us == o->key || us[1] == '\0' ||
        strspn(us + 1, "0123456789") != strlen(us + 1) || strlen(us + 1) > 6)
        return;
    char uid[NAME_LEN];
    snprintf(uid, sizeof uid, "%.*s", (int)(us - o->key), o->key);
    char ns[NAME_LEN], pod[NAME_LEN], ctr[NAME_LEN];
    if (names->name(names->ctx, uid, atoi(us + 1), ns, sizeof ns, pod, sizeof pod, ctr,
                    sizeof ctr)) {
        memcpy(o->ns, ns, sizeof ns);
        memcpy(o->pod, pod, sizeof pod);
        memcpy(o->container, ctr, sizeof ctr);
    }
}

/* Reads one region file of directory dfd into buf (len bytes, the whole
 * file's size): its header first, then only the slots below its high mark
 * (one small pread for most containers instead of the whole 40 KiB file).
 * 0 with *v, -1 when it is absent, not a regular file, or not a region. */
static int read_region(int dfd, const char *name, unsigned char *buf, size_t len,
                       struct cudareg_view *v, struct slot_ctx *sc)
{
    /* O_NONBLOCK: a FIFO planted under the name must not block the open. */
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    size_t need = 0;
    ssize_t got = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size == len &&
        len >= CUDAREG_PEEK_FIRST)
        got = pread(fd, buf, CUDAREG_PEEK_FIRST, 0);
    if (got == CUDAREG_PEEK_FIRST)
        need = cudareg_peek_size(buf, (size_t)got);
    if (need > (size_t)got && need <= len &&
        pread(fd, buf + got, need - (size_t)got, got) != (ssize_t)(need - (size_t)got))
        need = 0;
    /* A mark below the first read: what was read covers it. The descriptor
     * answers whose processes are gone (their slots are not counted). */
    int rc = need == 0 ? -1 : cudareg_peek_live(buf, need, fd, v, on_slot, sc);
    close(fd);
    return rc;
}

static void scan_regions(struct scan *s, const char *isolation_dir, const char *subdir,
                         const struct gpu_inventory *inv, const struct usage_names *names)
{
    char path[4096];
    if (isolation_dir == NULL || isolation_dir[0] == '\0' ||
        snprintf(path, sizeof path, "%s/%s", isolation_dir, subdir) >= (int)sizeof path)
        return;
    DIR *dir = opendir(path);
    if (dir == NULL)
        return;
    size_t len = cudareg_file_size();
    unsigned char *buf = malloc(len);
    if (buf == NULL) {
        s->oom = true;
        closedir(dir);
        return;
    }
    struct dirent *e;
    while ((e = readdir(dir)) != NULL && !s->oom) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= NAME_LEN)
            continue;
        int dfd = openat(dirfd(dir), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
            continue;
        size_t owner = s->n_owners;
        struct owner *o =
            push((void **)&s->owners, &s->n_owners, &s->cap_owners, sizeof *o, &s->oom);
        if (o == NULL) {
            close(dfd);
            break;
        }
        snprintf(o->key, sizeof o->key, "%s", e->d_name);
        /* The directory's own listing, not one open per GPU of the
         * inventory: most containers use one GPU. */
        DIR *sub = fdopendir(dfd);
        if (sub == NULL) {
            close(dfd);
            s->n_owners--;
            continue;
        }
        bool any = false;
        struct dirent *r;
        while ((r = readdir(sub)) != NULL && !s->oom) {
            if (strncmp(r->d_name, "region.", 7) != 0)
                continue;
            size_t g = 0;
            while (g < inv->count && strcmp(r->d_name + 7, inv->gpus[g].uuid) != 0)
                g++;
            struct cudareg_view v;
            struct slot_ctx sc = {s, owner, g};
            if (g == inv->count || read_region(dirfd(sub), r->d_name, buf, len, &v, &sc) != 0)
                continue;
            struct region_row *row =
                push((void **)&s->regions, &s->n_regions, &s->cap_regions, sizeof *row, &s->oom);
            if (row == NULL)
                break;
            *row = (struct region_row){owner, g, v.limit, v.used};
            any = true;
        }
        closedir(sub); /* closes dfd */
        if (any)
            name_owner(&s->owners[owner], names);
        else
            s->n_owners--; /* no region in it (yet): not a row */
    }
    closedir(dir);
    free(buf);
}

static void put_owner_labels(struct buf *f, const char *ns, const char *pod, const char *ctr,
                             const char *uuid)
{
    buf_str(f, "{namespace=\"");
    prom_label_value(f, ns);
    buf_str(f, "\",pod=\"");
    prom_label_value(f, pod);
    buf_str(f, "\",container=\"");
    prom_label_value(f, ctr);
    buf_str(f, "\",gpu_uuid=\"");
    prom_label_value(f, uuid);
    buf_str(f, "\"");
}

static void render_regions(struct buf *f, const struct scan *s, const struct gpu_inventory *inv)
{
    static const char *const names[2] = {"gpupool_container_gpu_memory_used_bytes",
                                         "gpupool_container_gpu_memory_limit_bytes"};
    static const char *const help[2] = {
        "GPU memory a container's processes hold on the GPU (its isolation region).",
        "A container's GPU memory limit on the GPU (its isolation region)."};
    for (int k = 0; k < 2; k++) {
        prom_header(f, names[k], "gauge", help[k]);
        for (size_t i = 0; i < s->n_regions; i++) {
            const struct region_row *r = &s->regions[i];
            const struct owner *o = &s->owners[r->owner];
            buf_str(f, names[k]);
            put_owner_labels(f, o->ns, o->pod, o->container, inv->gpus[r->gpu].uuid);
            buf_str(f, "} ");
            buf_u64(f, (uint64_t)(k == 0 ? r->used : r->limit));
            buf_str(f, "\n");
        }
    }
}

/* ---- processes ----------------------------------------------------------------- */

/* The inode of the pid namespace link at path ("pid:[4026531836]"), 0
 * when it cannot be read: another process's needs ptrace access, which an
 * agent without CAP_SYS_PTRACE lacks for processes holding capabilities
 * it has not. */
static uint32_t pidns_of(const char *path)
{
    char link[64];
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n <= 0)
        return 0;
    link[n] = '\0';
    const char *b = strchr(link, '[');
    return b != NULL ? (uint32_t)strtoul(b + 1, NULL, 10) : 0;
}

/* The pid in its own namespace and that namespace's inode (*pidns 0 when
 * unknown). A process of the agent's own namespace (own_ns) has its host
 * pid there; any other's comes from NSpid's last field in
 * /proc/<pid>/status (world-readable, but the kernel formats the whole
 * file: the dearest read of a scrape, so only when needed). -1 when /proc
 * does not say. */
/* A small /proc file into buf (NUL-terminated, cut at len - 1): one
 * open and one read, no stdio. -1 when it cannot be read. */
static int read_proc(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

static int inner_pid(unsigned pid, uint32_t own_ns, uint32_t *pidns, int32_t *nspid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/ns/pid", pid);
    *pidns = pidns_of(path);
    if (*pidns != 0 && *pidns == own_ns) {
        *nspid = (int32_t)pid;
        return 0;
    }
    snprintf(path, sizeof path, "/proc/%u/status", pid);
    char text[4096];
    if (read_proc(path, text, sizeof text) != 0)
        return -1;
    const char *line = strstr(text, "\nNSpid:");
    if (line == NULL)
        return -1;
    line += 7;
    const char *last = NULL;
    for (const char *c = line; *c != '\0' && *c != '\n'; c++)
        if ((*c >= '0' && *c <= '9') && (c == line || c[-1] == ' ' || c[-1] == '\t'))
            last = c;
    if (last == NULL)
        return -1;
    *nspid = (int32_t)strtol(last, NULL, 10);
    return 0;
}

/* The pod UID in /proc/<pid>/cgroup: the kubelet names a pod's cgroup
 * "pod<uid>" (cgroupfs driver, dashes) or "...-pod<uid>.slice" (systemd
 * driver, dashes as '_'). 0 with uid, -1 for a process of no pod. */
static int cgroup_pod_uid(unsigned pid, char *uid, size_t len)
{
    char path[64], text[8192];
    snprintf(path, sizeof path, "/proc/%u/cgroup", pid);
    if (read_proc(path, text, sizeof text) != 0)
        return -1;
    for (const char *k = strstr(text, "kubepods"); k != NULL; k = strstr(k + 8, "kubepods")) {
        const char *end = strchr(k, '\n');
        for (const char *p = strstr(k, "pod"); p != NULL && (end == NULL || p < end);
             p = strstr(p + 3, "pod")) {
            size_t n = strspn(p + 3, "0123456789abcdef-_");
            if (n == 36 && n < len) {
                for (size_t i = 0; i < n; i++)
                    uid[i] = p[3 + i] == '_' ? '-' : p[3 + i];
                uid[n] = '\0';
                return 0;
            }
        }
    }
    return -1;
}

struct proc_row {
    unsigned pid;
    unsigned long long used;
    bool have_util;
    double sm, mem;
};

static void copy_owner(const struct owner *o, char *ns, char *pod, char *ctr)
{
    memcpy(ns, o->ns, NAME_LEN);
    memcpy(pod, o->pod, NAME_LEN);
    memcpy(ctr, o->container, NAME_LEN);
}

/* The slot of region GPU gpu whose owner key is "<uid>_<n>" and whose
 * inner pid is nspid, when exactly one matches (two containers of a pod
 * may both have pid 1 on one GPU: then no one is named). SIZE_MAX if none. */
static size_t slot_in_pod(const struct scan *s, const char *uid, size_t gpu, int32_t nspid)
{
    size_t found = SIZE_MAX, ulen = strlen(uid);
    for (size_t i = 0; i < s->n_slots; i++) {
        const struct slot_row *r = &s->slots[i];
        const char *key = s->owners[r->owner].key;
        if (r->gpu != gpu || r->pid != nspid || strncmp(key, uid, ulen) != 0 || key[ulen] != '_')
            continue;
        if (found != SIZE_MAX && s->slots[found].owner != r->owner)
            return SIZE_MAX;
        found = i;
    }
    return found;
}

/* ---- known processes ---------------------------------------------------------
 * What /proc says of a GPU process does not change while it lives: its pid
 * namespace, its pid there, its pod. Reading it costs three /proc files
 * (status is formatted by the kernel on every read), the dearest part of a
 * scrape, so it is read once per process: a pidfd taken before the reads
 * pins the identity (a pid reused after an exit gets a new entry, since
 * the old pidfd turned readable at the exit) and one poll(2) per scrape
 * finds those that ended. At most MAX_KNOWN entries (one descriptor each)
 * and a quarter of the descriptor limit; past that, processes are read
 * every scrape as before. */
#define MAX_KNOWN 512

struct usage_known {
    unsigned pid;
    int pidfd;
    bool inner;     /* inner_pid answered */
    uint32_t pidns; /* 0: unknown */
    int32_t nspid;
    bool in_pod; /* uid holds the pod UID from its cgroup */
    char uid[40];
};

void usage_state_reset(struct usage_state *st)
{
    for (size_t i = 0; i < st->n_known; i++)
        close(st->known[i].pidfd);
    free(st->known);
    memset(st, 0, sizeof *st);
}

/* Drops the entries whose process has exited (their pidfd is readable). */
static void forget_exited(struct usage_state *st)
{
    if (st->n_known == 0)
        return;
    struct pollfd *p = calloc(st->n_known, sizeof *p);
    if (p == NULL)
        return; /* kept one more scrape */
    for (size_t i = 0; i < st->n_known; i++)
        p[i] = (struct pollfd){.fd = st->known[i].pidfd, .events = POLLIN};
    if (poll(p, st->n_known, 0) > 0) {
        size_t k = 0;
        for (size_t i = 0; i < st->n_known; i++) {
            if (p[i].revents != 0) {
                close(st->known[i].pidfd);
                continue;
            }
            st->known[k++] = st->known[i];
        }
        st->n_known = k;
    }
    free(p);
}

/* How many processes may be kept: MAX_KNOWN, and a quarter of the
 * descriptor limit, so other descriptors never run short for them. */
static size_t known_room(void)
{
    struct rlimit nofile;
    size_t room = MAX_KNOWN;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur / 4 < room)
        room = (size_t)(nofile.rlim_cur / 4);
    return room;
}

static const struct usage_known *find_known(const struct usage_state *st, unsigned pid)
{
    for (size_t i = 0; i < st->n_known; i++)
        if (st->known[i].pid == pid)
            return &st->known[i];
    return NULL;
}

/* What /proc says of pid into *k; remembered when a pidfd pins it and
 * there is room. The reads come after pidfd_open, and the pidfd is
 * polled after them: an exit in between leaves the answer unremembered. */
static void learn_process(struct usage_state *st, uint32_t own_ns, size_t room, unsigned pid,
                          struct usage_known *k)
{
    *k = (struct usage_known){.pid = pid, .pidfd = -1};
    int fd = st->n_known < room ? (int)syscall(SYS_pidfd_open, (pid_t)pid, 0) : -1;
    k->inner = inner_pid(pid, own_ns, &k->pidns, &k->nspid) == 0;
    k->in_pod = cgroup_pod_uid(pid, k->uid, sizeof k->uid) == 0;
    if (fd < 0)
        return;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 0) != 0 || !k->inner) {
        close(fd); /* gone already, or /proc refused: asked again next scrape */
        return;
    }
    if (st->n_known == st->cap_known) {
        size_t c = st->cap_known ? st->cap_known * 2 : 32;
        struct usage_known *v = realloc(st->known, c * sizeof *v);
        if (v == NULL) {
            close(fd);
            return;
        }
        st->known = v;
        st->cap_known = c;
    }
    k->pidfd = fd;
    st->known[st->n_known++] = *k;
}

/* What is known of pid into *k: the remembered entry, else /proc read now. */
static void know_process(struct usage_state *st, uint32_t own_ns, size_t room, unsigned pid,
                         struct usage_known *k)
{
    const struct usage_known *seen = find_known(st, pid);
    if (seen != NULL)
        *k = *seen;
    else
        learn_process(st, own_ns, room, pid, k);
}

static void name_process(const struct scan *s, struct usage_state *st, uint32_t own_ns, size_t room,
                         unsigned pid, size_t gpu, const struct usage_names *names, char *ns,
                         char *pod, char *ctr)
{
    ns[0] = pod[0] = ctr[0] = '\0';
    struct usage_known k;
    know_process(st, own_ns, room, pid, &k);
    bool inner = k.inner;
    uint32_t pidns = k.pidns;
    int32_t nspid = k.nspid;
    /* The exact key: (pid namespace, pid in it), whatever the GPU. */
    for (size_t i = 0; inner && pidns != 0 && i < s->n_slots; i++)
        if (s->slots[i].pidns == pidns && s->slots[i].pid == nspid) {
            copy_owner(&s->owners[s->slots[i].owner], ns, pod, ctr);
            return;
        }
    if (!k.in_pod)
        return; /* no pod's process */
    size_t slot = inner && pidns == 0 ? slot_in_pod(s, k.uid, gpu, nspid) : SIZE_MAX;
    if (slot != SIZE_MAX) {
        copy_owner(&s->owners[s->slots[slot].owner], ns, pod, ctr);
        return;
    }
    if (names != NULL && names->name != NULL &&
        !names->name(names->ctx, k.uid, -1, ns, NAME_LEN, pod, NAME_LEN, ctr, NAME_LEN))
        ns[0] = pod[0] = ctr[0] = '\0';
}

/* One GPU's compute processes (host pids and memory); n out, NULL when
 * none or NVML cannot tell. */
static struct proc_row *running_processes(struct nvml *nvml, nvmlDevice_t h, size_t *n)
{
    *n = 0;
    unsigned count = FIRST_PROCESSES;
    nvmlProcessInfo_t *infos = NULL;
    nvmlReturn_t rc = NVML_ERROR_INSUFFICIENT_SIZE;
    for (int tries = 0; tries < 2 && rc == NVML_ERROR_INSUFFICIENT_SIZE; tries++) {
        count += 8; /* room for processes starting between the two calls */
        nvmlProcessInfo_t *p = realloc(infos, count * sizeof *p);
        if (p == NULL)
            break;
        infos = p;
        rc = nvml->DeviceGetComputeRunningProcesses(h, &count, infos);
    }
    struct proc_row *rows = NULL;
    if (rc == NVML_SUCCESS && count > 0)
        rows = calloc(count, sizeof *rows);
    if (rows == NULL) {
        free(infos);
        return NULL;
    }
    for (unsigned i = 0; i < count; i++)
        rows[i] = (struct proc_row){.pid = infos[i].pid, .used = infos[i].usedGpuMemory};
    *n = count;
    free(infos);
    return rows;
}

/* One GPU's processes and, when NVML has them, their utilization since
 * *last_seen (moved to the newest sample). n out; NULL when none. */
static struct proc_row *gpu_processes(struct nvml *nvml, nvmlDevice_t h,
                                      unsigned long long *last_seen, size_t *n)
{
    struct proc_row *rows = running_processes(nvml, h, n);
    if (rows == NULL)
        return NULL;
    if (nvml->DeviceGetProcessUtilization == NULL)
        return rows;
    unsigned ns = 0;
    nvmlReturn_t rc = nvml->DeviceGetProcessUtilization(h, NULL, &ns, *last_seen);
    nvmlProcessUtilizationSample_t *smp = NULL;
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE && ns > 0 && (smp = calloc(ns, sizeof *smp)) != NULL)
        rc = nvml->DeviceGetProcessUtilization(h, smp, &ns, *last_seen);
    unsigned long long newest = *last_seen;
    for (unsigned k = 0; smp != NULL && rc == NVML_SUCCESS && k < ns; k++) {
        for (size_t i = 0; i < *n; i++) {
            /* Several samples of one pid: the newest wins. */
            if (rows[i].pid != smp[k].pid || smp[k].timeStamp < newest)
                continue;
            rows[i].have_util = true;
            rows[i].sm = (smp[k].smUtil > 100 ? 100 : smp[k].smUtil) / 100.0;
            rows[i].mem = (smp[k].memUtil > 100 ? 100 : smp[k].memUtil) / 100.0;
        }
        if (smp[k].timeStamp > newest)
            newest = smp[k].timeStamp;
    }
    *last_seen = newest;
    free(smp);
    return rows;
}

struct gpu_procs {
    struct proc_row *rows;
    size_t n;
};

static void put_process(struct buf *f, const char *name, const struct gpu_device *g, const char *ns,
                        const char *pod, const char *ctr, unsigned pid, double v)
{
    buf_str(f, name);
    put_owner_labels(f, ns, pod, ctr, g->uuid);
    buf_printf(f, ",pid=\"%u\"} %.17g\n", pid, v);
}

static void render_processes(struct buf *f, struct usage_state *st, const struct scan *s,
                             struct nvml *nvml, const struct gpu_inventory *inv, const bool *skip,
                             const struct usage_names *names)
{
    static const char *const fam[3] = {"gpupool_process_gpu_memory_used_bytes",
                                       "gpupool_process_gpu_sm_utilization_ratio",
                                       "gpupool_process_gpu_memory_utilization_ratio"};
    static const char *const help[3] = {
        "GPU memory a process holds on the GPU (NVML, host pid).",
        "Share of the time since the previous scrape a kernel of the process ran (NVML, 0-1).",
        "Share of the time since the previous scrape the process read or wrote GPU memory "
        "(NVML, 0-1)."};
    size_t n = inv->count < USAGE_MAX_GPUS ? inv->count : USAGE_MAX_GPUS;
    struct gpu_procs *per = calloc(n + 1, sizeof *per);
    if (per != NULL && nvml->DeviceGetComputeRunningProcesses != NULL)
        for (size_t g = 0; g < n; g++) {
            nvmlDevice_t h;
            if ((skip != NULL && skip[g]) ||
                nvml->DeviceGetHandleByUUID(inv->gpus[g].uuid, &h) != NVML_SUCCESS)
                continue;
            per[g].rows = gpu_processes(nvml, h, &st->last_seen_us[g], &per[g].n);
        }
    /* Names once per process, kept beside the rows. */
    size_t total = 0;
    for (size_t g = 0; per != NULL && g < n; g++)
        total += per[g].n;
    char(*lab)[3][NAME_LEN] = total > 0 ? calloc(total, sizeof *lab) : NULL;
    uint32_t own_ns = pidns_of("/proc/self/ns/pid");
    forget_exited(st);
    size_t room = known_room();
    for (size_t g = 0, k = 0; lab != NULL && g < n; g++)
        for (size_t i = 0; i < per[g].n; i++, k++)
            name_process(s, st, own_ns, room, per[g].rows[i].pid, g, names, lab[k][0], lab[k][1],
                         lab[k][2]);
    for (int m = 0; m < 3; m++) {
        prom_header(f, fam[m], "gauge", help[m]);
        for (size_t g = 0, k = 0; lab != NULL && g < n; g++)
            for (size_t i = 0; i < per[g].n; i++, k++) {
                const struct proc_row *r = &per[g].rows[i];
                /* NVML_VALUE_NOT_AVAILABLE: the driver cannot tell. */
                if ((m == 0 && r->used == (unsigned long long)NVML_VALUE_NOT_AVAILABLE) ||
                    (m > 0 && !r->have_util))
                    continue;
                double v = m == 0 ? (double)r->used : m == 1 ? r->sm : r->mem;
                put_process(f, fam[m], &inv->gpus[g], lab[k][0], lab[k][1], lab[k][2], r->pid, v);
            }
    }
    free(lab);
    for (size_t g = 0; per != NULL && g < n; g++)
        free(per[g].rows);
    free(per);
}

void usage_render(struct buf *f, struct usage_state *st, const char *isolation_dir,
                  struct nvml *nvml, const struct gpu_inventory *inv, const bool *skip,
                  const struct usage_names *names)
{
    struct scan s = {0};
    scan_regions(&s, isolation_dir, ISOLATION_CONTAINERS_NAME, inv, names);
    render_regions(f, &s, inv);
    render_processes(f, st, &s, nvml, inv, skip, names);
    free(s.owners);
    free(s.regions);
    free(s.slots);
}

/* ---- the containers' pid maps -------------------------------------------------- */

struct map_line {
    size_t owner;
    unsigned host;
    int32_t inner;
};

static int by_owner_then_pid(const void *a, const void *b)
{
    const struct map_line *x = a, *y = b;
    if (x->owner != y->owner)
        return x->owner < y->owner ? -1 : 1;
    return x->host < y->host ? -1 : x->host > y->host;
}

/* Replaces <dir>/<POOL_REGION_PID_MAP> with text unless it already says
 * that. The directory is the container's (it may plant anything there):
 * the temporary file is created O_EXCL | O_NOFOLLOW and renamed over the
 * name, which never follows a symlink; a directory in the way makes the
 * rename fail, which only costs that container its own map. */
static void write_map(int dfd, const char *text, size_t len)
{
    char old[POOL_PID_MAP_MAX];
    int fd = openat(dfd, POOL_REGION_PID_MAP, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t got = read(fd, old, sizeof old);
        close(fd);
        if (got == (ssize_t)len && memcmp(old, text, len) == 0)
            return;
    }
    static const char tmp[] = "." POOL_REGION_PID_MAP ".agent";
    (void)unlinkat(dfd, tmp, 0);
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    bool ok = write(fd, text, len) == (ssize_t)len;
    close(fd);
    if (!ok || renameat(dfd, tmp, dfd, POOL_REGION_PID_MAP) != 0)
        (void)unlinkat(dfd, tmp, 0);
}

void usage_write_pid_maps(struct usage_state *st, const char *isolation_dir, const char *subdir,
                          struct nvml *nvml, const struct gpu_inventory *inv, const bool *skip)
{
    struct scan s = {0};
    scan_regions(&s, isolation_dir, subdir, inv, NULL);
    struct map_line *lines = NULL;
    size_t n_lines = 0, cap_lines = 0;
    bool oom = false;
    uint32_t own_ns = pidns_of("/proc/self/ns/pid");
    forget_exited(st);
    size_t room = known_room();
    size_t gpus = inv->count < USAGE_MAX_GPUS ? inv->count : USAGE_MAX_GPUS;
    for (size_t g = 0; s.n_slots > 0 && nvml->DeviceGetComputeRunningProcesses != NULL && g < gpus;
         g++) {
        nvmlDevice_t h;
        if ((skip != NULL && skip[g]) ||
            nvml->DeviceGetHandleByUUID(inv->gpus[g].uuid, &h) != NVML_SUCCESS)
            continue;
        size_t n = 0;
        struct proc_row *rows = running_processes(nvml, h, &n);
        for (size_t i = 0; i < n && !oom; i++) {
            struct usage_known k;
            know_process(st, own_ns, room, rows[i].pid, &k);
            if (!k.inner || k.pidns == 0)
                continue;
            for (size_t j = 0; j < s.n_slots; j++) {
                if (s.slots[j].pidns != k.pidns || s.slots[j].pid != k.nspid)
                    continue;
                struct map_line *l = push((void **)&lines, &n_lines, &cap_lines, sizeof *l, &oom);
                if (l != NULL)
                    *l = (struct map_line){s.slots[j].owner, rows[i].pid, k.nspid};
                break;
            }
        }
        free(rows);
    }
    if (lines != NULL)
        qsort(lines, n_lines, sizeof *lines, by_owner_then_pid);
    /* Every container with a region gets its map, an empty one too: a
     * process that left must leave the map. */
    char path[4096];
    int cfd = -1;
    if (!oom && snprintf(path, sizeof path, "%s/%s", isolation_dir, subdir) < (int)sizeof path)
        cfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    for (size_t o = 0, l = 0; cfd >= 0 && o < s.n_owners; o++) {
        char text[POOL_PID_MAP_MAX];
        size_t len = (size_t)snprintf(text, sizeof text, "%s\n", POOL_PID_MAP_HEADER);
        for (; l < n_lines && lines[l].owner == o; l++) {
            int w = snprintf(text + len, sizeof text - len, "%u %d\n", lines[l].host,
                             (int)lines[l].inner);
            if (w < 0 || (size_t)w >= sizeof text - len)
                continue; /* full: the rest are left out of this container's map */
            len += (size_t)w;
        }
        int dfd = openat(cfd, s.owners[o].key, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd >= 0) {
            write_map(dfd, text, len);
            close(dfd);
        }
    }
    if (cfd >= 0)
        close(cfd);
    free(lines);
    free(s.owners);
    free(s.regions);
    free(s.slots);
}
