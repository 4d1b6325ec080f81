/* gpumem_ledger.c -- answered Allocate calls per pod, on disk (see gpumem_ledger.h). */
#include "gpumem_ledger.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "log.h"

#define LEDGER_SUBDIR "gpumem"
#define LEDGER_UID_MAX 64

struct ledger_entry {
    char uid[LEDGER_UID_MAX + 1];
    unsigned calls;
    bool unsaved; /* calls is newer than the file (a failed write) */
};

struct gpumem_ledger {
    char dir[PATH_MAX];
    size_t count, cap;
    struct ledger_entry *entries;
};

/* UIDs name files: only what an API server generates is accepted. */
static bool valid_uid(const char *uid)
{
    size_t n = strlen(uid);
    if (n == 0 || n > LEDGER_UID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = uid[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              c == '-'))
            return false;
    }
    return true;
}

static struct ledger_entry *find(const struct gpumem_ledger *l, const char *uid)
{
    for (size_t i = 0; i < l->count; i++)
        if (strcmp(l->entries[i].uid, uid) == 0)
            return &l->entries[i];
    return NULL;
}

static struct ledger_entry *insert(struct gpumem_ledger *l, const char *uid)
{
    if (l->count == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        struct ledger_entry *e = realloc(l->entries, cap * sizeof *e);
        if (e == NULL)
            return NULL;
        l->entries = e;
        l->cap = cap;
    }
    struct ledger_entry *e = &l->entries[l->count++];
    snprintf(e->uid, sizeof e->uid, "%s", uid);
    e->calls = 0;
    e->unsaved = false;
    return e;
}

/* A count as gpumem_ledger_set() writes it: decimal digits and a newline.
 * No sign ("-1" must not read as UINT_MAX), nothing else. */
static bool parse_calls(const char *text, unsigned *calls)
{
    unsigned long v = 0;
    size_t i = 0;
    for (; text[i] >= '0' && text[i] <= '9'; i++) {
        v = v * 10 + (unsigned long)(text[i] - '0');
        if (v > UINT_MAX)
            return false;
    }
    if (i == 0 || (text[i] != '\0' && strcmp(text + i, "\n") != 0))
        return false;
    *calls = (unsigned)v;
    return true;
}

/* Only regular files are read: O_NOFOLLOW refuses a symlink, O_NONBLOCK
 * makes opening a FIFO return at once (fstat then skips it), so nothing
 * planted in the directory can hang start-up or point elsewhere. */
static void load_entry(struct gpumem_ledger *l, int dirfd, const char *uid)
{
    int fd = openat(dirfd, uid, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        log_warn("gpu-mem ledger: skipping %s/%s: %s", l->dir, uid,
                 errno == ELOOP ? "a symbolic link" : strerror(errno));
        return;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        log_warn("gpu-mem ledger: skipping %s/%s: not a regular file", l->dir, uid);
        close(fd);
        return;
    }
    char text[24];
    ssize_t n;
    do
        n = read(fd, text, sizeof text - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
    unsigned calls = 0;
    if (n >= 0)
        text[n] = '\0';
    struct ledger_entry *e = n > 0 && parse_calls(text, &calls) ? insert(l, uid) : NULL;
    if (e != NULL)
        e->calls = calls;
    else
        log_warn("gpu-mem ledger: ignoring unreadable entry %s/%s", l->dir, uid);
}

int gpumem_ledger_open(const char *dir, struct gpumem_ledger **out, char *err, size_t errlen)
{
    struct gpumem_ledger *l = calloc(1, sizeof *l);
    if (l == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (snprintf(l->dir, sizeof l->dir, "%s/%s", dir, LEDGER_SUBDIR) >= (int)sizeof l->dir) {
        snprintf(err, errlen, "state directory %s: path too long", dir);
        free(l);
        return -1;
    }
    if ((mkdir(dir, 0755) != 0 && errno != EEXIST) ||
        (mkdir(l->dir, 0700) != 0 && errno != EEXIST)) {
        snprintf(err, errlen,
                 "cannot create the gpu-mem ledger directory %s: %s (set "
                 "--state-dir to a writable directory that survives plugin restarts)",
                 l->dir, strerror(errno));
        free(l);
        return -1;
    }
    DIR *d = opendir(l->dir);
    if (d == NULL) {
        snprintf(err, errlen, "cannot read %s: %s", l->dir, strerror(errno));
        free(l);
        return -1;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (valid_uid(de->d_name))
            load_entry(l, dirfd(d), de->d_name);
    closedir(d);
    *out = l;
    return 0;
}

void gpumem_ledger_close(struct gpumem_ledger *l)
{
    if (l == NULL)
        return;
    free(l->entries);
    free(l);
}

unsigned gpumem_ledger_get(const struct gpumem_ledger *l, const char *uid)
{
    const struct ledger_entry *e = find(l, uid);
    return e ? e->calls : 0;
}

static int save(const struct gpumem_ledger *l, const char *uid, unsigned calls, char *err,
                size_t errlen)
{
    char path[PATH_MAX + LEDGER_UID_MAX + 2];
    snprintf(path, sizeof path, "%s/%s", l->dir, uid);
    char text[16];
    int len = snprintf(text, sizeof text, "%u\n", calls);
    if (file_replace(path, text, (size_t)len, 0600, 0) != 0) {
        snprintf(err, errlen, "cannot write the gpu-mem ledger %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int gpumem_ledger_set(struct gpumem_ledger *l, const char *uid, unsigned calls, char *err,
                      size_t errlen)
{
    if (!valid_uid(uid)) {
        snprintf(err, errlen, "pod UID \"%.80s\" is not a valid UID", uid);
        return -1;
    }
    struct ledger_entry *e = find(l, uid);
    if (e == NULL && (e = insert(l, uid)) == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    e->calls = calls;
    e->unsaved = save(l, uid, calls, err, errlen) != 0;
    return e->unsaved ? GPUMEM_LEDGER_UNSAVED : 0;
}

size_t gpumem_ledger_flush(struct gpumem_ledger *l, char *err, size_t errlen)
{
    size_t left = 0;
    for (size_t i = 0; i < l->count; i++) {
        struct ledger_entry *e = &l->entries[i];
        if (e->unsaved && save(l, e->uid, e->calls, err, errlen) != 0)
            left++;
        else
            e->unsaved = false;
    }
    return left;
}

size_t gpumem_ledger_prune(struct gpumem_ledger *l, bool (*keep)(void *ctx, const char *uid),
                           void *ctx)
{
    size_t dropped = 0, k = 0;
    for (size_t i = 0; i < l->count; i++) {
        if (keep(ctx, l->entries[i].uid)) {
            l->entries[k++] = l->entries[i];
            continue;
        }
        char path[PATH_MAX + LEDGER_UID_MAX + 2];
        snprintf(path, sizeof path, "%s/%s", l->dir, l->entries[i].uid);
        if (unlink(path) != 0 && errno != ENOENT)
            log_warn("gpu-mem ledger: cannot remove %s: %s", path, strerror(errno));
        dropped++;
    }
    l->count = k;
    return dropped;
}

size_t gpumem_ledger_count(const struct gpumem_ledger *l)
{
    return l->count;
}

const char *gpumem_ledger_uid(const struct gpumem_ledger *l, size_t i)
{
    return l->entries[i].uid;
}
