/* cuda_region.c -- the shared per-container, per-GPU accounting file (see
 * cuda_region.h for the contract, docs/isolation.md for the reasoning). */
#include "cuda_glibc.h"
#include "cuda_region.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h> /* fchmod */
#include <unistd.h>

#define REGION_MAGIC 0x52435047u /* "GPCR" little-endian */
#define REGION_VERSION 1u

/* One process's share. pid 0: free. pidns and start identify the process
 * beyond its pid: a pid is only judged by a process of the same pid
 * namespace, and a pid reused by a new process is recognised by its start
 * time (clock ticks after boot, /proc/<pid>/stat field 22). */
struct slot {
    int32_t pid;
    uint32_t pidns;
    uint64_t start;
    int64_t used;
    int64_t spare;
};

/* The file. Fixed size; every field after the mutex is written under it. */
struct region_file {
    uint32_t magic, version;
    uint32_t size, nslots;
    int64_t limit;
    uint32_t ready; /* 1 once initialised; written under the file lock */
    uint32_t pad;
    pthread_mutex_t lock; /* robust, process-shared */
    int64_t used;         /* = sum of slots[].used */
    int64_t recoveries;   /* dead lock owners recovered */
    int64_t reclaimed;    /* dead processes' slots reclaimed */
    int64_t spare[5];
    struct slot slots[CUDAREG_SLOTS];
};

struct cudareg {
    struct region_file *f;
    int slot;    /* index in f->slots, -1 until the first charge */
    int32_t pid; /* getpid() of the owner, kept across calls */
    uint32_t pidns;
};

size_t cudareg_file_size(void)
{
    return sizeof(struct region_file);
}

/* ---- who is alive -------------------------------------------------------- */

/* The pid namespace's inode from the link text "pid:[4026531836]"
 * (readlink, not stat: stat has no old-glibc symbol, see cuda_glibc.h). */
static uint32_t own_pidns(void)
{
    char buf[64];
    ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof buf - 1);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *p = strchr(buf, '[');
    return p != NULL ? (uint32_t)strtoul(p + 1, NULL, 10) : 0;
}

/* Start time (field 22) and state (field 3) of /proc/<pid>/stat; -1 when it
 * cannot be read. The command name (field 2) may hold spaces and ')'. */
static int proc_stat(int32_t pid, uint64_t *start, char *state)
{
    char path[48], buf[1024];
    if (pid == 0)
        snprintf(path, sizeof path, "/proc/self/stat");
    else
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ')
        return -1;
    p += 2;
    *state = *p;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL)
            return -1;
        p++;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno != 0 || end == p)
        return -1;
    *start = v;
    return 0;
}

/* True only when the slot's process is certainly gone: never for a pid of
 * another pid namespace, which this process cannot judge. */
static bool slot_is_dead(const struct slot *s, uint32_t pidns)
{
    if (s->pidns != pidns)
        return false;
    if (kill(s->pid, 0) != 0 && errno == ESRCH)
        return true;
    uint64_t start;
    char state;
    if (proc_stat(s->pid, &start, &state) != 0)
        return false; /* /proc hidden: trust kill() */
    return state == 'Z' || state == 'X' || (s->start != 0 && start != s->start);
}

/* ---- the lock ------------------------------------------------------------- */

/* The total rebuilt from the slots. The file is the container's to write,
 * so shares may be anything: a negative one counts 0, and the sum saturates
 * rather than wrap (a total past the limit refuses every charge). */
static void recompute(struct region_file *f)
{
    int64_t sum = 0;
    for (unsigned i = 0; i < CUDAREG_SLOTS; i++) {
        if (f->slots[i].pid == 0 || f->slots[i].used < 0)
            f->slots[i].used = 0;
        sum = f->slots[i].used > INT64_MAX - sum ? INT64_MAX : sum + f->slots[i].used;
    }
    f->used = sum;
}

/* Takes a slot's share off the total; a share that the total cannot hold
 * (a corrupt file) leaves the total negative, which makes the caller
 * rebuild it (recompute) once the slot is cleared, instead of wrapping. */
static void total_sub(struct region_file *f, int64_t bytes)
{
    f->used = bytes >= 0 && bytes <= f->used ? f->used - bytes : -1;
}

/* 0 locked, -1 unusable. A previous owner that died inside the lock may have
 * updated its slot but not the total: the total is rebuilt from the slots. */
static int region_lock(struct region_file *f)
{
    int rc = pthread_mutex_lock(&f->lock);
    if (rc == EOWNERDEAD) {
        recompute(f);
        f->recoveries++;
        rc = pthread_mutex_consistent(&f->lock);
    }
    return rc == 0 ? 0 : -1;
}

static void region_unlock(struct region_file *f)
{
    pthread_mutex_unlock(&f->lock);
}

/* Gives back the slots of dead processes. Under the lock. */
static void reap(struct cudareg *r)
{
    struct region_file *f = r->f;
    for (unsigned i = 0; i < CUDAREG_SLOTS; i++) {
        struct slot *s = &f->slots[i];
        if (s->pid == 0 || s->pid == r->pid || !slot_is_dead(s, r->pidns))
            continue;
        total_sub(f, s->used);
        memset(s, 0, sizeof *s);
        f->reclaimed++;
    }
    if (f->used < 0)
        recompute(f);
}

/* This process's slot, taken on first use. Under the lock. */
static int own_slot(struct cudareg *r)
{
    struct region_file *f = r->f;
    if (r->slot >= 0 && f->slots[r->slot].pid == r->pid)
        return 0;
    for (int pass = 0; pass < 2; pass++) {
        for (unsigned i = 0; i < CUDAREG_SLOTS; i++) {
            if (f->slots[i].pid != 0)
                continue;
            struct slot *s = &f->slots[i];
            char state;
            uint64_t start = 0;
            if (proc_stat(0, &start, &state) != 0)
                start = 0;
            *s = (struct slot){.pid = r->pid, .pidns = r->pidns, .start = start};
            r->slot = (int)i;
            return 0;
        }
        reap(r);
    }
    return -1;
}

/* ---- the file ---------------------------------------------------------- */

static int init_file(struct region_file *f, int64_t limit)
{
    memset(f, 0, sizeof *f);
    f->magic = REGION_MAGIC;
    f->version = REGION_VERSION;
    f->size = (uint32_t)sizeof *f;
    f->nslots = CUDAREG_SLOTS;
    f->limit = limit;
    pthread_mutexattr_t a;
    if (pthread_mutexattr_init(&a) != 0)
        return -1;
    int rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED) |
             pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST) |
             pthread_mutex_init(&f->lock, &a);
    pthread_mutexattr_destroy(&a);
    if (rc != 0)
        return -1;
    __atomic_store_n(&f->ready, 1, __ATOMIC_RELEASE);
    return 0;
}

/* A header this version wrote (the contents are the container's: any
 * process in it can write them). */
static bool is_region(const struct region_file *f)
{
    return f->magic == REGION_MAGIC && f->version == REGION_VERSION && f->size == sizeof *f &&
           f->nslots == CUDAREG_SLOTS && f->limit >= 0;
}

/* The process's handle on a mapped, valid region. */
static struct cudareg *wrap(struct region_file *f, char *err, size_t errlen)
{
    struct cudareg *r = calloc(1, sizeof *r);
    if (r == NULL) {
        munmap(f, sizeof *f);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->f = f;
    r->slot = -1;
    r->pid = (int32_t)getpid();
    r->pidns = own_pidns();
    return r;
}

struct cudareg *cudareg_attach(const char *path, int64_t limit, char *err, size_t errlen)
{
    /* O_NONBLOCK: a FIFO planted at the path must not hang the process. */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0666);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open the shared region %s: %s", path, strerror(errno));
        return NULL;
    }
    struct region_file *f = MAP_FAILED;
    const char *what = NULL;
    int saved = 0;
    /* The common case, a region already made: map it without the file lock
     * (hundreds of processes of a container may start at once). A region
     * that is not complete yet takes the locked path, which waits for its
     * maker. */
    if (lseek(fd, 0, SEEK_END) == (off_t)sizeof *f) {
        f = mmap(NULL, sizeof *f, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (f != MAP_FAILED && __atomic_load_n(&f->ready, __ATOMIC_ACQUIRE) == 1 && is_region(f)) {
            close(fd);
            return wrap(f, err, errlen);
        }
        if (f != MAP_FAILED)
            munmap(f, sizeof *f);
        f = MAP_FAILED;
    }
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            what = "lock";
            saved = errno;
            goto fail;
        }
    }
    /* The size by lseek, which also refuses a FIFO or socket (ESPIPE); a
     * directory cannot be opened O_RDWR and a device fails the fallocate. */
    off_t size = lseek(fd, 0, SEEK_END);
    if (size < 0) {
        what = "use (not a regular file)";
        saved = errno;
        goto fail;
    }
    bool fresh = size == 0;
    if (!fresh && size != (off_t)sizeof *f) {
        snprintf(err, errlen,
                 "%s is not a gpupool-cuda region of this version (%lld bytes, want %zu)", path,
                 (long long)size, sizeof *f);
        goto fail_msg;
    }
    /* posix_fallocate, not ftruncate: on a full disk a sparse file would
     * SIGBUS at the first write through the mapping. */
    if (fresh && (saved = posix_fallocate(fd, 0, (off_t)sizeof *f)) != 0) {
        what = "size";
        goto fail;
    }
    f = mmap(NULL, sizeof *f, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (f == MAP_FAILED) {
        what = "map";
        saved = errno;
        goto fail;
    }
    if (fresh || __atomic_load_n(&f->ready, __ATOMIC_ACQUIRE) == 0) {
        /* New, or its creator died before finishing: we hold the file lock,
         * so nobody else is initialising or using it. */
        if (init_file(f, limit) != 0) {
            what = "initialise";
            goto fail;
        }
        (void)fchmod(fd, 0666); /* past the umask; fails harmlessly if not ours */
    } else if (!is_region(f)) {
        snprintf(err, errlen, "%s is not a gpupool-cuda region of this version", path);
        goto fail_msg;
    }
    flock(fd, LOCK_UN);
    close(fd);
    return wrap(f, err, errlen);
fail:
    snprintf(err, errlen, "cannot %s the shared region %s: %s", what, path,
             strerror(saved ? saved : errno));
fail_msg:
    if (f != MAP_FAILED)
        munmap(f, sizeof *f);
    close(fd);
    return NULL;
}

void cudareg_detach(struct cudareg *r)
{
    if (r == NULL)
        return;
    struct region_file *f = r->f;
    if (r->slot >= 0 && region_lock(f) == 0) {
        struct slot *s = &f->slots[r->slot];
        if (s->pid == r->pid) {
            total_sub(f, s->used);
            memset(s, 0, sizeof *s);
            if (f->used < 0)
                recompute(f);
        }
        region_unlock(f);
    }
    munmap(f, sizeof *f);
    free(r);
}

int64_t cudareg_limit(const struct cudareg *r)
{
    return r->f->limit;
}

int cudareg_reserve(struct cudareg *r, int64_t bytes)
{
    struct region_file *f = r->f;
    if (bytes < 0)
        return 1;
    if (region_lock(f) != 0)
        return -1;
    if (own_slot(r) != 0) {
        region_unlock(f);
        return -1;
    }
    /* Our share within the total and the total not negative: then, with
     * limit >= 0, neither limit - used nor the sums below can overflow. Only
     * a corrupt file breaks that; its total is rebuilt from the slots. */
    const struct slot *own = &f->slots[r->slot];
    if (f->used < 0 || own->used < 0 || own->used > f->used)
        recompute(f);
    if (f->limit < 0) {
        region_unlock(f);
        return 1;
    }
    if (bytes > f->limit - f->used) {
        reap(r);
        if (bytes > f->limit - f->used) {
            region_unlock(f);
            return 1;
        }
    }
    f->slots[r->slot].used += bytes;
    f->used += bytes;
    region_unlock(f);
    return 0;
}

void cudareg_release(struct cudareg *r, int64_t bytes)
{
    struct region_file *f = r->f;
    if (bytes <= 0 || region_lock(f) != 0)
        return;
    if (r->slot >= 0 && f->slots[r->slot].pid == r->pid) {
        struct slot *s = &f->slots[r->slot];
        if (bytes > s->used)
            bytes = s->used < 0 ? 0 : s->used; /* never below zero: counters cannot wrap */
        s->used -= bytes;
        total_sub(f, bytes);
        if (f->used < 0)
            recompute(f);
    }
    region_unlock(f);
}

int64_t cudareg_usage(struct cudareg *r)
{
    struct region_file *f = r->f;
    if (region_lock(f) != 0)
        return f->limit; /* cannot tell: report nothing free */
    reap(r);
    int64_t used = f->used;
    region_unlock(f);
    return used;
}

void cudareg_after_fork(struct cudareg *r)
{
    r->slot = -1;
    r->pid = (int32_t)getpid();
}
