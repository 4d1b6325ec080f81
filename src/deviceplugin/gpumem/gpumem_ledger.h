/* gpumem_ledger.h -- how many Allocate calls of each pod were answered.
 *
 * The durable half of gpu-mem pod identity (docs/gpumem.md): the count of
 * a pod's answered Allocate calls is written here BEFORE the reply leaves,
 * so a plugin restarted between two containers of a pod (or between an
 * init container and an app container, which the kubelet's PodResources
 * List never shows) continues where it stopped. One small file per pod UID
 * under <state dir>/gpumem/, replaced atomically (write + rename): a
 * process crash leaves the old or the new count, never a torn one.
 *
 * Owner: the caller of gpumem_ledger_open(); not thread-safe (the
 * allocator thread is its only user). Errors: -1 + err. */
#ifndef GP_GPUMEM_LEDGER_H
#define GP_GPUMEM_LEDGER_H

#include <stdbool.h>
#include <stddef.h>

#include "compiler.h"

struct gpumem_ledger;

/* Creates <dir>/gpumem if needed and loads every entry. Entries that are
 * not regular files (symlinks, FIFOs, ...) or do not hold a plain decimal
 * count are skipped with a warning; this never blocks. */
GP_MUST_USE int gpumem_ledger_open(const char *dir, struct gpumem_ledger **out, char *err,
                                   size_t errlen);
void gpumem_ledger_close(struct gpumem_ledger *l);

/* Answered calls of pod uid (0 when unknown). */
unsigned gpumem_ledger_get(const struct gpumem_ledger *l, const char *uid);
/* Records `calls` for uid, in memory and on disk. 0 when both;
 * GPUMEM_LEDGER_UNSAVED (err says why: a full disk, a read-only directory)
 * when only in memory: the old file stands, whole, and the entry is kept
 * for gpumem_ledger_flush(); -1 (nothing recorded) for an invalid UID or
 * out of memory. */
#define GPUMEM_LEDGER_UNSAVED (-2)
GP_MUST_USE int gpumem_ledger_set(struct gpumem_ledger *l, const char *uid, unsigned calls,
                                  char *err, size_t errlen);
/* Writes the entries whose last set was unsaved; returns how many are
 * still unsaved (err: the last failure). */
size_t gpumem_ledger_flush(struct gpumem_ledger *l, char *err, size_t errlen);

/* Drops every entry for which keep(ctx, uid) is false (pods gone from the
 * API). Returns how many were dropped. */
size_t gpumem_ledger_prune(struct gpumem_ledger *l, bool (*keep)(void *ctx, const char *uid),
                           void *ctx);
size_t gpumem_ledger_count(const struct gpumem_ledger *l);
/* The UID of entry i < gpumem_ledger_count(). */
const char *gpumem_ledger_uid(const struct gpumem_ledger *l, size_t i);

#endif
