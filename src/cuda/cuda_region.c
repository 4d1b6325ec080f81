/* cuda_region.c -- the shared per-container, per-GPU accounting file (see
 * cuda_region.h for the contract, docs/isolation.md for the reasoning). */
#include "cuda_glibc.h"
#include "cuda_region.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h> /* fchmod */
#include <time.h>
#include <unistd.h>

#define REGION_MAGIC 0x52435047u /* "GPCR" little-endian */
#define REGION_VERSION 2u
/* Version 1's file size: a file of that size and version is a region a
 * container instance that is gone left behind (the library is bind-mounted
 * and cannot change under running processes), not a damaged one. */
#define REGION_V1_SIZE 32904
/* How old the last look for dead processes may be before a report looks
 * again (reports are frequent: frameworks poll free memory). */
#define SCAN_EVERY_NS (250LL * 1000 * 1000)
/* Contended lock: trylock this many times with a pause, then this many
 * with a sched_yield, then sleep in the kernel. The lock is held for tens
 * of nanoseconds, so a waiter that sleeps at once pays two system calls
 * (its own and the waker's) for nothing; one that only spins burns its time
 * slice while the holder it waits for is preempted on the same CPU; and
 * many yields hand the CPU to other containers' work. (On a loaded 2-core
 * machine, 16 churning processes showed no difference between these
 * choices beyond the noise; bench/isolation_bench.sh measures it.) */
#define LOCK_SPINS 64
#define LOCK_YIELDS 4

/* How a used slot's liveness is judged. */
enum slot_state {
    SLOT_FREE = 0,
    SLOT_LOCKED = 1, /* live while someone holds a lock on its first byte */
    SLOT_BY_PID = 2, /* no OFD lock could be taken: judged by pid, namespace, start */
};

/* One process's share. state and used are read without the lock (as hints
 * for reaping, re-checked under it). token tells a process that the slot is
 * still the one it claimed. pid, pidns and start serve SLOT_BY_PID only (and
 * people reading the file). */
struct slot {
    uint32_t state; /* enum slot_state */
    int32_t pid;
    uint32_t pidns;
    uint32_t spare;
    uint64_t start; /* clock ticks after boot, /proc/<pid>/stat field 22 */
    uint64_t token;
    int64_t used;
};

/* The file. Fixed size; every field after the mutex is written under it.
 * The first 32 bytes keep version 1's layout, so any version can tell an
 * older region from a damaged file. */
struct region_file {
    uint32_t magic, version;
    uint32_t size, nslots;
    int64_t limit;
    uint32_t ready; /* 1 once initialised; written under the file lock */
    uint32_t pad;
    pthread_mutex_t lock; /* robust, process-shared */
    int64_t unused;       /* version 2 kept a total here; charges sum the slots */
    int64_t recoveries;   /* dead lock owners recovered */
    int64_t reclaimed;    /* dead processes' slots reclaimed */
    uint64_t claims;      /* the last token handed out */
    uint64_t scanned_at;  /* CLOCK_MONOTONIC ns of a report's last look for the dead */
    uint32_t high;        /* slots[0..high) may hold bytes: raised by claims, never lowered */
    uint32_t pad2;
    int64_t spare[2];
    struct slot slots[CUDAREG_SLOTS];
};

struct cudareg {
    struct region_file *f;
    /* This process's own open file description of the region, whose locks
     * say it lives; -1 in a forked child until it needs one. Atomic. */
    int fd;
    int slot;       /* index in f->slots, -1 until the first charge; atomic */
    uint64_t token; /* the claim of that slot; under f->lock */
    bool by_pid;    /* the kernel refused OFD locks (before Linux 3.15) */
    int32_t pid;    /* getpid() of the owner, kept across calls */
    uint32_t pidns;
    int64_t limit; /* the limit this process attached with */
    char path[];   /* to open the region again after a fork */
};

size_t cudareg_file_size(void)
{
    return sizeof(struct region_file);
}

size_t cudareg_peek_size(const void *head, size_t len)
{
    struct region_file h;
    if (len < offsetof(struct region_file, slots))
        return 0;
    memcpy(&h, head, offsetof(struct region_file, slots));
    if (h.magic != REGION_MAGIC || h.version != REGION_VERSION)
        return 0;
    uint32_t high = h.high < CUDAREG_SLOTS ? h.high : CUDAREG_SLOTS;
    return offsetof(struct region_file, slots) + (size_t)high * sizeof(struct slot);
}

static int byte_held(int fd, unsigned i);

int cudareg_peek(const void *bytes, size_t len, struct cudareg_view *out,
                 void (*each)(void *ctx, const struct cudareg_slot_view *slot), void *ctx)
{
    return cudareg_peek_live(bytes, len, -1, out, each, ctx);
}

int cudareg_peek_live(const void *bytes, size_t len, int fd, struct cudareg_view *out,
                      void (*each)(void *ctx, const struct cudareg_slot_view *slot), void *ctx)
{
    memset(out, 0, sizeof *out);
    if (len < offsetof(struct region_file, slots) || len > sizeof(struct region_file))
        return -1;
    /* A copy, not the live mapping: fields are read with memcpy from the
     * caller's bytes, aligned or not. */
    struct region_file head;
    memcpy(&head, bytes, offsetof(struct region_file, slots));
    if (head.magic != REGION_MAGIC || head.version != REGION_VERSION ||
        head.size != sizeof(struct region_file) || head.nslots != CUDAREG_SLOTS ||
        head.ready != 1 || head.limit < 0)
        return -1;
    out->limit = head.limit;
    /* Only slots below the high mark hold bytes (charges sum no others, see
     * slots_sum), and only those the caller read. A file that lowers its own
     * mark hides its own use, nothing else's. */
    size_t have = (len - offsetof(struct region_file, slots)) / sizeof(struct slot);
    size_t n = head.high < CUDAREG_SLOTS ? head.high : CUDAREG_SLOTS;
    if (n > have)
        n = have;
    const unsigned char *slots = (const unsigned char *)bytes + offsetof(struct region_file, slots);
    for (size_t i = 0; i < n; i++) {
        struct slot sl;
        memcpy(&sl, slots + i * sizeof sl, sizeof sl);
        if (sl.state == SLOT_FREE)
            continue;
        /* A slot whose liveness lock nobody holds lost its process (killed,
         * crashed): what it charged is no one's any more, though it stays in
         * the file until a process of the container reaps it. */
        if (fd >= 0 && sl.state == SLOT_LOCKED && byte_held(fd, (unsigned)i) == 0)
            continue;
        int64_t used = sl.used > 0 ? sl.used : 0;
        /* Saturate: a forged slot must not wrap the sum negative. */
        out->used = used > INT64_MAX - out->used ? INT64_MAX : out->used + used;
        out->live_slots++;
        if (each != NULL) {
            struct cudareg_slot_view v = {.pid = sl.pid, .pidns = sl.pidns, .used = used};
            each(ctx, &v);
        }
    }
    return 0;
}

/* ---- who is alive -------------------------------------------------------- */

/* The byte whose lock says slot i is live: the slot's own first byte. */
static off_t slot_byte(unsigned i)
{
    return (off_t)(offsetof(struct region_file, slots) + i * sizeof(struct slot));
}

/* F_OFD_SETLK of type on slot i's byte (F_WRLCK takes it, F_UNLCK drops it).
 * 0, or -1 with errno (EAGAIN: someone else holds it; EINVAL: no OFD locks). */
static int byte_lock(int fd, unsigned i, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = slot_byte(i), .l_len = 1};
    return fcntl(fd, F_OFD_SETLK, &fl);
}

/* Whether an open file description other than fd's holds slot i's byte:
 * 1 yes, 0 no, -1 cannot tell. fd's own locks never conflict with it, so a
 * process cannot judge its own slot this way (and never needs to). */
static int byte_held(int fd, unsigned i)
{
    struct flock fl = {
        .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = slot_byte(i), .l_len = 1};
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
        return -1;
    return fl.l_type != F_UNLCK;
}

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

/* State (field 3), thread count (field 20) and start time (field 22) of
 * /proc/<pid>/stat (pid 0: self); -1 when it cannot be read. The command
 * name (field 2) may hold spaces and ')'. */
static int proc_stat(int32_t pid, char *state, long *threads, uint64_t *start)
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
    *threads = 0;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL)
            return -1;
        p++;
        if (field + 1 == 20)
            *threads = strtol(p, NULL, 10);
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno != 0 || end == p)
        return -1;
    *start = v;
    return 0;
}

/* The fallback without OFD locks: true only when the slot's process is
 * certainly gone. Never for a pid of another pid namespace, which this
 * process cannot judge; a zombie is gone only when no thread of it lives
 * (its main thread may have exited while workers hold memory); a process
 * that exec'd keeps its pid and start time, so its old image stays charged
 * until it exits (only OFD locks see the exec). */
static bool pid_is_dead(const struct slot *s, uint32_t pidns)
{
    if (s->pid <= 0 || s->pidns != pidns)
        return false; /* (kill() would take 0 and below for process groups) */
    if (kill(s->pid, 0) != 0 && errno == ESRCH)
        return true;
    char state;
    long threads;
    uint64_t start;
    if (proc_stat(s->pid, &state, &threads, &start) != 0)
        return false; /* /proc hidden: trust kill() */
    return state == 'X' || (state == 'Z' && threads <= 1) || (s->start != 0 && start != s->start);
}

/* Whether slot i, used by another process, belongs to one that is gone. */
static bool slot_is_dead(const struct cudareg *r, int fd, unsigned i)
{
    const struct slot *s = &r->f->slots[i];
    switch (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE)) {
    case SLOT_FREE:
        return false;
    case SLOT_BY_PID:
        return pid_is_dead(s, r->pidns);
    default: /* SLOT_LOCKED, or a state this version never writes */
        return byte_held(fd, i) == 0;
    }
}

/* This process's descriptor of the region for its locks, kept open for the
 * process's life (O_CLOEXEC: an exec drops it): opened at attach and again
 * in a forked child. The path is the one attached: the container's own
 * directory, whose file is never replaced while processes use it (a stale
 * one is rewritten in place). */
static int own_fd(struct cudareg *r)
{
    int fd = __atomic_load_n(&r->fd, __ATOMIC_ACQUIRE);
    if (fd >= 0)
        return fd;
    int mine = open(r->path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (mine < 0)
        return -1;
    int none = -1;
    if (__atomic_compare_exchange_n(&r->fd, &none, mine, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return mine;
    close(mine); /* another thread opened one first */
    return none;
}

/* ---- the lock ------------------------------------------------------------- */

/* What the slots below the high mark hold together: the container's use.
 * The file is the container's to write, so a share may be anything: a
 * negative one counts 0 and the sum saturates rather than wrap (a total
 * past the limit refuses every charge). Loads are sequentially consistent:
 * see charge_fast. */
static int64_t slots_sum(const struct region_file *f)
{
    uint32_t high = __atomic_load_n(&f->high, __ATOMIC_SEQ_CST);
    if (high > CUDAREG_SLOTS)
        high = CUDAREG_SLOTS;
    int64_t sum = 0;
    for (uint32_t i = 0; i < high; i++) {
        int64_t u = __atomic_load_n(&f->slots[i].used, __ATOMIC_SEQ_CST);
        if (u > 0)
            sum = u > INT64_MAX - sum ? INT64_MAX : sum + u;
    }
    return sum;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* 0 locked, -1 unusable. A previous owner that died inside the lock may have
 * updated the total but not its slot: the total is rebuilt from the slots. */
static int region_lock(struct region_file *f)
{
    int rc;
    for (unsigned i = 0;; i++) {
        rc = pthread_mutex_trylock(&f->lock);
        if (rc != EBUSY)
            break;
        if (i < LOCK_SPINS) {
            cpu_relax();
        } else if (i < LOCK_SPINS + LOCK_YIELDS) {
            sched_yield();
        } else {
            rc = pthread_mutex_lock(&f->lock);
            break;
        }
    }
    if (rc == EOWNERDEAD) {
        /* Nothing to rebuild: under the lock only claims and frees of slots
         * happen, each one store that publishes it. */
        f->recoveries++;
        rc = pthread_mutex_consistent(&f->lock);
    }
    return rc == 0 ? 0 : -1;
}

static void region_unlock(struct region_file *f)
{
    pthread_mutex_unlock(&f->lock);
}

/* Frees a slot. Under the lock; its owner's byte lock, if any, is the
 * owner's to drop (or the kernel's). */
static void clear_slot(struct slot *s)
{
    __atomic_store_n(&s->state, SLOT_FREE, __ATOMIC_RELEASE);
    __atomic_store_n(&s->used, 0, __ATOMIC_RELAXED);
    s->pid = 0;
    s->pidns = 0;
    s->start = 0;
    s->token = 0;
}

/* Gives back the slots of processes that are gone. Candidates are picked
 * without the lock (one fcntl each, so a container of many processes is not
 * stalled meanwhile), then each is judged again under the lock before it is
 * freed: a claim takes its byte lock before it publishes the slot, under
 * the lock, so "used and nobody holds its byte" seen under the lock means
 * dead. all: every used slot (a claim found none free); otherwise only the
 * slots that hold bytes. Returns how many slots were freed. */
static int reap(struct cudareg *r, bool all)
{
    struct region_file *f = r->f;
    int fd = own_fd(r); /* -1: only SLOT_BY_PID slots can be judged */
    uint64_t dead[CUDAREG_SLOTS / 64] = {0};
    int own = __atomic_load_n(&r->slot, __ATOMIC_RELAXED), found = 0;
    for (unsigned i = 0; i < CUDAREG_SLOTS; i++) {
        const struct slot *s = &f->slots[i];
        if ((int)i == own || __atomic_load_n(&s->state, __ATOMIC_RELAXED) == SLOT_FREE ||
            (!all && __atomic_load_n(&s->used, __ATOMIC_RELAXED) == 0) || !slot_is_dead(r, fd, i))
            continue;
        dead[i / 64] |= 1ull << (i % 64);
        found++;
    }
    if (found == 0 || region_lock(f) != 0)
        return 0;
    int freed = 0;
    for (unsigned i = 0; i < CUDAREG_SLOTS; i++) {
        /* r->slot again: another thread of ours may have claimed i since. */
        if (!(dead[i / 64] & (1ull << (i % 64))) || (int)i == r->slot || !slot_is_dead(r, fd, i))
            continue;
        clear_slot(&f->slots[i]);
        f->reclaimed++;
        freed++;
    }
    region_unlock(f);
    return freed;
}

/* True when the caller is the one process to look for the dead now: a
 * report looks at most every SCAN_EVERY_NS for the whole container. */
static bool scan_due(struct region_file *f)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return false;
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    uint64_t last = __atomic_load_n(&f->scanned_at, __ATOMIC_RELAXED);
    /* A time ahead of ours (another time namespace, a corrupt file) is
     * treated as long past, so it cannot stop the looking. */
    if (now >= last && now - last < (uint64_t)SCAN_EVERY_NS)
        return false;
    return __atomic_compare_exchange_n(&f->scanned_at, &last, now, false, __ATOMIC_RELAXED,
                                       __ATOMIC_RELAXED);
}

/* Whether this process's slot is still the one it claimed, without the
 * lock (and under it): the token changes only when a free slot is claimed, and ours is
 * freed only if we are judged dead (never while we hold its byte lock) or
 * the file is damaged. */
static bool owns_slot(const struct cudareg *r)
{
    int i = __atomic_load_n(&r->slot, __ATOMIC_RELAXED);
    if (i < 0)
        return false;
    const struct slot *s = &r->f->slots[i];
    return __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != SLOT_FREE &&
           __atomic_load_n(&s->token, __ATOMIC_RELAXED) == r->token;
}

/* Takes a free slot for this process: its byte lock first, then the slot
 * is published. Under the lock. 0, or -1 when no slot is free. */
static int claim(struct cudareg *r)
{
    struct region_file *f = r->f;
    int fd = __atomic_load_n(&r->fd, __ATOMIC_ACQUIRE);
    /* A slot taken from us (only a damaged file does that) may still carry
     * our lock; drop it so its next owner can take it. */
    if (r->slot >= 0 && fd >= 0 && !r->by_pid)
        (void)byte_lock(fd, (unsigned)r->slot, F_UNLCK);
    for (unsigned i = 0; i < CUDAREG_SLOTS; i++) {
        struct slot *s = &f->slots[i];
        if (s->state != SLOT_FREE)
            continue;
        uint32_t state = SLOT_LOCKED;
        if (fd < 0 || r->by_pid) {
            state = SLOT_BY_PID;
        } else if (byte_lock(fd, i, F_WRLCK) != 0) {
            if (errno != EINVAL)
                continue; /* a lock on a free slot: leave it to whoever holds it */
            r->by_pid = true;
            state = SLOT_BY_PID;
        }
        char st;
        long threads;
        uint64_t start = 0;
        if (proc_stat(0, &st, &threads, &start) != 0)
            start = 0;
        if (++f->claims == 0)
            f->claims = 1; /* 0 is never a token */
        s->pid = r->pid;
        s->pidns = r->pidns;
        s->start = start;
        s->token = f->claims;
        __atomic_store_n(&s->used, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&s->state, state, __ATOMIC_RELEASE);
        r->token = f->claims;
        if (__atomic_load_n(&f->high, __ATOMIC_RELAXED) < i + 1)
            __atomic_store_n(&f->high, i + 1, __ATOMIC_SEQ_CST);
        __atomic_store_n(&r->slot, (int)i, __ATOMIC_RELAXED);
        return 0;
    }
    return -1;
}

/* The limit this process is held to. */
static int64_t limit_of(const struct cudareg *r)
{
    int64_t region = r->f->limit;
    return region < r->limit ? region : r->limit;
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

/* Whether the file (of size bytes) is a complete region of an older layout
 * version: made by a library that is no longer running in this container. */
static bool is_older_region(int fd, off_t size)
{
    uint32_t head[4];
    if (size != REGION_V1_SIZE || pread(fd, head, sizeof head, 0) != (ssize_t)sizeof head)
        return false;
    return head[0] == REGION_MAGIC && head[1] == 1 && head[2] == REGION_V1_SIZE;
}

/* The process's handle on a mapped, valid region. The descriptor the
 * mapping was made through is closed here, and the locks are taken through
 * another one: a mapping holds its open file description as a descriptor
 * does, and a forked child inherits the mapping, which would keep this
 * process's lock (and charge) alive after it died. */
static struct cudareg *wrap(struct region_file *f, int fd, const char *path, int64_t limit,
                            char *err, size_t errlen)
{
    close(fd);
    size_t len = strlen(path) + 1;
    struct cudareg *r = calloc(1, sizeof *r + len);
    if (r == NULL) {
        munmap(f, sizeof *f);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->f = f;
    r->fd = -1; /* opened by the first look for the dead, just below */
    r->slot = -1;
    r->pid = (int32_t)getpid();
    r->pidns = own_pidns();
    r->limit = limit;
    memcpy(r->path, path, len);
    /* A process that starts after others died (a restarted container's
     * first one, an exec'd image) sees their memory free at once. */
    (void)reap(r, false);
    return r;
}

struct cudareg *cudareg_attach(const char *path, int64_t limit, char *err, size_t errlen)
{
    if (limit < 0) {
        snprintf(err, errlen, "negative limit for the shared region %s", path);
        return NULL;
    }
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
        if (f != MAP_FAILED && __atomic_load_n(&f->ready, __ATOMIC_ACQUIRE) == 1 && is_region(f))
            return wrap(f, fd, path, limit, err, errlen);
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
        if (!is_older_region(fd, size)) {
            snprintf(err, errlen,
                     "%s is not a gpupool-cuda region of this version (%lld bytes, want %zu)", path,
                     (long long)size, sizeof *f);
            goto fail_msg;
        }
        /* Emptied first, so that a process mapping it without the file lock
         * meanwhile finds zeros (not ready), never the old contents. */
        if (ftruncate(fd, 0) != 0) {
            what = "reset the stale";
            saved = errno;
            goto fail;
        }
        fresh = true;
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
    return wrap(f, fd, path, limit, err, errlen);
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
        if (owns_slot(r))
            clear_slot(&f->slots[r->slot]);
        /* Dropped under the lock: a claimer finds the slot free and its
         * byte free together. */
        if (r->fd >= 0 && !r->by_pid)
            (void)byte_lock(r->fd, (unsigned)r->slot, F_UNLCK);
        region_unlock(f);
    }
    if (r->fd >= 0)
        close(r->fd);
    munmap(f, sizeof *f);
    free(r);
}

int64_t cudareg_limit(const struct cudareg *r)
{
    return limit_of(r);
}

/* One charge, with no lock: 0 charged, 1 over the limit.
 *
 * Only the owner writes its slot's share. The charge is written into it
 * first (tentatively, a sequentially consistent store), then every share
 * is read (sequentially consistent loads) and the charge stays only if the
 * sum is within the limit; else it is taken back. Of two processes charging
 * at once, at least one sees the other's tentative share (a store followed
 * by loads, in one total order: Dekker's argument), and the last of any
 * number to store sees them all: so the shares that stay never add up past
 * the limit. At worst both of two racing for the last bytes are refused
 * (the caller looks for the dead and tries once more). A process killed at
 * any instant leaves only its own share, whole or tentative, which is
 * freed with its slot: nothing to rebuild, nothing lost. */
static int charge_fast(struct cudareg *r, int64_t bytes)
{
    struct region_file *f = r->f;
    struct slot *own = &f->slots[r->slot];
    int64_t limit = limit_of(r);
    if (limit < 0 || bytes > limit)
        return 1;
    /* An atomic add, not a store: the process's threads share its slot. */
    int64_t held = __atomic_add_fetch(&own->used, bytes, __ATOMIC_SEQ_CST);
    if (held >= bytes && held <= limit && slots_sum(f) <= limit)
        return 0;
    __atomic_sub_fetch(&own->used, bytes, __ATOMIC_RELEASE);
    return 1;
}

/* The slow path of a charge: claims a slot (under the lock) when this
 * process has none. 0, or -1 when every slot is held by a live process. */
static int ensure_slot(struct cudareg *r)
{
    if (owns_slot(r))
        return 0;
    if (__atomic_load_n(&r->fd, __ATOMIC_RELAXED) < 0)
        (void)own_fd(r); /* a forked child's first charge: open outside the lock */
    if (region_lock(r->f) != 0)
        return -1;
    int rc = owns_slot(r) || claim(r) == 0 ? 0 : -1;
    region_unlock(r->f);
    return rc;
}

int cudareg_reserve(struct cudareg *r, int64_t bytes)
{
    if (bytes < 0)
        return 1;
    int rc = 1;
    for (int pass = 0; pass < 2; pass++) {
        rc = ensure_slot(r) == 0 ? charge_fast(r, bytes) : -1;
        /* Refused: give the dead's slots back and try once more, so memory
         * of a process killed a moment ago serves this charge at once (and
         * a race for the last bytes that refused both gets a second look). */
        if (rc == 0 || pass == 1 || (reap(r, rc < 0) == 0 && rc < 0))
            break;
    }
    return rc;
}

/* Gives back bytes this process charged: its own share only, so no lock
 * (an atomic update: the process's threads share its slot). */
void cudareg_release(struct cudareg *r, int64_t bytes)
{
    if (bytes <= 0 || !owns_slot(r))
        return;
    struct slot *s = &r->f->slots[r->slot];
    int64_t held = __atomic_load_n(&s->used, __ATOMIC_RELAXED), left;
    do /* never below zero: counters cannot wrap */
        left = bytes >= held ? 0 : held - bytes;
    while (!__atomic_compare_exchange_n(&s->used, &held, left, true, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED));
}

int64_t cudareg_usage(struct cudareg *r)
{
    if (scan_due(r->f))
        (void)reap(r, false);
    return slots_sum(r->f);
}

void cudareg_after_fork(struct cudareg *r)
{
    /* The inherited descriptor shares the parent's open file description,
     * and with it the lock that keeps the parent's slot alive: kept, it
     * would keep the parent charged after the parent died. */
    int fd = r->fd;
    r->fd = -1;
    if (fd >= 0)
        close(fd);
    r->slot = -1;
    r->token = 0;
    r->pid = (int32_t)getpid();
}

struct own_ctx {
    uint32_t pidns;
    struct cudareg_slot_view *out;
    size_t max, n;
};

static void own_slot(void *ctx, const struct cudareg_slot_view *v)
{
    struct own_ctx *c = ctx;
    if (v->pidns != c->pidns)
        return; /* another namespace's process: not this container's to show */
    if (c->n < c->max)
        c->out[c->n] = *v;
    c->n++;
}

size_t cudareg_own_processes(struct cudareg *r, struct cudareg_slot_view *out, size_t max)
{
    (void)cudareg_usage(r); /* gives back the slots of processes that are gone */
    struct own_ctx c = {r->pidns, out, max, 0};
    struct cudareg_view v;
    if (cudareg_peek(r->f, sizeof *r->f, &v, own_slot, &c) != 0)
        return 0;
    return c.n;
}
