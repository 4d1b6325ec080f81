/* cuda_ledger.c -- the process's live allocations (see cuda_ledger.h). */
#include "cuda_glibc.h"
#include "cuda_ledger.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct cudaledger_entry *table; /* kind 0: empty */
static uint64_t cap, count;            /* cap: a power of two, or 0 */

static uint64_t slot_of(uint8_t kind, uint64_t handle, uint64_t mask)
{
    /* Device pointers and handles are aligned: mix the high bits down. */
    uint64_t h = (handle ^ ((uint64_t)kind << 56)) * 0x9e3779b97f4a7c15ull;
    return (h ^ (h >> 29)) & mask;
}

static uint64_t find(uint8_t kind, uint64_t handle)
{
    uint64_t mask = cap - 1;
    for (uint64_t i = slot_of(kind, handle, mask);; i = (i + 1) & mask) {
        if (table[i].kind == 0 || (table[i].kind == kind && table[i].handle == handle))
            return i;
    }
}

static int grow(void)
{
    uint64_t ncap = cap ? cap * 2 : 256;
    struct cudaledger_entry *old = table, *nt = calloc(ncap, sizeof *nt);
    if (nt == NULL)
        return -1;
    uint64_t ocap = cap;
    table = nt;
    cap = ncap;
    for (uint64_t i = 0; i < ocap; i++)
        if (old[i].kind != 0)
            table[find(old[i].kind, old[i].handle)] = old[i];
    free(old);
    return 0;
}

int cudaledger_add(const struct cudaledger_entry *e, struct cudaledger_entry *replaced)
{
    memset(replaced, 0, sizeof *replaced);
    pthread_mutex_lock(&lock);
    if ((count + 1) * 2 > cap && grow() != 0) {
        pthread_mutex_unlock(&lock);
        return -1;
    }
    uint64_t i = find(e->kind, e->handle);
    if (table[i].kind != 0)
        *replaced = table[i];
    else
        count++;
    table[i] = *e;
    pthread_mutex_unlock(&lock);
    return 0;
}

/* Removes slot i, shifting later entries of its cluster back into the hole
 * (linear probing's deletion: no tombstones). Under the lock. */
static void remove_at(uint64_t i)
{
    uint64_t mask = cap - 1;
    table[i].kind = 0;
    count--;
    for (uint64_t j = (i + 1) & mask; table[j].kind != 0; j = (j + 1) & mask) {
        uint64_t home = slot_of(table[j].kind, table[j].handle, mask);
        /* Move j back to i if its home is not in (i, j] cyclically. */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            table[i] = table[j];
            table[j].kind = 0;
            i = j;
        }
    }
}

bool cudaledger_take(enum cudaledger_kind kind, uint64_t handle, struct cudaledger_entry *out)
{
    bool found = false;
    pthread_mutex_lock(&lock);
    if (count > 0) {
        uint64_t i = find((uint8_t)kind, handle);
        if (table[i].kind != 0) {
            *out = table[i];
            remove_at(i);
            found = true;
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}

int cudaledger_update(enum cudaledger_kind kind, uint64_t handle, int drefs, int dmaps,
                      uint8_t set_flags, struct cudaledger_entry *gone)
{
    int rc = -1;
    pthread_mutex_lock(&lock);
    if (count > 0) {
        uint64_t i = find((uint8_t)kind, handle);
        if (table[i].kind != 0) {
            struct cudaledger_entry *e = &table[i];
            int64_t refs = (int64_t)e->refs + drefs, maps = (int64_t)e->maps + dmaps;
            e->refs = refs < 0 ? 0 : refs > UINT32_MAX ? UINT32_MAX : (uint32_t)refs;
            e->maps = maps < 0 ? 0 : maps > UINT16_MAX ? UINT16_MAX : (uint16_t)maps;
            e->flags |= set_flags;
            rc = 0;
            if (e->refs == 0 && e->maps == 0) {
                *gone = *e;
                remove_at(i);
                rc = 1;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

void cudaledger_take_matching(bool (*match)(const struct cudaledger_entry *, const void *),
                              const void *match_arg,
                              void (*give)(const struct cudaledger_entry *, void *), void *give_arg)
{
    pthread_mutex_lock(&lock);
    /* A removal shifts a later entry of the cluster back into slot i, and
     * may wrap one from the table's start to its end: scan until a full
     * pass takes nothing. */
    for (bool took = true; took;) {
        took = false;
        for (uint64_t i = 0; i < cap;) {
            if (table[i].kind != 0 && match(&table[i], match_arg)) {
                struct cudaledger_entry e = table[i];
                remove_at(i);
                give(&e, give_arg);
                took = true;
                continue; /* slot i now holds a shifted entry, or is empty */
            }
            i++;
        }
    }
    pthread_mutex_unlock(&lock);
}

/* Mappings and VMM handles belong to the device, not to a context (and a
 * mapping's ctx field holds its handle). */
static bool of_context(const struct cudaledger_entry *e, const void *ctx)
{
    return e->kind != LEDGER_MAPPING && e->kind != LEDGER_HANDLE &&
           e->ctx == *(const uint64_t *)ctx;
}

void cudaledger_take_context(uint64_t ctx, void (*give)(const struct cudaledger_entry *, void *),
                             void *arg)
{
    if (ctx != 0)
        cudaledger_take_matching(of_context, &ctx, give, arg);
}

uint64_t cudaledger_count(void)
{
    pthread_mutex_lock(&lock);
    uint64_t n = count;
    pthread_mutex_unlock(&lock);
    return n;
}

void cudaledger_before_fork(void)
{
    pthread_mutex_lock(&lock);
}

void cudaledger_after_fork_parent(void)
{
    pthread_mutex_unlock(&lock);
}

void cudaledger_after_fork_child(void)
{
    /* The child owns no GPU memory of its parent's. */
    if (cap > 0)
        memset(table, 0, cap * sizeof *table);
    count = 0;
    pthread_mutex_unlock(&lock);
}
