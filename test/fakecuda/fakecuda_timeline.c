/* fakecuda_timeline.c -- the shared simulated device timeline (see
 * fakecuda_timeline.h). Used by the fake driver (launches, synchronise), the
 * fake NVML (per-process utilisation) and the tool that prints it. */
#include "fakecuda_timeline.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define FC_TL_DEFAULT_US 100
#define FC_TL_DEFAULT_QUEUE 4

uint64_t fc_tl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* A positive number from the environment, or def. */
static uint64_t env_num(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return def;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    return *end == '\0' && n > 0 ? n : def;
}

int fc_tl_open(struct fc_tl *tl, const char *path, char *why, size_t whylen)
{
    memset(tl, 0, sizeof *tl);
    tl->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (tl->fd < 0) {
        snprintf(why, whylen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    /* Sized by whoever comes first; the zeros are a valid empty timeline. */
    off_t size = lseek(tl->fd, 0, SEEK_END);
    if (size != (off_t)sizeof(struct fc_tl_file) &&
        (size != 0 || ftruncate(tl->fd, sizeof(struct fc_tl_file)) != 0)) {
        snprintf(why, whylen, "%s is not a timeline (%lld bytes)", path, (long long)size);
        close(tl->fd);
        return -1;
    }
    void *m = mmap(NULL, sizeof(struct fc_tl_file), PROT_READ | PROT_WRITE, MAP_SHARED, tl->fd, 0);
    if (m == MAP_FAILED) {
        snprintf(why, whylen, "cannot map %s: %s", path, strerror(errno));
        close(tl->fd);
        return -1;
    }
    tl->f = m;
    tl->kernel_ns = env_num("FAKECUDA_KERNEL_US", FC_TL_DEFAULT_US) * 1000ull;
    const char *grid = getenv("FAKECUDA_KERNEL_GRID");
    tl->grid_ref = grid != NULL ? env_num("FAKECUDA_KERNEL_GRID", 0) : 0;
    tl->queue = (unsigned)env_num("FAKECUDA_QUEUE", FC_TL_DEFAULT_QUEUE);
    return 0;
}

uint64_t fc_tl_kernel_ns(const struct fc_tl *tl, uint64_t blocks)
{
    if (tl->grid_ref == 0)
        return tl->kernel_ns;
    uint64_t ns = tl->kernel_ns * blocks / tl->grid_ref;
    return ns > 0 ? ns : 1;
}

static void tl_lock(struct fc_tl *tl, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    while (fcntl(tl->fd, type == F_UNLCK ? F_OFD_SETLK : F_OFD_SETLKW, &fl) != 0 && errno == EINTR)
        ;
}

/* The calling process's pid as the outermost pid namespace this process's
 * /proc knows numbers it (the first field of NSpid): the host's pid, as a
 * real driver reports it to NVML, even from inside a pid namespace (which
 * is what a test of that case needs). getpid() where /proc says nothing. */
static int32_t tl_pid(void)
{
    static int32_t cached, cached_for;
    int32_t me = (int32_t)getpid();
    if (__atomic_load_n(&cached_for, __ATOMIC_ACQUIRE) == me)
        return __atomic_load_n(&cached, __ATOMIC_RELAXED);
    int32_t pid = me;
    FILE *st = fopen("/proc/self/status", "re");
    char line[256];
    while (st != NULL && fgets(line, sizeof line, st) != NULL)
        if (strncmp(line, "NSpid:", 6) == 0) {
            long v = strtol(line + 6, NULL, 10);
            if (v > 0)
                pid = (int32_t)v;
            break;
        }
    if (st != NULL)
        fclose(st);
    __atomic_store_n(&cached, pid, __ATOMIC_RELAXED);
    __atomic_store_n(&cached_for, me, __ATOMIC_RELEASE);
    return pid;
}

/* The calling process's record (under the lock): its own, a free one, or
 * that of a process that is gone (its figures are then lost). */
static struct fc_tl_proc *own_record(struct fc_tl_file *f)
{
    int32_t pid = tl_pid();
    struct fc_tl_proc *free_rec = NULL, *dead = NULL;
    for (unsigned i = 0; i < FC_TL_PROCS; i++) {
        struct fc_tl_proc *p = &f->procs[i];
        if (p->pid == pid)
            return p;
        if (p->pid == 0 && free_rec == NULL)
            free_rec = p;
        else if (p->pid != 0 && dead == NULL && kill(p->pid, 0) != 0 && errno == ESRCH)
            dead = p;
    }
    struct fc_tl_proc *p = free_rec != NULL ? free_rec : dead;
    if (p != NULL) {
        memset(p, 0, sizeof *p);
        p->pid = pid;
        if (f->nprocs < FC_TL_PROCS && p == free_rec)
            f->nprocs++;
    }
    return p;
}

void fc_tl_launch(struct fc_tl *tl, const char *uuid, uint64_t kernels, uint64_t dur_ns)
{
    if (tl->f == NULL || kernels == 0)
        return;
    struct fc_tl_file *f = tl->f;
    for (;;) {
        tl_lock(tl, F_WRLCK);
        struct fc_tl_proc *p = own_record(f);
        if (p == NULL) {
            tl_lock(tl, F_UNLCK);
            return; /* more processes than records: runs untimed */
        }
        uint64_t now = fc_tl_now();
        /* The bounded queue: room for this launch once fewer than `queue`
         * kernels' worth of this process's work lies ahead. */
        uint64_t ahead = p->tail_ns > now ? p->tail_ns - now : 0;
        uint64_t room = (uint64_t)tl->queue * (dur_ns / kernels);
        if (ahead > room) {
            tl_lock(tl, F_UNLCK);
            sleep_ns(ahead - room);
            continue;
        }
        if (f->uuid[0] == '\0' && uuid != NULL)
            snprintf(f->uuid, sizeof f->uuid, "%s", uuid);
        uint64_t ready = p->tail_ns > now ? p->tail_ns : now;
        uint64_t start = f->free_at > ready ? f->free_at : ready;
        uint64_t end = start + dur_ns;
        p->wait_ns += start - ready;
        p->busy_ns += end - start;
        p->kernels += kernels;
        p->tail_ns = end;
        f->free_at = end;
        p->ring[p->head % FC_TL_RING] = (struct fc_tl_span){start, end};
        __atomic_store_n(&p->head, p->head + 1, __ATOMIC_RELEASE);
        tl_lock(tl, F_UNLCK);
        return;
    }
}

void fc_tl_sync(struct fc_tl *tl)
{
    if (tl->f == NULL)
        return;
    tl_lock(tl, F_WRLCK);
    const struct fc_tl_proc *p = fc_tl_find(tl->f, tl_pid());
    uint64_t tail = p != NULL ? p->tail_ns : 0;
    tl_lock(tl, F_UNLCK);
    for (uint64_t now = fc_tl_now(); now < tail; now = fc_tl_now())
        sleep_ns(tail - now);
}

uint64_t fc_tl_busy_within(const struct fc_tl_proc *rec, uint64_t from, uint64_t to)
{
    uint64_t head = __atomic_load_n(&rec->head, __ATOMIC_ACQUIRE), busy = 0;
    for (uint64_t k = head; k > 0 && head - k < FC_TL_RING; k--) {
        struct fc_tl_span s = rec->ring[(k - 1) % FC_TL_RING];
        if (s.end <= from)
            break; /* spans are in time order: the older ones end earlier still */
        uint64_t a = s.start > from ? s.start : from, b = s.end < to ? s.end : to;
        if (b > a)
            busy += b - a;
    }
    return busy;
}

const struct fc_tl_proc *fc_tl_find(const struct fc_tl_file *f, int32_t pid)
{
    for (unsigned i = 0; i < FC_TL_PROCS; i++)
        if (f->procs[i].pid == pid)
            return &f->procs[i];
    return NULL;
}
