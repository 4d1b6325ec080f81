/* poolapi_unit.h -- the unit of aliyun.com/gpu-mem: GiB or MiB of one GPU.
 *
 * The device plugin advertises one device per unit; the extender and the
 * CLI must read the same numbers in the same unit. Header-only, pure, no
 * dependency beyond <stdint.h>/<stdbool.h> (includable by the CUDA library). */
#ifndef GP_POOLAPI_UNIT_H
#define GP_POOLAPI_UNIT_H

#include <stdbool.h>
#include <stdint.h>

enum pool_mem_unit { POOL_UNIT_GIB, POOL_UNIT_MIB };

/* log2 of the bytes in one unit: 30 or 20. */
static inline unsigned poolapi_unit_shift(enum pool_mem_unit unit)
{
    return unit == POOL_UNIT_MIB ? 20 : 30;
}

static inline uint64_t poolapi_unit_bytes(enum pool_mem_unit unit)
{
    return (uint64_t)1 << poolapi_unit_shift(unit);
}

/* Whole units in `bytes`, truncated (gpushare's rule). */
static inline uint64_t poolapi_unit_from_bytes(uint64_t bytes, enum pool_mem_unit unit)
{
    return bytes >> poolapi_unit_shift(unit);
}

static inline const char *poolapi_unit_name(enum pool_mem_unit unit)
{
    return unit == POOL_UNIT_MIB ? "MiB" : "GiB";
}

/* The unit of a node whose unit was not published: gpushare's CLI
 * heuristic, MiB when its largest GPU has more than 100 units. */
static inline enum pool_mem_unit poolapi_unit_guess(int64_t largest_gpu_units)
{
    return largest_gpu_units > 100 ? POOL_UNIT_MIB : POOL_UNIT_GIB;
}

#endif
