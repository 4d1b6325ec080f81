/* poolapi_index.h -- gpushare's GPU index list ("1", "0,1") <-> a mask.
 *
 * ALIYUN_COM_GPU_MEM_IDX is written by the extender at bind and read by the
 * device plugin (which GPUs a container gets), by the extender (what a
 * bound pod holds) and by the CLI (where a share is charged). One grammar
 * for all: decimal indices below POOL_MAX_GPUS, separated by single commas,
 * no blanks, no signs, none repeated, at least one. Pure, any thread. */
#ifndef GP_POOLAPI_INDEX_H
#define GP_POOLAPI_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "poolapi_names.h"

struct poolapi_index_list {
    uint32_t mask;              /* bit i: GPU i */
    unsigned count;             /* entries in gpu[] (bits set in mask) */
    uint8_t gpu[POOL_MAX_GPUS]; /* the indices in the order written */
};

/* Parses text into *out. -1 with a reason (naming POOL_ANN_GPU_MEM_IDX and
 * the text) when it breaks the grammar above; *out is then zeroed. */
int poolapi_index_parse(const char *text, struct poolapi_index_list *out, char *err,
                        size_t errlen) GP_MUST_USE;

/* Formats a mask as "0,1" (ascending) into buf; returns buf. Truncates
 * to len (a 16-GPU list needs at most 38 bytes). */
char *poolapi_index_format(uint32_t mask, char *buf, size_t len);

#endif
