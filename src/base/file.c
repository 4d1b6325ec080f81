/* file.c -- replacing a file whole (see file.h). */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_ullong failures;

unsigned long long file_replace_failures(void)
{
    return atomic_load(&failures);
}

int file_replace(const char *path, const void *data, size_t len, mode_t mode, unsigned flags)
{
    char tmp[PATH_MAX];
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path + 1) : 0;
    if (snprintf(tmp, sizeof tmp, "%.*s.%s.tmp", dirlen, path, path + dirlen) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    (void)unlink(tmp); /* a leftover of a crash */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0) {
        atomic_fetch_add(&failures, 1);
        return FILE_REPLACE_NO_TEMP;
    }
    const char *p = data;
    int rc = 0;
    for (size_t left = len; left > 0 && rc == 0;) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno != EINTR)
            rc = -1;
        else if (w > 0) {
            p += w;
            left -= (size_t)w;
        }
    }
    if (rc == 0 && fchmod(fd, mode) != 0) /* the umask must not narrow it */
        rc = -1;
    if (rc == 0 && (flags & FILE_REPLACE_SYNC) && fsync(fd) != 0)
        rc = -1;
    int saved = errno;
    if (close(fd) != 0 && rc == 0) {
        rc = -1;
        saved = errno;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = -1;
        saved = errno;
    }
    if (rc != 0) {
        (void)unlink(tmp); /* nothing half-written is left: the old file stands */
        atomic_fetch_add(&failures, 1);
        errno = saved;
    }
    return rc;
}
