/* table.c -- intrusive string-keyed hash table (see table.h). */
#include "table.h"

#include <stdlib.h>
#include <string.h>

/* Eight bytes a step (a multiply and a shift each), then a final mix:
 * byte-wise FNV-1a was a chain of 32 dependent multiplies per node name,
 * a fifth of a 5,000-node filter. Keys are short (node names, UIDs); no
 * adversary gains from collisions beyond slowing their own scheduling. */
uint32_t table_hash(const char *key)
{
    const uint64_t k = UINT64_C(0x9e3779b97f4a7c15);
    size_t len = strlen(key);
    uint64_t h = len * k;
    for (; len >= 8; len -= 8, key += 8) {
        uint64_t w;
        memcpy(&w, key, 8);
        h = (h ^ w) * k;
        h ^= h >> 29;
    }
    uint64_t w = 0;
    memcpy(&w, key, len); /* the tail, zero-padded */
    h = (h ^ w) * k;
    h ^= h >> 32;
    h *= UINT64_C(0xd6e8feb86659fd93);
    h ^= h >> 32;
    return (uint32_t)h;
}

struct table_entry *table_find(const struct table *t, const char *key)
{
    if (t->count == 0)
        return NULL;
    uint32_t h = table_hash(key);
    size_t mask = t->size - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        const struct table_slot *s = &t->slots[i];
        if (!s->entry)
            return NULL; /* load < 1: every probe ends at an empty slot */
        if (s->hash == h && strcmp(s->entry->key, key) == 0)
            return s->entry;
    }
}

/* Places e in the first free slot of its run (no duplicate check). */
static void slot_place(struct table_slot *slots, size_t mask, struct table_entry *e)
{
    size_t i = e->hash & mask;
    while (slots[i].entry)
        i = (i + 1) & mask;
    slots[i].hash = e->hash;
    slots[i].entry = e;
}

static int table_grow(struct table *t)
{
    size_t size = t->size ? t->size * 2 : 64;
    struct table_slot *slots = calloc(size, sizeof(*slots));
    if (!slots)
        return -1;
    for (size_t i = 0; i < t->size; i++)
        if (t->slots[i].entry)
            slot_place(slots, size - 1, t->slots[i].entry);
    free(t->slots);
    t->slots = slots;
    t->size = size;
    return 0;
}

int table_insert(struct table *t, struct table_entry *e)
{
    if ((t->count + 1) * 4 > t->size * 3 && table_grow(t) < 0)
        return -1;
    e->hash = table_hash(e->key);
    slot_place(t->slots, t->size - 1, e);
    t->count++;
    return 0;
}

/* Whether home lies cyclically in (hole, j]: then the entry at j may not
 * move back into the hole (it would go before its own home slot). */
static int home_between(size_t hole, size_t home, size_t j)
{
    return hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
}

void table_remove(struct table *t, struct table_entry *e)
{
    if (t->count == 0)
        return;
    size_t mask = t->size - 1, hole = e->hash & mask;
    while (t->slots[hole].entry != e) {
        if (!t->slots[hole].entry)
            return; /* not in the table */
        hole = (hole + 1) & mask;
    }
    /* Backward shift: entries after the hole whose probe passed through it
     * move into it, so every run stays unbroken and lookups stay correct. */
    for (size_t j = (hole + 1) & mask; t->slots[j].entry; j = (j + 1) & mask) {
        if (home_between(hole, t->slots[j].hash & mask, j))
            continue;
        t->slots[hole] = t->slots[j];
        hole = j;
    }
    t->slots[hole].entry = NULL;
    t->slots[hole].hash = 0;
    t->count--;
}

static struct table_entry *table_scan(const struct table *t, size_t *slot)
{
    for (; *slot < t->size; (*slot)++)
        if (t->slots[*slot].entry)
            return t->slots[*slot].entry;
    return NULL;
}

struct table_entry *table_first(const struct table *t, size_t *slot)
{
    *slot = 0;
    return table_scan(t, slot);
}

struct table_entry *table_next(const struct table *t, size_t *slot, struct table_entry *e)
{
    (void)e; /* the position is the slot index */
    (*slot)++;
    return table_scan(t, slot);
}

/* Walks down from an empty slot e0 (there is one: load < 1). Runs never
 * cross e0, and a removal only moves entries of the current run from
 * slots after the hole into it -- slots this walk has already visited,
 * going down -- so every entry is visited exactly once. */
void table_sweep(struct table *t, table_visit_fn visit, void *ctx)
{
    if (t->count == 0)
        return;
    size_t mask = t->size - 1, e0 = 0;
    while (t->slots[e0].entry)
        e0++;
    for (size_t k = 1; k < t->size; k++) {
        struct table_entry *e = t->slots[(e0 - k) & mask].entry;
        if (e)
            visit(e, ctx);
    }
}

void table_free(struct table *t)
{
    free(t->slots);
    t->slots = NULL;
    t->size = t->count = 0;
}
