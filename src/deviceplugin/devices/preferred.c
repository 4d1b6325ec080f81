/* preferred.c -- GetPreferredAllocation policies (see preferred.h). */
#include "preferred.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Exhaustive search is used while the number of candidate sets stays
 * below this; beyond it a greedy pass keeps the call fast (64+ GPUs). */
#define PREFERRED_EXHAUSTIVE_LIMIT 20000

/* Pair quality as one comparable number: NVLink links dominate, then
 * same NUMA node, then the PCIe level. */
static uint64_t pair_key(const struct gpu_inventory *inv, size_t a, size_t b)
{
    int score = gpu_link_score(inv, a, b);
    if (score < 0)
        score = 0;
    uint64_t nvlinks = (uint64_t)score / 100;
    uint64_t pcie = (uint64_t)score % 100;
    int na = inv->gpus[a].numa_node, nb = inv->gpus[b].numa_node;
    uint64_t same_numa = (na != GPU_NUMA_UNKNOWN && na == nb) ? 1 : 0;
    return (nvlinks << 40) | (same_numa << 20) | pcie;
}

struct aligned_search {
    const struct gpu_inventory *inv;
    size_t n;          /* available GPUs */
    const size_t *gpu; /* inventory position of each available device */
    uint64_t *pair;    /* n*n pair keys */
    bool *chosen;
    size_t *current; /* positions (into available) of the current set */
    size_t *best;
    uint64_t best_score;
    uint64_t best_damage;
    bool found;
};

static uint64_t set_score(const struct aligned_search *s, size_t count)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < count; i++)
        for (size_t j = i + 1; j < count; j++)
            sum += s->pair[s->current[i] * s->n + s->current[j]];
    return sum;
}

/* Links the choice cuts between chosen and still-available GPUs. */
static uint64_t set_damage(const struct aligned_search *s, size_t count)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < count; i++)
        for (size_t j = 0; j < s->n; j++)
            if (!s->chosen[j])
                sum += s->pair[s->current[i] * s->n + j];
    return sum;
}

static void consider(struct aligned_search *s, size_t count)
{
    uint64_t score = set_score(s, count);
    uint64_t damage = set_damage(s, count);
    if (!s->found || score > s->best_score || (score == s->best_score && damage < s->best_damage)) {
        memcpy(s->best, s->current, count * sizeof *s->best);
        s->best_score = score;
        s->best_damage = damage;
        s->found = true;
    }
}

static void enumerate(struct aligned_search *s, size_t start, size_t filled, size_t size)
{
    if (filled == size) {
        consider(s, size);
        return;
    }
    for (size_t i = start; i + (size - filled) <= s->n; i++) {
        if (s->chosen[i])
            continue;
        s->chosen[i] = true;
        s->current[filled] = i;
        enumerate(s, i + 1, filled + 1, size);
        s->chosen[i] = false;
    }
}

static void greedy(struct aligned_search *s, size_t filled, size_t size)
{
    while (filled < size) {
        size_t pick = SIZE_MAX;
        uint64_t pick_gain = 0;
        for (size_t i = 0; i < s->n; i++) {
            if (s->chosen[i])
                continue;
            uint64_t gain = 0;
            for (size_t k = 0; k < filled; k++)
                gain += s->pair[s->current[k] * s->n + i];
            if (pick == SIZE_MAX || gain > pick_gain) {
                pick = i;
                pick_gain = gain;
            }
        }
        s->chosen[pick] = true;
        s->current[filled++] = pick;
    }
    memcpy(s->best, s->current, size * sizeof *s->best);
    s->found = true;
}

static double combinations(size_t n, size_t k)
{
    double c = 1;
    for (size_t i = 0; i < k; i++)
        c = c * (double)(n - i) / (double)(i + 1);
    return c;
}

static int choose_aligned(const struct resource *res, const struct gpu_inventory *inv,
                          const size_t *available, size_t n, const bool *is_required,
                          size_t required_count, size_t size, size_t *out)
{
    struct aligned_search s = {.inv = inv, .n = n};
    size_t *gpu = calloc(n, sizeof *gpu);
    s.pair = calloc(n * n, sizeof *s.pair);
    s.chosen = calloc(n, sizeof *s.chosen);
    s.current = calloc(n, sizeof *s.current);
    s.best = calloc(n, sizeof *s.best);
    int rc = -1;
    if (!gpu || !s.pair || !s.chosen || !s.current || !s.best)
        goto out;
    s.gpu = gpu;
    for (size_t i = 0; i < n; i++)
        gpu[i] = res->devices[available[i]].gpu;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            s.pair[i * n + j] = i == j ? 0 : pair_key(inv, gpu[i], gpu[j]);

    size_t filled = 0;
    for (size_t i = 0; i < n; i++)
        if (is_required[i]) {
            s.chosen[i] = true;
            s.current[filled++] = i;
        }
    if (combinations(n - required_count, size - required_count) <= PREFERRED_EXHAUSTIVE_LIMIT)
        enumerate(&s, 0, filled, size);
    else
        greedy(&s, filled, size);
    for (size_t i = 0; i < size; i++)
        out[i] = available[s.best[i]];
    rc = 0;
out:
    free(gpu);
    free(s.pair);
    free(s.chosen);
    free(s.current);
    free(s.best);
    return rc;
}

/* Replicas / MIG: load per physical GPU = its devices already handed out
 * (not in `available`) plus those picked in this call. */
static int choose_shared(const struct resource *res, const struct gpu_inventory *inv,
                         enum shared_alloc_policy policy, const size_t *available, size_t n,
                         bool *taken, size_t filled, size_t size, size_t *out)
{
    size_t *load = calloc(inv->count ? inv->count : 1, sizeof *load);
    if (load == NULL)
        return -1;
    for (size_t i = 0; i < res->device_count; i++)
        load[res->devices[i].gpu]++;
    for (size_t i = 0; i < n; i++)
        load[res->devices[available[i]].gpu]--;
    for (size_t i = 0; i < filled; i++)
        load[res->devices[out[i]].gpu]++;

    while (filled < size) {
        size_t pick = SIZE_MAX;
        for (size_t i = 0; i < n; i++) {
            if (taken[i])
                continue;
            if (pick == SIZE_MAX) {
                pick = i;
                continue;
            }
            size_t li = load[res->devices[available[i]].gpu];
            size_t lp = load[res->devices[available[pick]].gpu];
            if (policy == SHARED_ALLOC_PACKED ? li > lp : li < lp)
                pick = i;
        }
        taken[pick] = true;
        out[filled++] = available[pick];
        load[res->devices[available[pick]].gpu]++;
    }
    free(load);
    return 0;
}

int preferred_choose(const struct resource *res, const struct gpu_inventory *inv,
                     enum shared_alloc_policy policy, const size_t *available,
                     size_t available_count, const size_t *required, size_t required_count,
                     size_t size, size_t *out, char *err, size_t errlen)
{
    if (size == 0 || size > available_count) {
        snprintf(err, errlen, "cannot choose %zu devices from %zu available", size,
                 available_count);
        return -1;
    }
    if (required_count > size) {
        snprintf(err, errlen, "%zu must-include devices exceed the allocation size %zu",
                 required_count, size);
        return -1;
    }
    bool *is_required = calloc(available_count, sizeof *is_required);
    if (is_required == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t filled = 0;
    for (size_t r = 0; r < required_count; r++) {
        size_t i = 0;
        while (i < available_count && available[i] != required[r])
            i++;
        if (i == available_count) {
            snprintf(err, errlen, "must-include device %s is not among the available devices",
                     res->devices[required[r]].id);
            free(is_required);
            return -1;
        }
        if (!is_required[i]) {
            is_required[i] = true;
            out[filled++] = available[i];
        }
    }

    bool aligned = !res->shared;
    for (size_t i = 0; i < available_count && aligned; i++)
        aligned = res->devices[available[i]].mig == RESOURCE_NO_MIG;
    int rc = aligned ? choose_aligned(res, inv, available, available_count, is_required, filled,
                                      size, out)
                     : choose_shared(res, inv, policy, available, available_count, is_required,
                                     filled, size, out);
    free(is_required);
    if (rc != 0)
        snprintf(err, errlen, "out of memory");
    return rc;
}
