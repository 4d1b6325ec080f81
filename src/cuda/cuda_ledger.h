/* cuda_ledger.h -- what this process allocated through the library: one
 * entry per live allocation, so a free knows how much to give back and to
 * which GPU, and a destroyed context gives back everything made in it.
 *
 * An open-addressing hash table keyed by (kind, handle), grown by doubling;
 * removal shifts entries back (no tombstones), so lookups stay short however
 * long the process churns. Threads: every call takes the ledger's own mutex.
 * Ownership: the ledger is process-local; cudaledger_after_fork empties it in
 * a child, which owns none of its parent's GPU memory. */
#ifndef GP_CUDA_LEDGER_H
#define GP_CUDA_LEDGER_H

#include <stdbool.h>
#include <stdint.h>

enum cudaledger_kind {
    LEDGER_POINTER = 1, /* cuMemAlloc*, cuMemAllocManaged, legacy cuMemAlloc */
    LEDGER_HANDLE,      /* cuMemCreate (refs, maps: alive until both are 0) */
    LEDGER_ARRAY,       /* cuArrayCreate, cuArray3DCreate */
    LEDGER_MIPMAP,      /* cuMipmappedArrayCreate */
    LEDGER_MAPPING,     /* cuMemMap: handle = address, ctx = the VMM handle mapped */
    LEDGER_CTX_LIMIT,   /* cuCtxSetLimit growth: handle = context | limit */
};

/* Flags of a LEDGER_HANDLE entry. */
#define LEDGER_EXPORTED 0x1 /* given to another process: never given back */

struct cudaledger_entry {
    uint64_t handle;
    uint64_t ctx; /* the context it belongs to; 0: outlives contexts */
    int64_t bytes;
    int32_t device;
    uint8_t kind;
    uint8_t flags;
    uint16_t maps; /* LEDGER_HANDLE: live mappings */
    uint32_t refs; /* LEDGER_HANDLE: handles not yet released */
};

/* Records an allocation. 0 on success, -1 when memory for the table itself
 * cannot be had (the caller undoes the allocation). A live entry with the
 * same key (a handle the driver reused after a free we did not see) is
 * replaced and returned in *replaced (replaced->kind 0 when none). */
int cudaledger_add(const struct cudaledger_entry *e, struct cudaledger_entry *replaced);

/* Takes the entry of (kind, handle) out: true and *out when it was there. */
bool cudaledger_take(enum cudaledger_kind kind, uint64_t handle, struct cudaledger_entry *out);

/* Changes the reference and mapping counts of (kind, handle) by drefs and
 * dmaps (never below zero), and flags |= set_flags. -1: no such entry.
 * 1: both counts reached zero, and the entry was taken out into *gone.
 * 0: otherwise (*gone untouched). */
int cudaledger_update(enum cudaledger_kind kind, uint64_t handle, int drefs, int dmaps,
                      uint8_t set_flags, struct cudaledger_entry *gone);

/* Takes out every entry for which match(entry, match_arg) is true, calling
 * give(entry, give_arg) for each (under the ledger's lock: give must not
 * call back into the ledger). */
void cudaledger_take_matching(bool (*match)(const struct cudaledger_entry *, const void *),
                              const void *match_arg,
                              void (*give)(const struct cudaledger_entry *, void *),
                              void *give_arg);

/* Takes out every entry of ctx, calling give(entry, arg) for each. */
void cudaledger_take_context(uint64_t ctx, void (*give)(const struct cudaledger_entry *, void *),
                             void *arg);

/* Entries held now (for tests and the debug log). */
uint64_t cudaledger_count(void);

/* pthread_atfork handlers: keep the table consistent across fork, and empty
 * it in the child. */
void cudaledger_before_fork(void);
void cudaledger_after_fork_parent(void);
void cudaledger_after_fork_child(void);

#endif
