/* cuda_config.c -- the limit variables of HAMi-core and gpushare, parsed once
 * (see cuda_config.h). */
#include "cuda_glibc.h"
#include "cuda_config.h"

#include <stdio.h>
#include <string.h>

#define VAR_LIMIT "CUDA_DEVICE_MEMORY_LIMIT"
#define VAR_CACHE "CUDA_DEVICE_MEMORY_SHARED_CACHE"
#define VAR_SHARE_CONTAINER "ALIYUN_COM_GPU_MEM_CONTAINER"
#define VAR_SHARE_DEV "ALIYUN_COM_GPU_MEM_DEV"

int cudacfg_parse_size(const char *s, int64_t *bytes)
{
    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    /* The suffix letter's power of 1024, from its position in "kmgt". */
    static const char units[] = "kmgt";
    unsigned shift = 0;
    if (*s != '\0') {
        const char *u = strchr(units, *s | 0x20);
        if (u == NULL)
            return -1;
        shift = 10 * (unsigned)(u - units + 1);
    }
    if (shift != 0) {
        s++;
        if (*s == 'i')
            s++;
        if (*s == 'b' || *s == 'B')
            s++;
    }
    if (*s != '\0' || v > ((uint64_t)INT64_MAX >> shift))
        return -1;
    *bytes = (int64_t)(v << shift);
    return 0;
}

/* Decimal units of gpushare's variables: digits only. */
static int parse_units(const char *s, uint64_t *out)
{
    int64_t v;
    if (s == NULL || strpbrk(s, "kKmMgGtTiIbB") != NULL || cudacfg_parse_size(s, &v) != 0)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

static void broken(struct cudacfg *cfg, const char *name, const char *value, const char *want)
{
    if (cfg->state == CUDACFG_BROKEN)
        return; /* the first reason is the one reported */
    cfg->state = CUDACFG_BROKEN;
    snprintf(cfg->why, sizeof cfg->why, "%s=\"%.64s\" is not %s", name, value, want);
}

void cudacfg_load(struct cudacfg *cfg, char *const *env)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->state = CUDACFG_OFF;
    cfg->all = -1;
    for (int i = 0; i < CUDACFG_MAX_DEVICES; i++)
        cfg->dev[i] = -1;
    snprintf(cfg->prefix, sizeof cfg->prefix, "%s", CUDACFG_DEFAULT_PREFIX);
    const char *share_units = NULL, *share_of = NULL;
    bool any = false;
    for (; env != NULL && *env != NULL; env++) {
        const char *e = *env, *eq = strchr(e, '=');
        if (eq == NULL)
            continue;
        size_t n = (size_t)(eq - e);
        const char *v = eq + 1;
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(n < 63 ? n : 63), e);
        if (n == strlen(VAR_LIMIT) && memcmp(e, VAR_LIMIT, n) == 0) {
            any = true;
            if (cudacfg_parse_size(v, &cfg->all) != 0)
                broken(cfg, name, v, "a size (bytes, or a number with k/m/g/t)");
        } else if (n > strlen(VAR_LIMIT) + 1 &&
                   memcmp(e, VAR_LIMIT "_", strlen(VAR_LIMIT) + 1) == 0) {
            const char *idx = e + strlen(VAR_LIMIT) + 1;
            unsigned i = 0;
            bool ok = idx < eq && eq - idx <= 2;
            for (const char *p = idx; ok && p < eq; p++) {
                ok = *p >= '0' && *p <= '9';
                i = i * 10 + (unsigned)(*p - '0');
            }
            any = true;
            if (!ok || i >= CUDACFG_MAX_DEVICES) {
                broken(cfg, name, v, "for a device ordinal 0..63");
                continue;
            }
            if (cudacfg_parse_size(v, &cfg->dev[i]) != 0)
                broken(cfg, name, v, "a size (bytes, or a number with k/m/g/t)");
        } else if (n == strlen(VAR_CACHE) && memcmp(e, VAR_CACHE, n) == 0) {
            if (v[0] == '\0' || strlen(v) >= sizeof cfg->prefix - 64)
                broken(cfg, name, v, "a usable path");
            else
                snprintf(cfg->prefix, sizeof cfg->prefix, "%s", v);
        } else if (n == strlen(VAR_SHARE_CONTAINER) && memcmp(e, VAR_SHARE_CONTAINER, n) == 0) {
            share_units = v;
        } else if (n == strlen(VAR_SHARE_DEV) && memcmp(e, VAR_SHARE_DEV, n) == 0) {
            share_of = v;
        }
    }
    if (share_units != NULL || share_of != NULL) {
        any = true;
        if (share_units == NULL || parse_units(share_units, &cfg->share_units) != 0)
            broken(cfg, VAR_SHARE_CONTAINER, share_units ? share_units : "",
                   "a number of units (gpushare's share needs it with " VAR_SHARE_DEV ")");
        else if (share_of == NULL || parse_units(share_of, &cfg->share_of) != 0 ||
                 cfg->share_of == 0)
            broken(cfg, VAR_SHARE_DEV, share_of ? share_of : "",
                   "a positive number of units (gpushare's share needs it with " VAR_SHARE_CONTAINER
                   ")");
    }
    if (any && cfg->state != CUDACFG_BROKEN)
        cfg->state = CUDACFG_ON;
}

int64_t cudacfg_limit(const struct cudacfg *cfg, int ordinal, int64_t device_total)
{
    if (cfg->state != CUDACFG_ON || ordinal < 0 || ordinal >= CUDACFG_MAX_DEVICES)
        return 0;
    if (cfg->dev[ordinal] >= 0)
        return cfg->dev[ordinal];
    if (cfg->all >= 0)
        return cfg->all;
    if (cfg->share_of > 0 && cfg->share_units > 0 && device_total > 0) {
        /* total * units / of without overflow: totals are < 2^50. */
        unsigned __int128 b = (unsigned __int128)device_total * cfg->share_units / cfg->share_of;
        return b > (unsigned __int128)INT64_MAX ? INT64_MAX : (int64_t)b;
    }
    return 0;
}
