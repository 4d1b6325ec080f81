/* table.h -- an intrusive hash table keyed by strings.
 *
 * The cache finds nodes by name and pods by UID in O(1). Entries embed a
 * struct table_entry and own their key; the table owns only its slot
 * array, so removing an entry never frees it. Not thread-safe: the caller's
 * lock guards a table and its entries.
 *
 * Open addressing with linear probing: each slot holds the key's hash
 * beside the entry pointer, so a probe compares hashes within one array
 * (four slots a cache line) and follows a pointer only on a hash match. A
 * filter looks up every node of the cluster; chained buckets cost a cache
 * miss per link. Grows by doubling above load 3/4; removal shifts the
 * following run back (no tombstones). */
#ifndef GP_EXTENDER_TABLE_H
#define GP_EXTENDER_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

struct table_entry {
    const char *key; /* owned by the containing struct */
    uint32_t hash;
};

struct table_slot {
    uint32_t hash;             /* entry->hash, read without touching the entry */
    struct table_entry *entry; /* NULL: empty */
};

struct table {
    struct table_slot *slots;
    size_t size; /* number of slots, a power of two (0 before the first insert) */
    size_t count;
};

/* clang-format off */
#define TABLE_INIT {NULL, 0, 0}
/* clang-format on */

uint32_t table_hash(const char *key);

/* The entry with this key, or NULL. */
struct table_entry *table_find(const struct table *t, const char *key);

/* Adds e (its key set, not already in a table). -1 when out of memory (the
 * table is unchanged). Duplicate keys are the caller's business. */
int table_insert(struct table *t, struct table_entry *e) GP_MUST_USE;

/* Takes e out of the table; a no-op when it is not there. */
void table_remove(struct table *t, struct table_entry *e);

/* Iteration: for (e = table_first(t, &i); e; e = table_next(t, &i, e)).
 * Removing or inserting during the walk is not allowed (removal moves
 * entries between slots). */
struct table_entry *table_first(const struct table *t, size_t *slot);
struct table_entry *table_next(const struct table *t, size_t *slot, struct table_entry *e);

/* Calls visit(e, ctx) once for every entry; visit may take e (and only e)
 * out of the table, e.g. to sweep stale records. */
typedef void (*table_visit_fn)(struct table_entry *e, void *ctx);
void table_sweep(struct table *t, table_visit_fn visit, void *ctx);

/* Frees the slot array (not the entries). */
void table_free(struct table *t);

/* clang-format off */
#define table_container(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))
/* clang-format on */

#endif
