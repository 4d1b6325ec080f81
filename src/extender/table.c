/* table.c -- intrusive string-keyed hash table (see table.h). */
#include "table.h"

#include <stdlib.h>
#include <string.h>

/* FNV-1a: short keys (node names, UIDs), no adversary who benefits from
 * collisions beyond slowing their own scheduling. */
uint32_t table_hash(const char *key)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

struct table_entry *table_find(const struct table *t, const char *key)
{
    if (t->size == 0)
        return NULL;
    uint32_t h = table_hash(key);
    for (struct table_entry *e = t->buckets[h & (t->size - 1)]; e; e = e->next)
        if (e->hash == h && strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

static int table_grow(struct table *t)
{
    size_t size = t->size ? t->size * 2 : 64;
    struct table_entry **buckets = calloc(size, sizeof(*buckets));
    if (!buckets)
        return -1;
    for (size_t i = 0; i < t->size; i++) {
        struct table_entry *e = t->buckets[i], *next;
        for (; e; e = next) {
            next = e->next;
            e->next = buckets[e->hash & (size - 1)];
            buckets[e->hash & (size - 1)] = e;
        }
    }
    free(t->buckets);
    t->buckets = buckets;
    t->size = size;
    return 0;
}

int table_insert(struct table *t, struct table_entry *e)
{
    if (t->count >= t->size && table_grow(t) < 0)
        return -1;
    e->hash = table_hash(e->key);
    struct table_entry **head = &t->buckets[e->hash & (t->size - 1)];
    e->next = *head;
    *head = e;
    t->count++;
    return 0;
}

void table_remove(struct table *t, struct table_entry *e)
{
    if (t->size == 0)
        return;
    for (struct table_entry **p = &t->buckets[e->hash & (t->size - 1)]; *p; p = &(*p)->next) {
        if (*p == e) {
            *p = e->next;
            e->next = NULL;
            t->count--;
            return;
        }
    }
}

struct table_entry *table_first(const struct table *t, size_t *bucket)
{
    for (*bucket = 0; *bucket < t->size; (*bucket)++)
        if (t->buckets[*bucket])
            return t->buckets[*bucket];
    return NULL;
}

struct table_entry *table_next(const struct table *t, size_t *bucket, struct table_entry *e)
{
    if (e->next)
        return e->next;
    for ((*bucket)++; *bucket < t->size; (*bucket)++)
        if (t->buckets[*bucket])
            return t->buckets[*bucket];
    return NULL;
}

void table_free(struct table *t)
{
    free(t->buckets);
    t->buckets = NULL;
    t->size = t->count = 0;
}
