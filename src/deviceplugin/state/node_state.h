/* node_state.h -- the health of the node's GPUs, in no protocol.
 *
 * One record per inventory GPU and per MIG device of it: healthy or not,
 * and per GPU whether it is lost (fallen off the bus, or never identified
 * by NVML). Whoever serves the GPUs (the DevicePlugin node, a DRA driver)
 * reads it and registers as an observer to hear of changes; health
 * monitoring (observe/health.c) writes it. Keys are inventory positions:
 * GPU `gpu` (inv->gpus[gpu]) and its MIG device `mig` (gpus[gpu].migs[mig]),
 * NODE_STATE_WHOLE_GPU for the GPU itself.
 *
 * The rule a change follows: a GPU's change reaches the GPU and all of its
 * MIG devices; a MIG device's change reaches that MIG device and the GPU
 * itself (the whole GPU contains the failed instance); an all-GPUs change
 * reaches everything.
 *
 * Owner: struct node_state is embedded by its owner (node_state_init /
 * node_state_free); the inventory is borrowed and must outlive it.
 * Observers are borrowed registrations: their owner unregisters before it
 * frees the context.
 *
 * Threads: any. `lock` guards the records and the generation; it is never
 * held while observers run. `observer_lock` serializes changes with their
 * notifications: observers hear of changes one at a time, in the order
 * they were made, so an observer may apply a change's rule to its own
 * copy. Observers run with observer_lock held: they must not change the
 * state nor register or unregister. Lock order: observer_lock -> lock. */
#ifndef GP_NODE_STATE_H
#define GP_NODE_STATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "gpu.h"

#define NODE_STATE_ALL_GPUS ((size_t)-1)
#define NODE_STATE_WHOLE_GPU (-1)
/* Observers a state holds. */
#define NODE_STATE_MAX_OBSERVERS 8

/* One change as it was asked for (see the rule above). */
struct node_state_change {
    size_t gpu;          /* NODE_STATE_ALL_GPUS: every GPU */
    int mig;             /* NODE_STATE_WHOLE_GPU: the GPU's change */
    bool healthy;        /* the new health */
    size_t changed;      /* GPU and MIG records whose health changed (> 0) */
    uint64_t generation; /* the state's generation after the change */
};

typedef void (*node_state_fn)(void *ctx, const struct node_state_change *change);

struct node_state_observer {
    void *ctx;
    node_state_fn fn;
};

/* What one inventory GPU looks like now. */
struct node_gpu_state {
    bool lost;    /* fallen off the bus, or never identified */
    bool healthy; /* not lost, and the GPU and every MIG device of it healthy */
};

/* Fields are node_state.c's; read them through the functions below. */
struct node_state {
    pthread_mutex_t lock;          /* the records, generation */
    pthread_mutex_t observer_lock; /* observers; held while they run */
    const struct gpu_inventory *inv;
    bool *gpu_healthy; /* [gpu] */
    bool *mig_healthy; /* [mig_first[gpu] + mig] */
    size_t *mig_first; /* [gpu] */
    bool *gpu_lost;    /* [gpu] */
    uint64_t generation;
    struct node_state_observer observers[NODE_STATE_MAX_OBSERVERS];
    size_t observer_count;
};

/* Every record healthy but those of GPUs the inventory marks lost (lost
 * and unhealthy from the start). -1 + err when out of memory. */
GP_MUST_USE int node_state_init(struct node_state *s, const struct gpu_inventory *inv, char *err,
                                size_t errlen);
/* Frees what init allocated; a zeroed or moved-from state is fine. */
void node_state_free(struct node_state *s);
/* Moves the records of a state nobody uses yet (no thread, no observer
 * called) into *to; observers are not carried (their contexts may point
 * into the old home: register again). *from is left empty. */
void node_state_move(struct node_state *to, struct node_state *from);

/* Changes health by the rule above and, when any record changed, bumps the
 * generation and tells the observers in registration order. Returns the
 * number of records (GPU or MIG) whose health changed. Out-of-range
 * positions change nothing. Never from an observer. */
size_t node_state_set_gpu_health(struct node_state *s, size_t gpu, bool healthy);
size_t node_state_set_mig_health(struct node_state *s, size_t gpu, int mig, bool healthy);
size_t node_state_set_all_health(struct node_state *s, bool healthy);

/* GPU `gpu` fell off the bus; it stays lost (no observer call: health is
 * set separately). */
void node_state_set_gpu_lost(struct node_state *s, size_t gpu);

/* ---- readers (locked, any thread, observers included) --------------------------- */

/* False outside the inventory. */
bool node_state_gpu_lost(struct node_state *s, size_t gpu);
/* The record (gpu, mig) healthy now; false outside the inventory. */
bool node_state_healthy(struct node_state *s, size_t gpu, int mig);
/* states[g] for the first n inventory GPUs, read at one instant. */
void node_state_gpus(struct node_state *s, struct node_gpu_state *states, size_t n);
/* Bumped by every change that changed a record (starts at 1). */
uint64_t node_state_generation(struct node_state *s);

/* ---- observers (main thread, before serving / after stopping) ------------------- */

/* -1 when NODE_STATE_MAX_OBSERVERS are registered already. */
GP_MUST_USE int node_state_add_observer(struct node_state *s, void *ctx, node_state_fn fn);
/* Removing what is not registered does nothing; waits for a call in progress. */
void node_state_remove_observer(struct node_state *s, void *ctx, node_state_fn fn);

#endif
