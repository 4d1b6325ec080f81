/* isolation.c -- installs libgpupool-cuda and builds containers' limits (see isolation.h). */
#include "isolation.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "log.h"

#define COPY_CHUNK 65536
/* Nesting a container can build in its directory that removal follows;
 * deeper trees are left for the next pass rather than risking the stack. */
#define REMOVE_MAX_DEPTH 64

bool isolation_active(const struct gp_config *cfg)
{
    if (cfg->isolation != ISOLATION_MEMORY)
        return false;
    if (cfg->resource_mode == RESOURCE_MODE_GPU_MEM)
        return true;
    /* MPS replicas: the library holds the memory share that MPS's pinned
     * limit only asks for (docs/mps.md). */
    return (cfg->time_slice_memory_limit || cfg->sharing_mps) && cfg->time_slice_count > 0;
}

/* ---- install ------------------------------------------------------------------ */

static int make_dir(const char *path, mode_t mode, char *err, size_t errlen)
{
    if (mkdir(path, mode) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
            return 0;
        snprintf(err, errlen, "cannot prepare %s: %s", path,
                 errno == EEXIST ? "not a directory" : strerror(errno));
        return -1;
    }
    snprintf(err, errlen, "cannot create directory %s: %s", path, strerror(errno));
    return -1;
}

/* mkdir -p for an absolute path. */
static int make_dirs(const char *path, char *err, size_t errlen)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        snprintf(err, errlen, "path too long: %s", path);
        return -1;
    }
    for (char *p = buf + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot create directory %s: %s", buf, strerror(errno));
            return -1;
        }
        *p = '/';
    }
    return make_dir(buf, 0755, err, errlen);
}

/* Whole file into a malloc'd buffer (the library is a few hundred KiB). */
static int read_file(const char *path, char **data, size_t *len, char *err, size_t errlen)
{
    *data = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 0;
    char *buf = NULL;
    int rc = -1;
    for (;;) {
        if (cap - *len < COPY_CHUNK) {
            char *n = realloc(buf, cap + COPY_CHUNK);
            if (n == NULL) {
                snprintf(err, errlen, "out of memory reading %s", path);
                goto out;
            }
            buf = n;
            cap += COPY_CHUNK;
        }
        ssize_t r = read(fd, buf + *len, cap - *len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        *len += (size_t)r;
    }
    rc = 0;
out:
    close(fd);
    if (rc == 0)
        *data = buf;
    else
        free(buf);
    return rc;
}

/* True when path holds exactly data (a regular file). */
static bool same_content(const char *path, const char *data, size_t len)
{
    char *have = NULL;
    size_t have_len = 0;
    char ignored[8];
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size != len)
        return false;
    if (read_file(path, &have, &have_len, ignored, sizeof ignored) != 0)
        return false;
    bool same = have_len == len && memcmp(have, data, len) == 0;
    free(have);
    return same;
}

/* <dir>/<name> := data (file_replace: readers see the old file or the new
 * one, never a part). An identical file is not
 * replaced (its inode stays what running containers have mapped). */
static int install_file(const char *dir, const char *name, const char *data, size_t len,
                        mode_t mode, char *err, size_t errlen)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        snprintf(err, errlen, "path too long under %s", dir);
        return -1;
    }
    if (same_content(path, data, len)) {
        log_v(2, "isolation: %s is up to date", path);
        return 0;
    }
    int rc = file_replace(path, data, len, mode, 0);
    if (rc != 0) {
        snprintf(err, errlen, "cannot %s %s: %s",
                 rc == FILE_REPLACE_NO_TEMP ? "create a file in" : "write",
                 rc == FILE_REPLACE_NO_TEMP ? dir : path, strerror(errno));
        return -1;
    }
    log_info("isolation: installed %s (%zu bytes)", path, len);
    return 0;
}

static int make_region_dir(const char *path, char *err, size_t errlen);

int isolation_install(const struct gp_config *cfg, char *err, size_t errlen)
{
    char *lib = NULL;
    size_t lib_len = 0;
    char why[8192], containers[4096], priority[4096];
    int rc = -1;
    if (read_file(cfg->isolation_library, &lib, &lib_len, why, sizeof why) != 0) {
        snprintf(err, errlen,
                 "--isolation=memory needs the library named by --isolation-library "
                 "(GP_ISOLATION_LIBRARY, flags.isolationLibrary): %s; install it there or set "
                 "--isolation=none to run without GPU-memory limits",
                 why);
        return -1;
    }
    if (lib_len == 0) {
        snprintf(err, errlen, "--isolation-library %s is empty", cfg->isolation_library);
        goto out;
    }
    const char *preload = POOL_CONTAINER_LIBRARY "\n";
    if (snprintf(containers, sizeof containers, "%s/%s", cfg->isolation_dir,
                 ISOLATION_CONTAINERS_NAME) >= (int)sizeof containers) {
        snprintf(err, errlen, "--isolation-dir %s is too long", cfg->isolation_dir);
        goto out;
    }
    if (snprintf(priority, sizeof priority, "%s/%s", cfg->isolation_dir, ISOLATION_PRIORITY_NAME) >=
        (int)sizeof priority) {
        snprintf(err, errlen, "--isolation-dir %s is too long", cfg->isolation_dir);
        goto out;
    }
    if (make_dirs(cfg->isolation_dir, why, sizeof why) != 0 ||
        install_file(cfg->isolation_dir, ISOLATION_LIBRARY_NAME, lib, lib_len, 0755, why,
                     sizeof why) != 0 ||
        install_file(cfg->isolation_dir, ISOLATION_PRELOAD_NAME, preload, strlen(preload), 0644,
                     why, sizeof why) != 0 ||
        make_dir(containers, 0755, why, sizeof why) != 0 ||
        make_region_dir(priority, why, sizeof why) != 0) {
        snprintf(err, errlen,
                 "cannot prepare --isolation-dir (GP_ISOLATION_DIR, flags.isolationDir): %s", why);
        goto out;
    }
    rc = 0;
out:
    free(lib);
    return rc;
}

/* ---- keys and directories ---------------------------------------------------------- */

int isolation_pod_key(const char *uid, unsigned n, char *out, size_t len)
{
    if (uid == NULL || uid[0] == '\0')
        return -1;
    for (const char *p = uid; *p != '\0'; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-'))
            return -1;
    int w = snprintf(out, len, "%s_%u", uid, n);
    return w < 0 || (size_t)w >= len ? -1 : 0;
}

int isolation_replica_key(const char *device_id, char *out, size_t len)
{
    size_t prefix = strlen(ISOLATION_TS_PREFIX);
    size_t n = strlen(device_id);
    if (n == 0 || prefix + n + 1 > len)
        return -1;
    memcpy(out, ISOLATION_TS_PREFIX, prefix);
    for (size_t i = 0; i < n; i++) {
        char c = device_id[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '.';
        out[prefix + i] = ok ? c : '_';
    }
    out[prefix + n] = '\0';
    return 0;
}

/* Creates the region directory `path` (an existing one is reused) with
 * mode 0777 whatever the umask. The priority directory is made the same
 * way: every container user of every pod writes its busy files there. */
static int make_region_dir(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (mkdir(path, 0777) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create the container's region directory %s: %s", path,
                 strerror(errno));
        return -1;
    }
    /* lstat: a symlink planted in its place is not a directory of ours. */
    if (lstat(path, &st) != 0) {
        snprintf(err, errlen, "cannot use the container's region directory %s: %s", path,
                 strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "cannot use the container's region directory %s: not a directory",
                 path);
        return -1;
    }
    /* The umask took bits away; every container user must create files. */
    if ((st.st_mode & 07777) != 0777 && chmod(path, 0777) != 0) {
        snprintf(err, errlen, "cannot make %s writable for every container user: %s", path,
                 strerror(errno));
        return -1;
    }
    return 0;
}

int isolation_container_dir(const char *dir, const char *key, char *path, size_t pathlen, char *err,
                            size_t errlen)
{
    if (snprintf(path, pathlen, "%s/%s/%s", dir, ISOLATION_CONTAINERS_NAME, key) >= (int)pathlen) {
        snprintf(err, errlen, "region directory path too long under %s", dir);
        return -1;
    }
    return make_region_dir(path, err, errlen);
}

/* A claim UID names one directory entry: [A-Za-z0-9-], not empty. */
static bool valid_claim_uid(const char *uid)
{
    if (uid == NULL || uid[0] == '\0' || strlen(uid) >= ISOLATION_KEY_LEN)
        return false;
    for (const char *p = uid; *p != '\0'; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-'))
            return false;
    return true;
}

int isolation_claim_dir(const char *dir, const char *claim_uid, char *path, size_t pathlen,
                        char *err, size_t errlen)
{
    if (!valid_claim_uid(claim_uid)) {
        snprintf(err, errlen, "claim UID \"%.80s\" cannot name a region directory",
                 claim_uid ? claim_uid : "");
        return -1;
    }
    char claims[4096];
    if (snprintf(claims, sizeof claims, "%s/%s", dir, ISOLATION_CLAIMS_NAME) >=
            (int)sizeof claims ||
        snprintf(path, pathlen, "%s/%s", claims, claim_uid) >= (int)pathlen) {
        snprintf(err, errlen, "region directory path too long under %s", dir);
        return -1;
    }
    if (make_dir(claims, 0755, err, errlen) != 0)
        return -1;
    return make_region_dir(path, err, errlen);
}

int isolation_remove_claim_dir(const char *dir, const char *claim_uid, char *err, size_t errlen)
{
    if (!valid_claim_uid(claim_uid)) {
        snprintf(err, errlen, "claim UID \"%.80s\" cannot name a region directory",
                 claim_uid ? claim_uid : "");
        return -1;
    }
    char claims[4096];
    if (snprintf(claims, sizeof claims, "%s/%s", dir, ISOLATION_CLAIMS_NAME) >=
        (int)sizeof claims) {
        snprintf(err, errlen, "region directory path too long under %s", dir);
        return -1;
    }
    int fd = open(claims, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return 0; /* never created: nothing to remove */
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", claims, strerror(errno));
        return -1;
    }
    int rc = isolation_remove_tree(fd, claim_uid);
    int saved = errno;
    close(fd);
    if (rc != 0) {
        snprintf(err, errlen, "cannot remove %s/%s: %s", claims, claim_uid, strerror(saved));
        return -1;
    }
    return 0;
}

unsigned long long isolation_share(unsigned long long bytes, size_t gpu_count)
{
    return gpu_count == 0 ? 0 : bytes / gpu_count;
}

static bool same_device(const struct resource_device *a, const struct resource_device *b)
{
    return a->gpu == b->gpu && a->mig == b->mig;
}

size_t isolation_replica_limits(const struct gpu_inventory *inv, const struct resource *res,
                                const size_t *positions, size_t count, unsigned long long *limits,
                                size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        const struct resource_device *d = &res->devices[positions[i]];
        bool seen = false;
        for (size_t k = 0; k < i && !seen; k++)
            seen = same_device(&res->devices[positions[k]], d);
        if (seen || n == max)
            continue;
        unsigned long long limit = 0;
        if (d->replica != RESOURCE_NO_REPLICA) {
            const struct gpu_device *g = &inv->gpus[d->gpu];
            unsigned long long memory =
                d->mig == RESOURCE_NO_MIG ? g->memory_bytes : g->migs[d->mig].memory_bytes;
            size_t replicas = 0, held = 0;
            for (size_t j = 0; j < res->device_count; j++)
                if (same_device(&res->devices[j], d) &&
                    res->devices[j].replica != RESOURCE_NO_REPLICA)
                    replicas++;
            for (size_t k = 0; k < count; k++)
                if (same_device(&res->devices[positions[k]], d))
                    held++;
            limit = replicas == 0 ? 0 : memory / replicas * held;
        }
        limits[n++] = limit;
    }
    return n;
}

/* ---- the edits ------------------------------------------------------------------- */

int isolation_add_priority_edits(const char *dir, bool high, struct container_edits *out, char *err,
                                 size_t errlen)
{
    char host[4096];
    if (snprintf(host, sizeof host, "%s/%s", dir, ISOLATION_PRIORITY_NAME) >= (int)sizeof host) {
        snprintf(err, errlen, "priority directory path too long under %s", dir);
        return -1;
    }
    if (container_edits_add_mount(out, host, POOL_CONTAINER_PRIORITY_DIR, false) != 0 ||
        container_edits_set_env(out, POOL_ENV_PRIORITY_DIR, POOL_CONTAINER_PRIORITY_DIR) != 0 ||
        (high && container_edits_set_env(out, POOL_ENV_TASK_PRIORITY, "0") != 0)) {
        snprintf(err, errlen, "out of memory building the container's priority edits");
        return -1;
    }
    return 0;
}

int isolation_add_edits(const char *dir, const char *host_dir, const unsigned long long *limits,
                        size_t n, struct container_edits *out, char *err, size_t errlen)
{
    if (n > POOL_MAX_CONTAINER_GPUS) {
        snprintf(err, errlen, "%zu GPUs in one container: at most %d get a memory limit", n,
                 POOL_MAX_CONTAINER_GPUS);
        return -1;
    }
    char lib[4096], preload[4096];
    snprintf(lib, sizeof lib, "%s/%s", dir, ISOLATION_LIBRARY_NAME);
    snprintf(preload, sizeof preload, "%s/%s", dir, ISOLATION_PRELOAD_NAME);
    if (container_edits_add_mount(out, lib, POOL_CONTAINER_LIBRARY, true) != 0 ||
        container_edits_add_mount(out, preload, POOL_CONTAINER_PRELOAD, true) != 0 ||
        container_edits_add_mount(out, host_dir, POOL_CONTAINER_REGION_DIR, false) != 0)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        char key[64], value[24];
        snprintf(key, sizeof key, POOL_ENV_MEM_LIMIT_PREFIX "%zu", i);
        snprintf(value, sizeof value, "%llu", limits[i]);
        if (container_edits_set_env(out, key, value) != 0)
            goto oom;
    }
    if (container_edits_set_env(out, POOL_ENV_SHARED_CACHE, POOL_CONTAINER_REGION_PREFIX) != 0)
        goto oom;
    return 0;
oom:
    snprintf(err, errlen, "out of memory building the container's memory limit");
    return -1;
}

/* ---- removal ------------------------------------------------------------------------ */

static int remove_at(int dirfd, const char *name, int depth)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlinkat(dirfd, name, 0) == 0 || errno == ENOENT ? 0 : -1;
    if (depth >= REMOVE_MAX_DEPTH) {
        errno = ELOOP;
        return -1;
    }
    /* O_NOFOLLOW | O_DIRECTORY: if the entry was swapped for a symlink since
     * the fstatat, the open fails instead of entering the link's target. */
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (remove_at(fd, e->d_name, depth + 1) != 0)
            rc = -1;
    }
    int saved = errno;
    closedir(d);
    if (rc != 0) {
        errno = saved;
        return -1;
    }
    return unlinkat(dirfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : -1;
}

int isolation_remove_tree(int dirfd, const char *name)
{
    return remove_at(dirfd, name, 0);
}

/* "<uid>_<n>": the UID into uid; false for any other name. */
static bool parse_pod_key(const char *name, char *uid, size_t len)
{
    const char *sep = strrchr(name, '_');
    if (sep == NULL || sep == name || sep[1] == '\0' || (size_t)(sep - name) >= len)
        return false;
    for (const char *p = sep + 1; *p != '\0'; p++)
        if (*p < '0' || *p > '9')
            return false;
    for (const char *p = name; p < sep; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-'))
            return false;
    memcpy(uid, name, (size_t)(sep - name));
    uid[sep - name] = '\0';
    return true;
}

size_t isolation_prune_pods(const char *dir, bool (*keep)(void *ctx, const char *uid), void *ctx)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, ISOLATION_CONTAINERS_NAME);
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        log_warn("isolation: cannot open %s: %s", path, strerror(errno));
        return 0;
    }
    int scan = dup(fd);
    DIR *d = scan >= 0 ? fdopendir(scan) : NULL;
    if (d == NULL) {
        log_warn("isolation: cannot read %s: %s", path, strerror(errno));
        if (scan >= 0)
            close(scan);
        close(fd);
        return 0;
    }
    size_t removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char uid[ISOLATION_KEY_LEN];
        if (!parse_pod_key(e->d_name, uid, sizeof uid) || keep(ctx, uid))
            continue;
        if (isolation_remove_tree(fd, e->d_name) != 0) {
            log_warn("isolation: cannot remove %s/%s: %s (retried later)", path, e->d_name,
                     strerror(errno));
            continue;
        }
        log_v(1, "isolation: removed %s/%s (pod %s is gone)", path, e->d_name, uid);
        removed++;
    }
    closedir(d);
    close(fd);
    return removed;
}
