/* cuda_pidmap.c -- the node agent's pid maps, read inside the container (see cuda_pidmap.h). */
#include "cuda_glibc.h"
#include "cuda_pidmap.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Appends to out[n..max) the pairs of the map in the directory of the
 * region prefix `prefix`; returns the new count. */
static size_t read_one(const char *prefix, struct cudapid_pair *out, size_t n, size_t max)
{
    char path[CUDACFG_UUID_PREFIX_LEN + 1024 + sizeof POOL_REGION_PID_MAP];
    const char *slash = strrchr(prefix, '/');
    size_t dlen = slash != NULL ? (size_t)(slash - prefix) + 1 : 0;
    if (slash == NULL || dlen + sizeof POOL_REGION_PID_MAP > sizeof path)
        return n;
    memcpy(path, prefix, dlen);
    memcpy(path + dlen, POOL_REGION_PID_MAP, sizeof POOL_REGION_PID_MAP);
    /* O_NONBLOCK: a FIFO planted under the name must not block the caller. */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return n;
    /* On the heap: 16 KiB is too much for the stack of an application
     * thread we know nothing of. */
    char *text = malloc(POOL_PID_MAP_MAX + 1);
    ssize_t got = text != NULL ? read(fd, text, POOL_PID_MAP_MAX) : -1;
    close(fd);
    size_t hlen = strlen(POOL_PID_MAP_HEADER);
    if (got > (ssize_t)hlen && memcmp(text, POOL_PID_MAP_HEADER, hlen) == 0 && text[hlen] == '\n') {
        text[got] = '\0';
        char *p = text + hlen + 1;
        while (n < max && *p != '\0') {
            char *end;
            unsigned long host = strtoul(p, &end, 10);
            if (end == p || *end != ' ')
                break;
            p = end + 1;
            unsigned long inner = strtoul(p, &end, 10);
            if (end == p || *end != '\n')
                break;
            p = end + 1;
            out[n++] = (struct cudapid_pair){(unsigned)host, (unsigned)inner};
        }
    }
    free(text);
    return n;
}

size_t cudapid_read(const struct cudacfg *cfg, struct cudapid_pair *out, size_t max)
{
    size_t n = read_one(cfg->prefix, out, 0, max);
    for (int i = 0; i < cfg->uuid_count; i++) {
        const char *pre = cfg->by_uuid[i].prefix;
        bool seen = pre[0] == '\0' || strcmp(pre, cfg->prefix) == 0;
        for (int k = 0; k < i && !seen; k++)
            seen = strcmp(cfg->by_uuid[k].prefix, pre) == 0;
        if (!seen)
            n = read_one(pre, out, n, max);
    }
    return n;
}

unsigned cudapid_host(const struct cudacfg *cfg, unsigned inner)
{
    struct cudapid_pair *map = malloc(CUDAPID_MAX_PAIRS * sizeof *map);
    if (map == NULL)
        return 0;
    size_t n = cudapid_read(cfg, map, CUDAPID_MAX_PAIRS);
    unsigned host = 0;
    for (size_t k = 0; k < n && host == 0; k++)
        if (map[k].inner == inner)
            host = map[k].host;
    free(map);
    return host;
}
