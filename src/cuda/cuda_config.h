/* cuda_config.h -- what libgpupool-cuda enforces, read from the container's
 * environment once per process (docs/isolation.md has the variables).
 *
 * Pure: no I/O beyond reading the array it is given, no allocation, no
 * locks. Used by the library's constructor and by the tests and fuzz target
 * with environments of their own. */
#ifndef GP_CUDA_CONFIG_H
#define GP_CUDA_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#define CUDACFG_MAX_DEVICES 64
#define CUDACFG_DEFAULT_PREFIX "/tmp/gpupool-cuda"

enum cudacfg_state {
    CUDACFG_OFF,    /* no limit variable at all: pure pass-through */
    CUDACFG_ON,     /* limits to enforce */
    CUDACFG_BROKEN, /* a limit was asked for but cannot be understood: refuse CUDA */
};

struct cudacfg {
    enum cudacfg_state state;
    int64_t all;                      /* CUDA_DEVICE_MEMORY_LIMIT; -1 unset, 0 none */
    int64_t dev[CUDACFG_MAX_DEVICES]; /* CUDA_DEVICE_MEMORY_LIMIT_<i>; -1 unset */
    uint64_t share_units, share_of;   /* gpushare's CONTAINER / DEV, share_of 0: unset */
    char prefix[1024];                /* CUDA_DEVICE_MEMORY_SHARED_CACHE */
    char why[320];                    /* when BROKEN: the one message for stderr */
};

/* Parses "1073741824", "1g", "1024m", "1048576k", "2t" (1024-based, either
 * case, an optional "i" and/or "b" after the letter: "1GiB") into bytes.
 * 0 on success, -1 on anything else (empty, sign, junk, overflow). */
int cudacfg_parse_size(const char *s, int64_t *bytes);

/* Reads the limit variables from env (NULL-terminated "NAME=value" strings,
 * like environ; NULL means none). Never fails: a bad value makes the state
 * CUDACFG_BROKEN with the reason in why. */
void cudacfg_load(struct cudacfg *cfg, char *const *env);

/* The limit of CUDA ordinal `ordinal` whose memory is device_total bytes:
 * > 0 bytes to enforce, 0 for none. A per-device variable wins over the
 * all-devices one, which wins over gpushare's share. */
int64_t cudacfg_limit(const struct cudacfg *cfg, int ordinal, int64_t device_total);

#endif
