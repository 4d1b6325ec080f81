/* table.h -- an intrusive hash table keyed by strings.
 *
 * The cache finds nodes by name and pods by UID in O(1). Entries embed a
 * struct table_entry and own their key; the table owns only its bucket
 * array, so removing an entry never frees it. Not thread-safe: the caller's
 * lock guards a table and its entries. Grows by doubling at load 1. */
#ifndef GP_EXTENDER_TABLE_H
#define GP_EXTENDER_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

struct table_entry {
    struct table_entry *next;
    const char *key; /* owned by the containing struct */
    uint32_t hash;
};

struct table {
    struct table_entry **buckets;
    size_t size;  /* number of buckets, a power of two (0 before the first insert) */
    size_t count;
};

#define TABLE_INIT {NULL, 0, 0}

uint32_t table_hash(const char *key);

/* The entry with this key, or NULL. */
struct table_entry *table_find(const struct table *t, const char *key);

/* Adds e (its key set, not already in a table). -1 when out of memory (the
 * table is unchanged). Duplicate keys are the caller's business. */
int table_insert(struct table *t, struct table_entry *e) GP_MUST_USE;

/* Takes e out of the table; a no-op when it is not there. */
void table_remove(struct table *t, struct table_entry *e);

/* Iteration: for (e = table_first(t, &i); e; e = table_next(t, &i, e)).
 * Removing the current entry during the walk is not allowed. */
struct table_entry *table_first(const struct table *t, size_t *bucket);
struct table_entry *table_next(const struct table *t, size_t *bucket, struct table_entry *e);

/* Frees the bucket array (not the entries). */
void table_free(struct table *t);

#define table_container(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

#endif
