/* cuda_config.c -- the limit variables of HAMi-core and gpushare, parsed once
 * (see cuda_config.h). */
#include "cuda_glibc.h"
#include "cuda_config.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* CUDA's own variable, not the contract's: the process's renumbering. */
#define VAR_VISIBLE "CUDA_VISIBLE_DEVICES"
#define WANT_SIZE "a size (bytes, or a number with k/m/g/t)"
/* The messages below spell the ordinal range out. */
_Static_assert(CUDACFG_MAX_DEVICES == 64, "the messages say 0..63");

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

/* A GPU ordinal as the plugin writes it: decimal without sign or leading
 * zero, below CUDACFG_MAX_DEVICES. -1 otherwise: "_01" or "_1 " may mean
 * something else to whoever wrote them, and a limit that is not understood
 * must not be dropped (docs/isolation.md, "fails closed"). */
static int parse_ordinal(const char *s, size_t n)
{
    if (n == 0 || (n > 1 && s[0] == '0'))
        return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
        if (v >= CUDACFG_MAX_DEVICES)
            return -1;
    }
    return v;
}

/* CUDA_VISIBLE_DEVICES, comma-separated. An entry of digits names a
 * container ordinal; anything else (GPU-<uuid>, MIG-<uuid>, junk the driver
 * stops at) is CUDACFG_VISIBLE_BY_NAME, which cudacfg_limit answers with the
 * smallest limit: whichever way the driver reads such an entry, the process
 * is never given more than any of the container's GPUs has. */
static void parse_visible(struct cudacfg *cfg, const char *v)
{
    cfg->visible_count = 0; /* "": no device at all */
    while (*v != '\0' && cfg->visible_count < CUDACFG_MAX_DEVICES) {
        size_t n = strcspn(v, ",");
        int ordinal = CUDACFG_VISIBLE_BY_NAME;
        /* Leading zeros read as the number ("02" is 2), as strtol does. */
        if (n > 0 && n <= 3 && strspn(v, "0123456789") == n) {
            int k = 0;
            for (size_t i = 0; i < n; i++)
                k = k * 10 + (v[i] - '0');
            ordinal = k < CUDACFG_MAX_DEVICES ? k : CUDACFG_VISIBLE_BY_NAME;
        }
        cfg->visible[cfg->visible_count++] = ordinal;
        if (v[n] != ',')
            break;
        v += n + 1;
    }
}

/* "GPU-<hex and dashes>" or "MIG-<...>" (n bytes), each '-' possibly
 * spelled '_' (the form an environment name needs, poolapi_names.h): the
 * UUID's hex part (after the 4-byte tag), or NULL when s is not a UUID. */
static const char *uuid_hex(const char *s, size_t n)
{
    if (n <= 4 || n >= CUDACFG_UUID_LEN ||
        (strncmp(s, "GPU", 3) != 0 && strncmp(s, "MIG", 3) != 0) || (s[3] != '-' && s[3] != '_'))
        return NULL;
    for (size_t i = 4; i < n; i++)
        if (strchr("0123456789abcdefABCDEF-_", s[i]) == NULL || s[i] == '\0')
            return NULL;
    return s + 4;
}

/* Same hex, '-' and '_' alike, case aside; the tag is not compared: the
 * driver formats a MIG device's UUID as "GPU-..." where NVML says "MIG-...". */
static bool same_uuid(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    const char *ha = uuid_hex(a, la), *hb = uuid_hex(b, lb);
    if (ha == NULL || hb == NULL || la != lb)
        return false;
    for (; *ha != '\0'; ha++, hb++) {
        char x = *ha == '_' ? '-' : *ha, y = *hb == '_' ? '-' : *hb;
        if (tolower((unsigned char)x) != tolower((unsigned char)y))
            return false;
    }
    return true;
}

/* The entry of the UUID s[0..n), added when new; NULL when the table is full. */
static struct cudacfg_uuid *uuid_entry(struct cudacfg *cfg, const char *s, size_t n)
{
    char uuid[CUDACFG_UUID_LEN];
    snprintf(uuid, sizeof uuid, "%.*s", (int)n, s);
    for (int i = 0; i < cfg->uuid_count; i++)
        if (same_uuid(cfg->by_uuid[i].uuid, uuid))
            return &cfg->by_uuid[i];
    if (cfg->uuid_count == CUDACFG_MAX_DEVICES)
        return NULL;
    struct cudacfg_uuid *u = &cfg->by_uuid[cfg->uuid_count++];
    snprintf(u->uuid, sizeof u->uuid, "%s", uuid);
    u->limit = -1;
    u->sm = -1;
    u->prefix[0] = '\0';
    return u;
}

static void broken(struct cudacfg *cfg, const char *name, const char *value, const char *want)
{
    if (cfg->state == CUDACFG_BROKEN)
        return; /* the first reason is the one reported */
    cfg->state = CUDACFG_BROKEN;
    snprintf(cfg->why, sizeof cfg->why, "%s=\"%.64s\" is not %s", name, value, want);
}

/* A percent as HAMi-core takes it: decimal 0..100. */
static int parse_percent(const char *s, int *out)
{
    int64_t v;
    if (s == NULL || strpbrk(s, "kKmMgGtTiIbB") != NULL || cudacfg_parse_size(s, &v) != 0 ||
        v > 100)
        return -1;
    *out = (int)v;
    return 0;
}

/* The device a per-device variable's name ends in (the key after its
 * family's "_"): an ordinal 0..63 (*ordinal) or a GPU-/MIG- UUID, the DRA
 * driver's form (*u, its entry made on first sight). -1 when the key names
 * neither, or one UUID more than there are entries (broken() says which). */
static int per_device_key(struct cudacfg *cfg, const char *key, size_t kn, const char *name,
                          const char *v, int *ordinal, struct cudacfg_uuid **u)
{
    *u = NULL;
    if ((*ordinal = parse_ordinal(key, kn)) >= 0)
        return 0;
    if (uuid_hex(key, kn) == NULL) {
        broken(cfg, name, v,
               "for a device ordinal 0..63 or a GPU-/MIG- UUID (the name must end in one)");
        return -1;
    }
    if ((*u = uuid_entry(cfg, key, kn)) == NULL) {
        broken(cfg, name, v, "for at most 64 devices");
        return -1;
    }
    return 0;
}

static bool is_var(const char *e, size_t n, const char *name)
{
    return n == strlen(name) && memcmp(e, name, n) == 0;
}

void cudacfg_load(struct cudacfg *cfg, char *const *env)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->state = CUDACFG_OFF;
    cfg->all = -1;
    for (int i = 0; i < CUDACFG_MAX_DEVICES; i++)
        cfg->dev[i] = cfg->sm_dev[i] = -1;
    cfg->sm_all = cfg->priority = -1;
    const size_t sm_prefix_len = strlen(POOL_ENV_SM_LIMIT_PREFIX);
    cfg->visible_count = -1;
    snprintf(cfg->prefix, sizeof cfg->prefix, "%s", CUDACFG_DEFAULT_PREFIX);
    const char *share_units = NULL, *share_of = NULL;
    const size_t prefix_len = strlen(POOL_ENV_MEM_LIMIT_PREFIX);
    const size_t cache_len = strlen(POOL_ENV_SHARED_CACHE_PREFIX);
    bool any = false;
    for (; env != NULL && *env != NULL; env++) {
        const char *e = *env, *eq = strchr(e, '=');
        if (eq == NULL)
            continue;
        size_t n = (size_t)(eq - e);
        const char *v = eq + 1;
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(n < 63 ? n : 63), e);
        if (is_var(e, n, POOL_ENV_MEM_LIMIT)) {
            any = true;
            if (cudacfg_parse_size(v, &cfg->all) != 0)
                broken(cfg, name, v, WANT_SIZE);
        } else if (n >= prefix_len && memcmp(e, POOL_ENV_MEM_LIMIT_PREFIX, prefix_len) == 0) {
            /* The whole family is ours: "_" alone, "_x" or "_64" is a limit
             * someone meant, so it is refused rather than ignored (D14). */
            any = true;
            int i;
            struct cudacfg_uuid *u;
            if (per_device_key(cfg, e + prefix_len, n - prefix_len, name, v, &i, &u) == 0 &&
                cudacfg_parse_size(v, u ? &u->limit : &cfg->dev[i]) != 0)
                broken(cfg, name, v, WANT_SIZE);
        } else if (n > cache_len && memcmp(e, POOL_ENV_SHARED_CACHE_PREFIX, cache_len) == 0) {
            /* a per-device region prefix: the device's UUID after the "_" */
            struct cudacfg_uuid *u = NULL;
            if (uuid_hex(e + cache_len, n - cache_len) == NULL ||
                (u = uuid_entry(cfg, e + cache_len, n - cache_len)) == NULL)
                broken(cfg, name, v, "for a GPU-/MIG- UUID (the name must end in one)");
            else if (v[0] == '\0' || strlen(v) >= sizeof u->prefix - 64)
                broken(cfg, name, v, "a usable path");
            else
                snprintf(u->prefix, sizeof u->prefix, "%s", v);
        } else if (is_var(e, n, POOL_ENV_SM_LIMIT)) {
            any = cfg->compute = true;
            if (parse_percent(v, &cfg->sm_all) != 0)
                broken(cfg, name, v, "a percent 0..100");
        } else if (n >= sm_prefix_len && memcmp(e, POOL_ENV_SM_LIMIT_PREFIX, sm_prefix_len) == 0) {
            any = cfg->compute = true;
            int i;
            struct cudacfg_uuid *u;
            if (per_device_key(cfg, e + sm_prefix_len, n - sm_prefix_len, name, v, &i, &u) == 0 &&
                parse_percent(v, u ? &u->sm : &cfg->sm_dev[i]) != 0)
                broken(cfg, name, v, "a percent 0..100");
        } else if (is_var(e, n, POOL_ENV_TASK_PRIORITY)) {
            if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0)
                cfg->priority = v[0] - '0';
            else {
                any = true;
                broken(cfg, name, v, "0 (high) or 1 (normal)");
            }
        } else if (is_var(e, n, POOL_ENV_PRIORITY_DIR)) {
            if (v[0] == '\0' || strlen(v) >= sizeof cfg->priority_dir - 64) {
                any = true;
                broken(cfg, name, v, "a usable path");
            } else {
                any = cfg->compute = true;
                snprintf(cfg->priority_dir, sizeof cfg->priority_dir, "%s", v);
            }
        } else if (is_var(e, n, POOL_ENV_SHARED_CACHE)) {
            if (v[0] == '\0' || strlen(v) >= sizeof cfg->prefix - 64)
                broken(cfg, name, v, "a usable path");
            else
                snprintf(cfg->prefix, sizeof cfg->prefix, "%s", v);
        } else if (is_var(e, n, POOL_ENV_GPU_MEM_CONTAINER)) {
            share_units = v;
        } else if (is_var(e, n, POOL_ENV_GPU_MEM_DEV)) {
            share_of = v;
        } else if (is_var(e, n, VAR_VISIBLE)) {
            parse_visible(cfg, v);
        }
    }
    if (share_units != NULL || share_of != NULL) {
        /* Both positive: a share of 0 units would mean no limit at all for a
         * container that was given gpu-mem (D14). */
        any = true;
        if (share_units == NULL || parse_units(share_units, &cfg->share_units) != 0 ||
            cfg->share_units == 0)
            broken(
                cfg, POOL_ENV_GPU_MEM_CONTAINER, share_units ? share_units : "",
                "a positive number of units (gpushare's share needs it with " POOL_ENV_GPU_MEM_DEV
                ")");
        else if (share_of == NULL || parse_units(share_of, &cfg->share_of) != 0 ||
                 cfg->share_of == 0)
            broken(cfg, POOL_ENV_GPU_MEM_DEV, share_of ? share_of : "",
                   "a positive number of units (gpushare's share needs it "
                   "with " POOL_ENV_GPU_MEM_CONTAINER ")");
    }
    if (any && cfg->state != CUDACFG_BROKEN)
        cfg->state = CUDACFG_ON;
}

int64_t cudacfg_uuid_limit(const struct cudacfg *cfg, const char *uuid)
{
    if (cfg->state != CUDACFG_ON || uuid == NULL)
        return -1;
    for (int i = 0; i < cfg->uuid_count; i++)
        if (same_uuid(cfg->by_uuid[i].uuid, uuid))
            return cfg->by_uuid[i].limit;
    return -1;
}

const char *cudacfg_region_prefix(const struct cudacfg *cfg, const char *uuid)
{
    for (int i = 0; uuid != NULL && i < cfg->uuid_count; i++)
        if (same_uuid(cfg->by_uuid[i].uuid, uuid) && cfg->by_uuid[i].prefix[0] != '\0')
            return cfg->by_uuid[i].prefix;
    return cfg->prefix;
}

int64_t cudacfg_container_limit(const struct cudacfg *cfg, int ordinal, int64_t device_total)
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

/* The smallest limit > 0 of any container ordinal; 0 when none has one. */
static int64_t smallest_limit(const struct cudacfg *cfg, int64_t device_total)
{
    int64_t least = 0;
    for (int i = 0; i < CUDACFG_MAX_DEVICES; i++) {
        int64_t l = cudacfg_container_limit(cfg, i, device_total);
        if (l > 0 && (least == 0 || l < least))
            least = l;
    }
    return least;
}

int64_t cudacfg_limit(const struct cudacfg *cfg, int ordinal, int64_t device_total)
{
    if (cfg->state != CUDACFG_ON || ordinal < 0)
        return 0;
    if (cfg->visible_count < 0)
        return cudacfg_container_limit(cfg, ordinal, device_total);
    if (ordinal >= cfg->visible_count || cfg->visible[ordinal] == CUDACFG_VISIBLE_BY_NAME)
        return smallest_limit(cfg, device_total);
    return cudacfg_container_limit(cfg, cfg->visible[ordinal], device_total);
}

/* The container ordinal's limit: per-device wins over all-devices. */
static int container_sm(const struct cudacfg *cfg, int ordinal)
{
    int v = cfg->sm_dev[ordinal] >= 0 ? cfg->sm_dev[ordinal] : cfg->sm_all;
    return v > 0 && v < 100 ? v : 0;
}

int cudacfg_sm_limit(const struct cudacfg *cfg, int ordinal)
{
    if (cfg->state != CUDACFG_ON || ordinal < 0 || ordinal >= CUDACFG_MAX_DEVICES)
        return 0;
    if (cfg->visible_count < 0)
        return container_sm(cfg, ordinal);
    if (ordinal < cfg->visible_count && cfg->visible[ordinal] != CUDACFG_VISIBLE_BY_NAME)
        return container_sm(cfg, cfg->visible[ordinal]);
    int least = 0;
    for (int i = 0; i < CUDACFG_MAX_DEVICES; i++) {
        int l = container_sm(cfg, i);
        if (l > 0 && (least == 0 || l < least))
            least = l;
    }
    return least;
}

int cudacfg_uuid_sm_limit(const struct cudacfg *cfg, const char *uuid)
{
    if (cfg->state != CUDACFG_ON || uuid == NULL)
        return -1;
    for (int i = 0; i < cfg->uuid_count; i++)
        if (same_uuid(cfg->by_uuid[i].uuid, uuid) && cfg->by_uuid[i].sm >= 0)
            return cfg->by_uuid[i].sm > 0 && cfg->by_uuid[i].sm < 100 ? cfg->by_uuid[i].sm : 0;
    return -1;
}

bool cudacfg_high_priority(const struct cudacfg *cfg)
{
    return cfg->priority == 0;
}
