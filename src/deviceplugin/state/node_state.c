/* node_state.c -- per-GPU health and observers (see node_state.h). */
#include "node_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void init_locks(struct node_state *s)
{
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->observer_lock, NULL);
}

int node_state_init(struct node_state *s, const struct gpu_inventory *inv, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    size_t n = inv->count, migs = 0;
    s->mig_first = calloc(n ? n : 1, sizeof *s->mig_first);
    for (size_t g = 0; s->mig_first != NULL && g < n; g++) {
        s->mig_first[g] = migs;
        migs += inv->gpus[g].mig_count;
    }
    s->gpu_healthy = calloc(n ? n : 1, sizeof *s->gpu_healthy);
    s->gpu_lost = calloc(n ? n : 1, sizeof *s->gpu_lost);
    s->mig_healthy = calloc(migs ? migs : 1, sizeof *s->mig_healthy);
    if (s->mig_first == NULL || s->gpu_healthy == NULL || s->gpu_lost == NULL ||
        s->mig_healthy == NULL) {
        node_state_free(s);
        snprintf(err, errlen, "out of memory setting up the state of %zu GPUs", n);
        return -1;
    }
    for (size_t g = 0; g < n; g++) {
        bool lost = inv->gpus[g].lost;
        s->gpu_lost[g] = lost;
        s->gpu_healthy[g] = !lost;
        for (size_t m = 0; m < inv->gpus[g].mig_count; m++)
            s->mig_healthy[s->mig_first[g] + m] = !lost;
    }
    s->inv = inv;
    s->generation = 1;
    init_locks(s);
    return 0;
}

void node_state_free(struct node_state *s)
{
    bool had_locks = s->inv != NULL;
    free(s->gpu_healthy);
    free(s->mig_healthy);
    free(s->mig_first);
    free(s->gpu_lost);
    if (had_locks) {
        pthread_mutex_destroy(&s->lock);
        pthread_mutex_destroy(&s->observer_lock);
    }
    memset(s, 0, sizeof *s);
}

void node_state_move(struct node_state *to, struct node_state *from)
{
    /* Mutexes are not copied (POSIX leaves a copy undefined): fresh ones
     * here, the old ones destroyed. */
    *to = (struct node_state){
        .inv = from->inv,
        .gpu_healthy = from->gpu_healthy,
        .mig_healthy = from->mig_healthy,
        .mig_first = from->mig_first,
        .gpu_lost = from->gpu_lost,
        .generation = from->generation,
    };
    if (to->inv != NULL) {
        init_locks(to);
        pthread_mutex_destroy(&from->lock);
        pthread_mutex_destroy(&from->observer_lock);
    }
    memset(from, 0, sizeof *from);
}

/* Sets one record; counts it when it changed. */
static void set_one(bool *record, bool healthy, size_t *changed)
{
    if (*record == healthy)
        return;
    *record = healthy;
    (*changed)++;
}

/* The rule of node_state.h for one GPU; lock held. */
static size_t apply(struct node_state *s, size_t gpu, int mig, bool healthy)
{
    const struct gpu_device *g = &s->inv->gpus[gpu];
    bool *migs = &s->mig_healthy[s->mig_first[gpu]];
    size_t changed = 0;
    set_one(&s->gpu_healthy[gpu], healthy, &changed);
    for (size_t m = 0; m < g->mig_count; m++)
        if (mig == NODE_STATE_WHOLE_GPU || (size_t)mig == m)
            set_one(&migs[m], healthy, &changed);
    return changed;
}

static size_t set_health(struct node_state *s, size_t gpu, int mig, bool healthy)
{
    if (s->inv == NULL)
        return 0;
    if (gpu != NODE_STATE_ALL_GPUS &&
        (gpu >= s->inv->count ||
         (mig != NODE_STATE_WHOLE_GPU && (mig < 0 || (size_t)mig >= s->inv->gpus[gpu].mig_count))))
        return 0;
    /* observer_lock first: the next change waits until this one is told,
     * so observers hear of changes in the order they were made. */
    pthread_mutex_lock(&s->observer_lock);
    pthread_mutex_lock(&s->lock);
    size_t changed = 0;
    if (gpu == NODE_STATE_ALL_GPUS)
        for (size_t g = 0; g < s->inv->count; g++)
            changed += apply(s, g, NODE_STATE_WHOLE_GPU, healthy);
    else
        changed = apply(s, gpu, mig, healthy);
    if (changed > 0)
        s->generation++;
    struct node_state_change change = {.gpu = gpu,
                                       .mig = mig,
                                       .healthy = healthy,
                                       .changed = changed,
                                       .generation = s->generation};
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; changed > 0 && i < s->observer_count; i++)
        s->observers[i].fn(s->observers[i].ctx, &change);
    pthread_mutex_unlock(&s->observer_lock);
    return changed;
}

size_t node_state_set_gpu_health(struct node_state *s, size_t gpu, bool healthy)
{
    return set_health(s, gpu, NODE_STATE_WHOLE_GPU, healthy);
}

size_t node_state_set_mig_health(struct node_state *s, size_t gpu, int mig, bool healthy)
{
    return set_health(s, gpu, mig, healthy);
}

size_t node_state_set_all_health(struct node_state *s, bool healthy)
{
    return set_health(s, NODE_STATE_ALL_GPUS, NODE_STATE_WHOLE_GPU, healthy);
}

void node_state_set_gpu_lost(struct node_state *s, size_t gpu)
{
    if (s->inv == NULL)
        return;
    pthread_mutex_lock(&s->lock);
    if (gpu < s->inv->count)
        s->gpu_lost[gpu] = true;
    pthread_mutex_unlock(&s->lock);
}

/* ---- readers ------------------------------------------------------------------------ */

bool node_state_gpu_lost(struct node_state *s, size_t gpu)
{
    if (s->inv == NULL)
        return false;
    pthread_mutex_lock(&s->lock);
    bool lost = gpu < s->inv->count && s->gpu_lost[gpu];
    pthread_mutex_unlock(&s->lock);
    return lost;
}

bool node_state_healthy(struct node_state *s, size_t gpu, int mig)
{
    if (s->inv == NULL || gpu >= s->inv->count)
        return false;
    bool healthy = false;
    pthread_mutex_lock(&s->lock);
    if (mig == NODE_STATE_WHOLE_GPU)
        healthy = s->gpu_healthy[gpu];
    else if (mig >= 0 && (size_t)mig < s->inv->gpus[gpu].mig_count)
        healthy = s->mig_healthy[s->mig_first[gpu] + (size_t)mig];
    pthread_mutex_unlock(&s->lock);
    return healthy;
}

void node_state_gpus(struct node_state *s, struct node_gpu_state *states, size_t n)
{
    if (s->inv == NULL)
        return;
    if (n > s->inv->count)
        n = s->inv->count;
    pthread_mutex_lock(&s->lock);
    for (size_t g = 0; g < n; g++) {
        bool healthy = !s->gpu_lost[g] && s->gpu_healthy[g];
        for (size_t m = 0; m < s->inv->gpus[g].mig_count; m++)
            healthy = healthy && s->mig_healthy[s->mig_first[g] + m];
        states[g] = (struct node_gpu_state){.lost = s->gpu_lost[g], .healthy = healthy};
    }
    pthread_mutex_unlock(&s->lock);
}

uint64_t node_state_generation(struct node_state *s)
{
    if (s->inv == NULL)
        return 0;
    pthread_mutex_lock(&s->lock);
    uint64_t generation = s->generation;
    pthread_mutex_unlock(&s->lock);
    return generation;
}

/* ---- observers ---------------------------------------------------------------------- */

int node_state_add_observer(struct node_state *s, void *ctx, node_state_fn fn)
{
    int rc = -1;
    pthread_mutex_lock(&s->observer_lock);
    if (s->observer_count < NODE_STATE_MAX_OBSERVERS) {
        s->observers[s->observer_count++] = (struct node_state_observer){ctx, fn};
        rc = 0;
    }
    pthread_mutex_unlock(&s->observer_lock);
    return rc;
}

void node_state_remove_observer(struct node_state *s, void *ctx, node_state_fn fn)
{
    pthread_mutex_lock(&s->observer_lock);
    size_t k = 0;
    for (size_t i = 0; i < s->observer_count; i++)
        if (s->observers[i].ctx != ctx || s->observers[i].fn != fn)
            s->observers[k++] = s->observers[i];
    s->observer_count = k;
    pthread_mutex_unlock(&s->observer_lock);
}
