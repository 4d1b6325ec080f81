/* rpc_socket.c -- socket-path safety (see rpc_socket.h). */
#include "rpc_socket.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"

/* connect(2) without blocking: a live server with a full backlog answers
 * EAGAIN instead of blocking us; that is a live server too. Returns 1 when
 * somebody is there, 0 when nobody is (ECONNREFUSED, ENOENT), -1 with err. */
static int socket_is_live(const char *path, char *err, size_t errlen)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    int rc = connect(fd, (struct sockaddr *)&addr, sizeof addr);
    int saved = errno;
    close(fd);
    if (rc == 0 || saved == EAGAIN || saved == EINPROGRESS)
        return 1;
    if (saved == ECONNREFUSED || saved == ENOENT)
        return 0;
    snprintf(err, errlen, "cannot probe %s: %s", path, strerror(saved));
    return -1;
}

int rpc_socket_claim(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (strlen(path) >= sizeof((struct sockaddr_un *)0)->sun_path) {
        snprintf(err, errlen, "socket path %s is too long", path);
        return -1;
    }
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "cannot stat %s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, errlen, "%s exists and is not a socket; refusing to replace it", path);
        return -1;
    }
    int live = socket_is_live(path, err, errlen);
    if (live < 0)
        return -1;
    if (live > 0) {
        snprintf(err, errlen, "%s is served by another live process; refusing to take it over",
                 path);
        return -1;
    }
    if (unlink(path) != 0 && errno != ENOENT) {
        snprintf(err, errlen, "cannot remove stale socket %s: %s", path, strerror(errno));
        return -1;
    }
    log_info("removed stale socket %s", path);
    return 0;
}

void rpc_socket_private_name(const char *path, char *out, size_t outlen)
{
    const char *slash = strrchr(path, '/');
    int dir_len = slash != NULL ? (int)(slash - path) + 1 : 0;
    int n = snprintf(out, outlen, "%.*s.%s.%ld", dir_len, path, path + dir_len, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof((struct sockaddr_un *)0)->sun_path || (size_t)n >= outlen)
        snprintf(out, outlen, "%s", path);
}

int rpc_socket_install(struct rpc_socket *s, const char *bind_path, char *err, size_t errlen)
{
    if (strcmp(bind_path, s->path) != 0 && rename(bind_path, s->path) != 0) {
        snprintf(err, errlen, "cannot move %s to %s: %s", bind_path, s->path, strerror(errno));
        if (unlink(bind_path) != 0 && errno != ENOENT)
            log_warn("cannot remove %s: %s", bind_path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (stat(s->path, &st) != 0) {
        /* Serving works; only the cleanup at stop will not remove the file. */
        log_warn("cannot stat %s after bind: %s", s->path, strerror(errno));
        return 0;
    }
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    s->ctime = st.st_ctim;
    s->have_identity = true;
    return 0;
}

static bool socket_is_ours(const struct rpc_socket *s, const struct stat *st)
{
    return st->st_dev == s->dev && st->st_ino == s->ino && st->st_ctim.tv_sec == s->ctime.tv_sec &&
           st->st_ctim.tv_nsec == s->ctime.tv_nsec;
}

void rpc_socket_release(struct rpc_socket *s)
{
    struct stat st;
    if (s->have_identity && lstat(s->path, &st) == 0) {
        if (!socket_is_ours(s, &st))
            log_info("%s was replaced by someone else; leaving it", s->path);
        else if (unlink(s->path) != 0 && errno != ENOENT)
            log_warn("cannot remove %s: %s", s->path, strerror(errno));
    }
    free(s->path);
    s->path = NULL;
    s->have_identity = false;
}
