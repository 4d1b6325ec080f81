/* poolapi_index.c -- GPU index lists (see poolapi_index.h). */
#include "poolapi_index.h"

#include <stdio.h>
#include <string.h>

#define STRINGIFY(x) #x
#define EXPAND(x) STRINGIFY(x)
#define INDEX_LIMIT EXPAND(POOL_MAX_GPUS)

int poolapi_index_parse(const char *text, struct poolapi_index_list *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const char *p = text;
    const char *why = NULL;
    if (p == NULL || *p == '\0')
        why = "is empty";
    while (why == NULL) {
        if (*p < '0' || *p > '9') {
            why = "is not a comma-separated list of GPU indices";
            break;
        }
        unsigned v = 0;
        /* Digits one by one: no strtoul, so no blanks, signs or overflow. */
        for (; *p >= '0' && *p <= '9'; p++) {
            v = v * 10 + (unsigned)(*p - '0');
            if (v >= POOL_MAX_GPUS)
                break;
        }
        if (v >= POOL_MAX_GPUS) {
            why = "names a GPU index of " INDEX_LIMIT " or more";
            break;
        }
        if (out->mask & (1u << v)) {
            why = "names a GPU twice";
            break;
        }
        out->mask |= 1u << v;
        out->gpu[out->count++] = (uint8_t)v;
        if (*p == '\0')
            return 0;
        if (*p++ != ',' || *p == '\0')
            why = "is not a comma-separated list of GPU indices";
    }
    snprintf(err, errlen, "%s=\"%.40s\" %s", POOL_ANN_GPU_MEM_IDX, text ? text : "", why);
    memset(out, 0, sizeof *out);
    return -1;
}

char *poolapi_index_format(uint32_t mask, char *buf, size_t len)
{
    size_t used = 0;
    if (len == 0)
        return buf;
    buf[0] = '\0';
    for (unsigned g = 0; g < POOL_MAX_GPUS && used < len; g++) {
        if (!(mask & (1u << g)))
            continue;
        int n = snprintf(buf + used, len - used, used ? ",%u" : "%u", g);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    return buf;
}
