/* fakecuda_phys.c -- the physical-use file (fakecuda_phys.h): slots whose
 * liveness is an OFD lock, per-device current and peak over live slots.
 *
 * Used by the fake driver (FAKECUDA_PHYS) and by gpupool-fakecuda-phys. All
 * shared numbers change under the OFD write lock on byte 0, so a process
 * killed mid-update leaves the lock free and the numbers whole (each update
 * is a few stores done before the unlock; a kill between them can only leave
 * its own slot's figures out of step with `current`, which the next
 * snapshot recomputes from the slots). */
#include "fakecuda_phys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int lock_byte(int fd, off_t off, short type, bool wait)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = off, .l_len = 1};
    for (;;) {
        if (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) == 0)
            return 0;
        if (errno != EINTR || !wait)
            return -1;
    }
}

static int global_lock(struct fc_phys *p)
{
    return lock_byte(p->fd, 0, F_WRLCK, true);
}

static void global_unlock(struct fc_phys *p)
{
    /* Unlocking a held lock cannot fail on a valid descriptor. */
    (void)lock_byte(p->fd, 0, F_UNLCK, false);
}

static off_t slot_offset(int i)
{
    return (off_t)(offsetof(struct fc_phys_file, slot) + (size_t)i * sizeof(struct fc_phys_slot));
}

/* A slot is alive while some open file description holds its byte. Our own
 * slot's lock never conflicts with our own query, so it is answered here. */
static bool slot_alive(struct fc_phys *p, int i)
{
    if (i == p->slot)
        return true;
    struct flock fl = {
        .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = slot_offset(i), .l_len = 1};
    if (fcntl(p->fd, F_OFD_GETLK, &fl) != 0)
        return true; /* cannot tell: keep its bytes (never under-count) */
    return fl.l_type != F_UNLCK;
}

/* A dead slot's bytes leave the devices' current; the slot becomes free. */
static void slot_clear(struct fc_phys_file *f, int i)
{
    struct fc_phys_slot *s = &f->slot[i];
    for (uint32_t d = 0; d < FC_PHYS_DEVICES; d++) {
        uint64_t h = s->held[d];
        f->dev[d].current -= h < f->dev[d].current ? h : f->dev[d].current;
        s->held[d] = 0;
    }
    s->in_use = 0;
    s->pid = 0;
}

/* Under the global lock. */
static void reap(struct fc_phys *p)
{
    for (int i = 0; i < FC_PHYS_SLOTS; i++)
        if (p->f->slot[i].in_use && !slot_alive(p, i))
            slot_clear(p->f, i);
}

static int fail(char *why, size_t whylen, const char *what, const char *path)
{
    snprintf(why, whylen, "%s %s: %s", what, path, errno ? strerror(errno) : "bad file");
    return -1;
}

/* The descriptor: O_CLOEXEC so that exec drops the slot's lock. A new file
 * is made 0666 whatever the umask: processes of every user share it. */
static int open_file(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
        if (fchmod(fd, 0666) != 0) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
        return fd;
    }
    if (errno != EEXIST)
        return -1;
    return open(path, O_RDWR | O_CLOEXEC);
}

/* Opens and maps p->path (creating and laying out the file if new). On
 * failure nothing stays open. */
static int attach(struct fc_phys *p, char *why, size_t whylen)
{
    const char *path = p->path;
    errno = 0;
    if ((p->fd = open_file(path)) < 0)
        return fail(why, whylen, "cannot open", path);
    if (global_lock(p) != 0) {
        fail(why, whylen, "cannot lock", path);
        fc_phys_forget(p);
        return -1;
    }
    struct stat sb;
    int rc = -1;
    errno = 0;
    if (fstat(p->fd, &sb) != 0) {
        fail(why, whylen, "cannot stat", path);
    } else if (sb.st_size != 0 && sb.st_size != (off_t)sizeof(struct fc_phys_file)) {
        snprintf(why, whylen, "%s: %lld bytes, not a physical-use file of %zu", path,
                 (long long)sb.st_size, sizeof(struct fc_phys_file));
    } else if (sb.st_size == 0 && ftruncate(p->fd, sizeof(struct fc_phys_file)) != 0) {
        fail(why, whylen, "cannot size", path);
    } else {
        void *m =
            mmap(NULL, sizeof(struct fc_phys_file), PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
        if (m == MAP_FAILED) {
            fail(why, whylen, "cannot map", path);
        } else {
            p->f = m;
            if (sb.st_size == 0) {
                /* Made here, under the lock: no one has seen it half-written. */
                memcpy(p->f->magic, FC_PHYS_MAGIC, sizeof(p->f->magic));
                p->f->version = FC_PHYS_VERSION;
                p->f->nslots = FC_PHYS_SLOTS;
            }
            if (memcmp(p->f->magic, FC_PHYS_MAGIC, sizeof(p->f->magic)) != 0 ||
                p->f->version != FC_PHYS_VERSION || p->f->nslots != FC_PHYS_SLOTS ||
                p->f->ndev > FC_PHYS_DEVICES)
                snprintf(why, whylen, "%s: not a version %u physical-use file", path,
                         FC_PHYS_VERSION);
            else
                rc = 0;
        }
    }
    global_unlock(p);
    if (rc != 0)
        fc_phys_forget(p);
    return rc;
}

int fc_phys_open(struct fc_phys *p, const char *path, char *why, size_t whylen)
{
    memset(p, 0, sizeof(*p));
    p->fd = -1;
    p->slot = -1;
    errno = 0;
    if (!(p->path = strdup(path)))
        return fail(why, whylen, "cannot copy", path);
    if (attach(p, why, whylen) != 0) {
        fc_phys_close(p);
        return -1;
    }
    return 0;
}

static int register_devices(struct fc_phys *p, const char (*uuids)[FC_PHYS_UUID], int ndev,
                            char *why, size_t whylen)
{
    struct fc_phys_file *f = p->f;
    for (int i = 0; i < ndev; i++) {
        uint32_t d = 0;
        while (d < f->ndev && strncmp(f->dev[d].uuid, uuids[i], FC_PHYS_UUID) != 0)
            d++;
        if (d == f->ndev) {
            if (f->ndev == FC_PHYS_DEVICES) {
                snprintf(why, whylen, "%s already lists %d devices; %s is not one", p->path,
                         FC_PHYS_DEVICES, uuids[i]);
                return -1;
            }
            memset(&f->dev[d], 0, sizeof(f->dev[d]));
            memcpy(f->dev[d].uuid, uuids[i], FC_PHYS_UUID);
            f->dev[d].uuid[FC_PHYS_UUID - 1] = '\0';
            f->ndev++;
        }
        p->map[i] = (int)d;
    }
    return 0;
}

int fc_phys_claim(struct fc_phys *p, const char (*uuids)[FC_PHYS_UUID], int ndev, char *why,
                  size_t whylen)
{
    errno = 0;
    if (ndev > FC_PHYS_DEVICES) {
        snprintf(why, whylen, "more than %d devices", FC_PHYS_DEVICES);
        return -1;
    }
    if (!p->f && attach(p, why, whylen) != 0)
        return -1;
    if (global_lock(p) != 0)
        return fail(why, whylen, "cannot lock", p->path);
    int rc = register_devices(p, uuids, ndev, why, whylen);
    int i = 0;
    for (; rc == 0 && i < FC_PHYS_SLOTS; i++) {
        struct fc_phys_slot *s = &p->f->slot[i];
        if (s->in_use && slot_alive(p, i))
            continue;
        /* Free, or its owner is gone: ours once its byte is ours. */
        if (lock_byte(p->fd, slot_offset(i), F_WRLCK, false) != 0)
            continue;
        slot_clear(p->f, i);
        s->pid = (int32_t)getpid();
        s->in_use = 1;
        p->slot = i;
        break;
    }
    if (rc == 0 && p->slot < 0) {
        snprintf(why, whylen, "%s: all %d slots are held by live processes", p->path,
                 FC_PHYS_SLOTS);
        rc = -1;
    }
    global_unlock(p);
    return rc;
}

int fc_phys_charge(struct fc_phys *p, int dev, int64_t delta, uint64_t total)
{
    if (p->slot < 0 || dev < 0 || dev >= FC_PHYS_DEVICES)
        return -1;
    if (global_lock(p) != 0)
        return -1;
    struct fc_phys_file *f = p->f;
    struct fc_phys_dev *d = &f->dev[p->map[dev]];
    uint64_t *held = &f->slot[p->slot].held[p->map[dev]];
    int rc = 0;
    if (delta > 0) {
        uint64_t add = (uint64_t)delta;
        /* Only a figure that would set a peak or pass the total needs the
         * dead dropped first: below both, stale bytes change neither. */
        if (add > total || d->current > total - add || d->current + add > d->peak)
            reap(p);
        if (add > total || d->current > total - add) {
            rc = 1;
        } else {
            *held += add;
            d->current += add;
            if (d->current > d->peak)
                d->peak = d->current;
        }
    } else if (delta < 0) {
        uint64_t sub = (uint64_t) - (delta + 1) + 1;
        sub = sub < *held ? sub : *held;
        *held -= sub;
        d->current -= sub < d->current ? sub : d->current;
    }
    global_unlock(p);
    return rc;
}

int fc_phys_current(struct fc_phys *p, int dev, uint64_t *current)
{
    if (dev < 0 || dev >= FC_PHYS_DEVICES || global_lock(p) != 0)
        return -1;
    reap(p);
    *current = p->f->dev[p->map[dev]].current;
    global_unlock(p);
    return 0;
}

int fc_phys_snapshot(struct fc_phys *p, int reset_peak, struct fc_phys_dev *out, uint32_t *ndev)
{
    if (global_lock(p) != 0)
        return -1;
    struct fc_phys_file *f = p->f;
    reap(p);
    for (uint32_t d = 0; d < f->ndev; d++) {
        uint64_t sum = 0;
        for (int i = 0; i < FC_PHYS_SLOTS; i++)
            if (f->slot[i].in_use)
                sum += f->slot[i].held[d];
        f->dev[d].current = sum;
        if (reset_peak || sum > f->dev[d].peak)
            f->dev[d].peak = sum;
        out[d] = f->dev[d];
    }
    *ndev = f->ndev;
    global_unlock(p);
    return 0;
}

void fc_phys_close(struct fc_phys *p)
{
    if (p->f)
        (void)munmap(p->f, sizeof(*p->f));
    if (p->fd >= 0)
        (void)close(p->fd);
    free(p->path);
    p->f = NULL;
    p->fd = -1;
    p->path = NULL;
    p->slot = -1;
}

void fc_phys_forget(struct fc_phys *p)
{
    /* The mapping too: it holds the open file description (and so the
     * parent's lock) as much as the descriptor does. */
    if (p->f)
        (void)munmap(p->f, sizeof(*p->f));
    if (p->fd >= 0)
        (void)close(p->fd);
    p->f = NULL;
    p->fd = -1;
    p->slot = -1;
}
