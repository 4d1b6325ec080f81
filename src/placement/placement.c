/* placement.c -- feasibility, GPU choice and node scores (see placement.h).
 *
 * The gpupool policy is FGD's idea (Weng et al., ATC '23) reworked for an
 * online scheduler:
 *   - a node's fragmentation is the expected amount of its free GPU units
 *     that the next pod cannot use, the expectation taken over the pod
 *     shapes observed so far (placement_stats_observe), not a mix known in
 *     advance;
 *   - a pod goes where that expectation grows least, with exact (float)
 *     deltas rather than FGD's truncated sigmoid, so ties are rare, and the
 *     remaining ties go to the fullest node (best fit) instead of to chance;
 *   - a class "fits" a node only with room for the CPU and memory of its
 *     least demanding pod too, and the units a node cannot fill for lack of
 *     CPU or memory (at the workload's CPU and memory per GPU unit) count as
 *     fragmentation, so CPU-heavy pods go where CPU is plentiful relative
 *     to GPUs;
 *   - scoring a node costs O(classes x distinct GPU states) plus a sort of
 *     its GPUs: each class's view of the GPUs is computed once per node and
 *     updated for the GPUs a candidate placement changes (see frag_eval).
 * docs/placement.md has the measurements behind each choice. */
#include "placement.h"

#include <stdio.h>
#include <string.h>

/* ---- models and policies ------------------------------------------------ */

void placement_ctx_init(struct placement_ctx *ctx)
{
    memset(ctx, 0, sizeof(*ctx));
}

int placement_model_id(struct placement_ctx *ctx, const char *name)
{
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len >= PLACEMENT_MODEL_LEN)
        return -1;
    for (uint32_t i = 0; i < ctx->model_count; i++)
        if (strcmp(ctx->model_names[i], name) == 0)
            return (int)i;
    if (ctx->model_count >= PLACEMENT_MAX_MODELS)
        return -1;
    memcpy(ctx->model_names[ctx->model_count], name, len + 1);
    return (int)ctx->model_count++;
}

const char *placement_model_name(const struct placement_ctx *ctx, int id)
{
    if (id < 0 || (uint32_t)id >= ctx->model_count)
        return NULL;
    return ctx->model_names[id];
}

int placement_request_allow_model(struct placement_ctx *ctx, struct placement_request *req,
                                  const char *name)
{
    int id = placement_model_id(ctx, name);
    if (id < 0)
        return -1;
    req->models |= UINT64_C(1) << id;
    return 0;
}

static const char *const policy_names[] = {
    [PLACEMENT_GPUPOOL] = "gpupool",
    [PLACEMENT_BINPACK] = "binpack",
    [PLACEMENT_SPREAD] = "spread",
};

int placement_policy_parse(const char *name, enum placement_policy *out)
{
    if (!name)
        return -1;
    if (strcmp(name, "default") == 0) {
        *out = PLACEMENT_GPUPOOL;
        return 0;
    }
    for (size_t i = 0; i < sizeof(policy_names) / sizeof(policy_names[0]); i++) {
        if (strcmp(name, policy_names[i]) == 0) {
            *out = (enum placement_policy)i;
            return 0;
        }
    }
    return -1;
}

const char *placement_policy_name(enum placement_policy policy)
{
    if ((size_t)policy >= sizeof(policy_names) / sizeof(policy_names[0]))
        return "unknown";
    return policy_names[policy];
}

/* ---- feasibility -------------------------------------------------------- */

static bool gpu_healthy(const struct placement_node *node, uint32_t gpu)
{
    return gpu < node->gpu_count && gpu < PLACEMENT_MAX_GPUS && !(node->unhealthy & (1u << gpu));
}

uint64_t placement_gpu_free(const struct placement_node *node, uint32_t gpu)
{
    if (!gpu_healthy(node, gpu) || node->gpu_used[gpu] >= node->gpu_total[gpu])
        return 0;
    return node->gpu_total[gpu] - node->gpu_used[gpu];
}

uint32_t placement_gpu_cores_free(const struct placement_node *node, uint32_t gpu)
{
    if (!gpu_healthy(node, gpu) || node->cores_used[gpu] >= node->cores_total[gpu])
        return 0;
    return node->cores_total[gpu] - node->cores_used[gpu];
}

/* Left over of a NodeResourcesFit resource; 0 when already over-committed. */
static uint64_t left_of(uint64_t allocatable, uint64_t requested)
{
    return requested >= allocatable ? 0 : allocatable - requested;
}

static bool model_allowed(const struct placement_node *node, uint64_t models)
{
    if (models == 0)
        return true;
    if (node->model < 0 || node->model >= PLACEMENT_MAX_MODELS)
        return false;
    return (models >> node->model) & 1;
}

/* What one GPU has, or what a request asks of one GPU: units and cores. */
struct gpu_amount {
    uint64_t units;
    uint32_t cores;
};

/* Whether one GPU, with `free` out of `total`, can give a request of the
 * given shape its share: whole, untouched in both dimensions; a share, room
 * for its units and its cores. */
static bool gpu_usable(struct gpu_amount free, struct gpu_amount total, bool whole,
                       struct gpu_amount ask)
{
    /* & rather than &&: this runs for every class of every candidate, and
     * branch-free tests of both dimensions cost less than two branches. */
    if (whole)
        return (total.units > 0) & (free.units == total.units) & (free.cores == total.cores);
    return (ask.units > 0) & (free.units >= ask.units) & (free.cores >= ask.cores);
}

static struct gpu_amount node_gpu_free(const struct placement_node *node, uint32_t gpu)
{
    return (struct gpu_amount){placement_gpu_free(node, gpu), placement_gpu_cores_free(node, gpu)};
}

static struct gpu_amount node_gpu_total(const struct placement_node *node, uint32_t gpu)
{
    return (struct gpu_amount){node->gpu_total[gpu], node->cores_total[gpu]};
}

static struct gpu_amount request_ask(const struct placement_request *req)
{
    return (struct gpu_amount){req->units, req->cores};
}

/* gpu_usable() for GPU g (< node_gpus) of a node, read straight from the
 * node: this runs for every GPU of every node a request is checked on. */
static bool node_gpu_usable(const struct placement_node *node, uint32_t g,
                            const struct placement_request *req)
{
    if (node->unhealthy & (1u << g))
        return false;
    uint64_t total = node->gpu_total[g], used = node->gpu_used[g];
    uint32_t cores_total = node->cores_total[g], cores_used = node->cores_used[g];
    if (req->whole)
        return total > 0 && used == 0 && (cores_used == 0 || cores_total == 0);
    return req->units > 0 && used < total && total - used >= req->units &&
           (req->cores == 0 ||
            (cores_used < cores_total && cores_total - cores_used >= req->cores));
}

static bool host_fits(const struct placement_node *node, const struct placement_request *req)
{
    return req->cpu <= left_of(node->cpu_allocatable, node->cpu_requested) &&
           req->memory <= left_of(node->memory_allocatable, node->memory_requested) &&
           model_allowed(node, req->models);
}

static uint32_t node_gpus(const struct placement_node *node)
{
    return node->gpu_count < PLACEMENT_MAX_GPUS ? node->gpu_count : PLACEMENT_MAX_GPUS;
}

bool placement_fits(const struct placement_node *node, const struct placement_request *req)
{
    if (!host_fits(node, req))
        return false;
    if (req->gpu_count == 0)
        return true;
    if (req->gpu_count > node_gpus(node))
        return false;
    uint32_t usable = 0;
    for (uint32_t g = 0; g < node_gpus(node); g++)
        if (node_gpu_usable(node, g, req))
            usable++;
    return usable >= req->gpu_count;
}

/* ---- GPU choice helpers ------------------------------------------------- */

/* Picks req->gpu_count usable GPUs: the ones with the least free units
 * (best fit; `most_free` reverses it), ties to the lowest index. */
static void choose_by_free(const struct placement_node *node, const struct placement_request *req,
                           bool most_free, struct placement_choice *choice)
{
    bool taken[PLACEMENT_MAX_GPUS] = {false};
    choice->count = 0;
    for (uint32_t k = 0; k < req->gpu_count; k++) {
        int best = -1;
        uint64_t best_free = 0;
        for (uint32_t g = 0; g < node_gpus(node); g++) {
            if (taken[g] || !node_gpu_usable(node, g, req))
                continue;
            uint64_t free = placement_gpu_free(node, g);
            if (best < 0 || (most_free ? free > best_free : free < best_free)) {
                best = (int)g;
                best_free = free;
            }
        }
        taken[best] = true; /* placement_fits() guaranteed enough */
        choice->gpu[k] = (uint8_t)best;
        choice->units[k] = req->whole ? node->gpu_total[best] : req->units;
        choice->cores[k] = req->whole ? node->cores_total[best] : req->cores;
        choice->count++;
    }
}

static uint64_t node_gpu_free_total(const struct placement_node *node)
{
    uint64_t sum = 0;
    for (uint32_t g = 0; g < node_gpus(node); g++)
        sum += placement_gpu_free(node, g);
    return sum;
}

static uint64_t node_gpu_capacity(const struct placement_node *node)
{
    uint64_t sum = 0;
    for (uint32_t g = 0; g < node_gpus(node); g++)
        if (gpu_healthy(node, g))
            sum += node->gpu_total[g];
    return sum;
}

static uint64_t choice_units(const struct placement_choice *choice)
{
    uint64_t sum = 0;
    for (uint32_t k = 0; k < choice->count; k++)
        sum += choice->units[k];
    return sum;
}

/* How full the node would be after the placement, 0 (empty) .. 1 (full):
 * the mean of the GPU and CPU fractions in use, the FGD artifact's best-fit
 * measure made relative to the node's own size. */
static double fullness_after(const struct placement_node *node, const struct placement_request *req,
                             const struct placement_choice *choice)
{
    double gpu_part = 0.0, cpu_part = 0.0;
    uint64_t capacity = node_gpu_capacity(node);
    if (capacity > 0) {
        uint64_t free = node_gpu_free_total(node) - choice_units(choice);
        gpu_part = 1.0 - (double)free / (double)capacity;
    }
    if (node->cpu_allocatable > 0) {
        uint64_t left = left_of(node->cpu_allocatable, node->cpu_requested) - req->cpu;
        cpu_part = 1.0 - (double)left / (double)node->cpu_allocatable;
    }
    return 0.5 * gpu_part + 0.5 * cpu_part;
}

/* ---- the gpupool policy: expected fragmentation ------------------------- */

/* A node's state as the fragmentation measure needs it. */
struct frag_state {
    uint32_t gpus;
    uint64_t free[PLACEMENT_MAX_GPUS];        /* 0 for unhealthy GPUs */
    uint64_t total[PLACEMENT_MAX_GPUS];       /* 0 for unhealthy GPUs */
    uint32_t cores_free[PLACEMENT_MAX_GPUS];  /* 0 for unhealthy GPUs */
    uint32_t cores_total[PLACEMENT_MAX_GPUS]; /* 0 for unhealthy GPUs */
    uint64_t free_sum;
    uint64_t cpu_left, memory_left;
    int32_t model;
};

static struct gpu_amount st_free(const struct frag_state *st, uint32_t g)
{
    return (struct gpu_amount){st->free[g], st->cores_free[g]};
}

static struct gpu_amount st_total(const struct frag_state *st, uint32_t g)
{
    return (struct gpu_amount){st->total[g], st->cores_total[g]};
}

static struct gpu_amount class_ask(const struct placement_class *c)
{
    return (struct gpu_amount){c->units, c->cores};
}

static void frag_state_of(const struct placement_node *node, struct frag_state *st)
{
    st->gpus = node_gpus(node);
    st->free_sum = 0;
    for (uint32_t g = 0; g < st->gpus; g++) {
        if (node->unhealthy & (1u << g)) {
            st->free[g] = st->total[g] = 0;
            st->cores_free[g] = st->cores_total[g] = 0;
            continue;
        }
        uint64_t total = node->gpu_total[g], used = node->gpu_used[g];
        uint32_t cores_total = node->cores_total[g], cores_used = node->cores_used[g];
        st->total[g] = total;
        st->free[g] = used >= total ? 0 : total - used;
        st->cores_total[g] = cores_total;
        st->cores_free[g] = cores_used >= cores_total ? 0 : cores_total - cores_used;
        st->free_sum += st->free[g];
    }
    st->cpu_left = left_of(node->cpu_allocatable, node->cpu_requested);
    st->memory_left = left_of(node->memory_allocatable, node->memory_requested);
    st->model = node->model;
}

/* What one class sees of a node's GPUs: how many GPUs could give it its
 * share, and the free units on the others. Kept per class so that the
 * state after a candidate placement, which changes one or a few GPUs, is
 * derived in O(classes) instead of O(GPUs x classes). */
struct class_view {
    uint32_t usable;
    uint64_t stranded;
};

/* The per-node part of a score: the state before the pod, and for each
 * class whether it can still be placed there at all (model, CPU, memory)
 * once the pod is, and its view of the GPUs before the pod. A class that
 * does not fit before the pod cannot fit after it (the pod only takes
 * resources), so its view is never computed. */
struct frag_eval {
    struct frag_state before;
    uint64_t host_ok_after; /* bit i: class i passes model, CPU and memory once
                              * the pod's CPU and memory are taken */
    struct class_view view[PLACEMENT_MAX_CLASSES];
};

/* Whether a node of `model` with cpu_left and memory_left could host a pod
 * of class c. The least demanding pod seen of the class is the test, not
 * the mean one: with more demand than capacity (the case where placement
 * matters), free GPU space that some pods of a shape can use is used by
 * them sooner or later (docs/placement.md measures the alternatives). */
static bool class_host_ok(const struct placement_class *c, int32_t model, uint64_t cpu_left,
                          uint64_t memory_left)
{
    if (c->models && (model < 0 || model >= PLACEMENT_MAX_MODELS || !((c->models >> model) & 1)))
        return false;
    return cpu_left >= c->cpu_min && memory_left >= c->memory_min;
}

/* The node's GPU frees in decreasing order with running sums, so that a
 * share class's view is a search instead of a pass over the GPUs: the GPUs
 * with at least `units` free are a prefix of the order. A class that also
 * asks cores drops, from that prefix, the GPUs short of cores: a pass over
 * the prefix, skipped when every GPU has the cores (min_cores_free). */
struct free_order {
    uint32_t count;
    uint64_t free[PLACEMENT_MAX_GPUS];       /* decreasing */
    uint32_t cores_free[PLACEMENT_MAX_GPUS]; /* of the same GPUs, in the same order */
    uint32_t min_cores_free;                 /* over all the GPUs */
    uint64_t prefix[PLACEMENT_MAX_GPUS + 1]; /* prefix[k]: sum of the first k */
    struct class_view whole;                 /* the view of any whole-GPU class */
};

static void free_order_of(const struct frag_state *st, struct free_order *fo)
{
    fo->count = st->gpus;
    fo->whole = (struct class_view){0, 0};
    fo->min_cores_free = UINT32_MAX;
    for (uint32_t g = 0; g < st->gpus; g++) {
        uint64_t f = st->free[g];
        uint32_t k = g;
        for (; k > 0 && fo->free[k - 1] < f; k--) { /* insertion sort: 16 at most */
            fo->free[k] = fo->free[k - 1];
            fo->cores_free[k] = fo->cores_free[k - 1];
        }
        fo->free[k] = f;
        fo->cores_free[k] = st->cores_free[g];
        if (st->cores_free[g] < fo->min_cores_free)
            fo->min_cores_free = st->cores_free[g];
        if (gpu_usable(st_free(st, g), st_total(st, g), true, (struct gpu_amount){0, 0}))
            fo->whole.usable++;
        else
            fo->whole.stranded += f;
    }
    fo->prefix[0] = 0;
    for (uint32_t k = 0; k < fo->count; k++)
        fo->prefix[k + 1] = fo->prefix[k] + fo->free[k];
}

/* The view of a share class needing `units` and `cores` on each GPU. */
static struct class_view share_view(const struct free_order *fo, uint64_t units, uint32_t cores)
{
    uint32_t lo = 0, hi = fo->count; /* count of GPUs with free >= units */
    if (units == 0)
        hi = 0; /* a zero share never fits (gpu_usable) */
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (fo->free[mid] >= units)
            lo = mid + 1;
        else
            hi = mid;
    }
    struct class_view v = {lo, fo->prefix[fo->count] - fo->prefix[lo]};
    if (cores > fo->min_cores_free) {
        for (uint32_t k = 0; k < lo; k++) {
            if (fo->cores_free[k] < cores) {
                v.usable--;
                v.stranded += fo->free[k];
            }
        }
    }
    return v;
}

/* The free units a node cannot sell for lack of CPU or memory: GPU pods
 * bring on average cpu_per_unit CPU per unit of GPU, so a node with
 * cpu_left CPU can still fill about cpu_left / cpu_per_unit units; the
 * rest are stranded whichever pods come. This sees what the per-class test
 * cannot: a node whose CPU suffices for the next pod but not for its GPUs. */
static double stranded_units(const struct placement_ctx *ctx, const struct frag_state *st)
{
    if (ctx->gpu_pod_units <= 0.0)
        return 0.0;
    double worst = 0.0;
    if (ctx->gpu_pod_cpu > 0.0) {
        double fillable = (double)st->cpu_left * ctx->gpu_pod_units / ctx->gpu_pod_cpu;
        worst = (double)st->free_sum - fillable;
    }
    if (ctx->gpu_pod_memory > 0.0) {
        double fillable = (double)st->memory_left * ctx->gpu_pod_units / ctx->gpu_pod_memory;
        double left = (double)st->free_sum - fillable;
        if (left > worst)
            worst = left;
    }
    return worst > 0.0 ? worst : 0.0;
}

/* Fills ev for node and req and returns the fragmentation before the pod
 * (expected_frag() of ev->before, computed in the same pass). */
static double frag_eval_init(const struct placement_ctx *ctx, const struct placement_node *node,
                             const struct placement_request *req, struct frag_eval *ev)
{
    struct free_order fo;
    const struct frag_state *st = &ev->before;
    frag_state_of(node, &ev->before);
    free_order_of(st, &fo);
    /* placement_fits() has checked that the pod's CPU and memory fit */
    uint64_t cpu_after = st->cpu_left - req->cpu, memory_after = st->memory_left - req->memory;
    ev->host_ok_after = 0;
    double sum = 0.0;
    for (uint32_t i = 0; i < ctx->class_count; i++) {
        const struct placement_class *c = &ctx->classes[i];
        uint64_t frag = st->free_sum;
        if (class_host_ok(c, st->model, st->cpu_left, st->memory_left)) {
            if (class_host_ok(c, st->model, cpu_after, memory_after))
                ev->host_ok_after |= UINT64_C(1) << i;
            if (c->gpu_count == 0) {
                ev->view[i] = (struct class_view){0, 0};
                frag = 0;
            } else {
                ev->view[i] = c->whole ? fo.whole : share_view(&fo, c->units, c->cores);
                if (ev->view[i].usable >= c->gpu_count)
                    frag = ev->view[i].stranded;
            }
        }
        sum += c->weight * (double)frag; /* as expected_frag() sums */
    }
    return sum / ctx->observed + stranded_units(ctx, st);
}

/* The measure the policy minimises, for the state `st` reached from
 * ev->before by taking `choice`, in which the classes of `host_ok` pass
 * model, CPU and memory: the expected fragmentation over the class mix plus
 * the units stranded by CPU or memory. A class's fragmentation is all the
 * free units when it cannot be placed on the node at all, else those on
 * GPUs too small for it. frag_eval_init() computes the same for the state
 * before the pod, and must sum in the same order. */
static double expected_frag(const struct placement_ctx *ctx, const struct frag_eval *ev,
                            const struct frag_state *st, uint64_t host_ok,
                            const struct placement_choice *choice)
{
    double sum = 0.0;
    for (uint32_t i = 0; i < ctx->class_count; i++) {
        const struct placement_class *c = &ctx->classes[i];
        uint64_t frag = st->free_sum;
        if ((host_ok >> i) & 1) {
            struct class_view v = ev->view[i];
            for (uint32_t k = 0; c->gpu_count > 0 && k < choice->count; k++) {
                uint32_t g = choice->gpu[k];
                uint64_t was = ev->before.free[g], now = st->free[g];
                if (gpu_usable(st_free(&ev->before, g), st_total(st, g), c->whole, class_ask(c)))
                    v.usable--;
                else
                    v.stranded -= was;
                if (gpu_usable(st_free(st, g), st_total(st, g), c->whole, class_ask(c)))
                    v.usable++;
                else
                    v.stranded += now;
            }
            if (c->gpu_count == 0)
                frag = 0;
            else if (v.usable >= c->gpu_count)
                frag = v.stranded;
        }
        sum += c->weight * (double)frag;
    }
    return sum / ctx->observed + stranded_units(ctx, st);
}

static void frag_state_apply(struct frag_state *st, const struct placement_request *req,
                             const struct placement_choice *choice)
{
    st->cpu_left -= req->cpu;
    st->memory_left -= req->memory;
    for (uint32_t k = 0; k < choice->count; k++) {
        st->free[choice->gpu[k]] -= choice->units[k];
        st->cores_free[choice->gpu[k]] -= choice->cores[k];
        st->free_sum -= choice->units[k];
    }
}

/* Weight of the best-fit tie-break against fragmentation deltas (units). */
#define GPUPOOL_FIT_WEIGHT 1e-3

static double score_gpupool(const struct placement_ctx *ctx, const struct placement_node *node,
                            const struct placement_request *req, struct placement_choice *choice)
{
    struct frag_eval ev;
    struct frag_state after;
    double frag_before = frag_eval_init(ctx, node, req, &ev);
    const struct frag_state *before = &ev.before;

    if (req->gpu_count != 1 || req->whole) {
        /* Whole GPUs are interchangeable for fragmentation; shares on
         * several GPUs go best fit. */
        choose_by_free(node, req, false, choice);
        after = *before;
        frag_state_apply(&after, req, choice);
        return (frag_before - expected_frag(ctx, &ev, &after, ev.host_ok_after, choice)) +
               GPUPOOL_FIT_WEIGHT * fullness_after(node, req, choice);
    }

    /* One share: try each distinct (free, total) GPU in both dimensions,
     * keep the least growth of fragmentation, ties to the tighter GPU. */
    double best_score = PLACEMENT_NO_FIT;
    uint64_t best_free = 0;
    after = *before; /* the pod's CPU and memory now, its GPU in the loop */
    after.cpu_left -= req->cpu;
    after.memory_left -= req->memory;
    for (uint32_t g = 0; g < before->gpus; g++) {
        if (!gpu_usable(st_free(before, g), st_total(before, g), false, request_ask(req)))
            continue;
        bool seen = false;
        for (uint32_t h = 0; h < g && !seen; h++)
            seen = before->free[h] == before->free[g] && before->total[h] == before->total[g] &&
                   before->cores_free[h] == before->cores_free[g] &&
                   before->cores_total[h] == before->cores_total[g];
        if (seen)
            continue;
        struct placement_choice one = {
            .count = 1, .gpu = {(uint8_t)g}, .units = {req->units}, .cores = {req->cores}};
        after.free[g] -= req->units;
        after.cores_free[g] -= req->cores;
        after.free_sum -= req->units;
        double score = frag_before - expected_frag(ctx, &ev, &after, ev.host_ok_after, &one);
        after.free[g] += req->units;
        after.cores_free[g] += req->cores;
        after.free_sum += req->units;
        if (score > best_score || (score == best_score && before->free[g] < best_free)) {
            best_score = score;
            best_free = before->free[g];
            *choice = one;
        }
    }
    return best_score + GPUPOOL_FIT_WEIGHT * fullness_after(node, req, choice);
}

/* ---- scores ------------------------------------------------------------- */

double placement_score(const struct placement_ctx *ctx, enum placement_policy policy,
                       const struct placement_node *node, const struct placement_request *req,
                       struct placement_choice *choice)
{
    struct placement_choice scratch;
    if (!choice)
        choice = &scratch;
    choice->count = 0;
    if (!placement_fits(node, req))
        return PLACEMENT_NO_FIT;
    switch (policy) {
    case PLACEMENT_SPREAD:
        choose_by_free(node, req, true, choice);
        return 1.0 - fullness_after(node, req, choice);
    case PLACEMENT_GPUPOOL:
        if (ctx && ctx->observed > 0)
            return score_gpupool(ctx, node, req, choice);
        /* nothing learnt yet: best fit */
        /* fall through */
    case PLACEMENT_BINPACK:
    default:
        choose_by_free(node, req, false, choice);
        return fullness_after(node, req, choice);
    }
}

int placement_choose(const struct placement_ctx *ctx, enum placement_policy policy,
                     const struct placement_node *node, const struct placement_request *req,
                     struct placement_choice *choice)
{
    return placement_score(ctx, policy, node, req, choice) == PLACEMENT_NO_FIT ? -1 : 0;
}

void placement_scores_to_priorities(const double *scores, size_t n, int max_priority,
                                    int *priorities)
{
    double lo = 0.0, hi = 0.0;
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        if (scores[i] == PLACEMENT_NO_FIT || isnan(scores[i]))
            continue;
        if (!any || scores[i] < lo)
            lo = scores[i];
        if (!any || scores[i] > hi)
            hi = scores[i];
        any = true;
    }
    for (size_t i = 0; i < n; i++) {
        if (scores[i] == PLACEMENT_NO_FIT || isnan(scores[i]))
            priorities[i] = 0;
        else if (hi == lo)
            priorities[i] = max_priority;
        else
            priorities[i] = (int)((scores[i] - lo) / (hi - lo) * max_priority + 0.5);
    }
}

/* ---- commit / release --------------------------------------------------- */

/* Checks that choice names req->gpu_count distinct in-range GPUs. */
static int check_choice_shape(const struct placement_node *node,
                              const struct placement_request *req,
                              const struct placement_choice *choice, char *err, size_t errlen)
{
    if (choice->count != req->gpu_count || choice->count > PLACEMENT_MAX_GPUS) {
        snprintf(err, errlen, "choice names %u GPUs, the request needs %u", choice->count,
                 req->gpu_count);
        return -1;
    }
    uint32_t seen = 0;
    for (uint32_t k = 0; k < choice->count; k++) {
        uint32_t g = choice->gpu[k];
        if (g >= node_gpus(node)) {
            snprintf(err, errlen, "GPU %u out of range (node has %u)", g, node->gpu_count);
            return -1;
        }
        if (seen & (1u << g)) {
            snprintf(err, errlen, "GPU %u chosen twice", g);
            return -1;
        }
        seen |= 1u << g;
    }
    return 0;
}

int placement_commit(struct placement_node *node, const struct placement_request *req,
                     struct placement_choice *choice, char *err, size_t errlen)
{
    if (check_choice_shape(node, req, choice, err, errlen) < 0)
        return -1;
    if (req->cpu > left_of(node->cpu_allocatable, node->cpu_requested)) {
        snprintf(err, errlen, "CPU: %llu requested + %llu > %llu allocatable",
                 (unsigned long long)node->cpu_requested, (unsigned long long)req->cpu,
                 (unsigned long long)node->cpu_allocatable);
        return -1;
    }
    if (req->memory > left_of(node->memory_allocatable, node->memory_requested)) {
        snprintf(err, errlen, "memory: %llu requested + %llu > %llu allocatable",
                 (unsigned long long)node->memory_requested, (unsigned long long)req->memory,
                 (unsigned long long)node->memory_allocatable);
        return -1;
    }
    if (!model_allowed(node, req->models)) {
        snprintf(err, errlen, "GPU model not allowed by the request");
        return -1;
    }
    for (uint32_t k = 0; k < choice->count; k++) {
        uint32_t g = choice->gpu[k];
        uint64_t free = placement_gpu_free(node, g);
        uint32_t cores_free = placement_gpu_cores_free(node, g);
        if (!gpu_healthy(node, g)) {
            snprintf(err, errlen, "GPU %u is unhealthy", g);
            return -1;
        }
        if (req->whole) {
            if (!gpu_usable(node_gpu_free(node, g), node_gpu_total(node, g), true,
                            (struct gpu_amount){0, 0})) {
                snprintf(err, errlen, "GPU %u is not free for a whole-GPU request", g);
                return -1;
            }
        } else if (req->units == 0 || req->units > free) {
            snprintf(err, errlen, "GPU %u: %llu units requested, %llu free", g,
                     (unsigned long long)req->units, (unsigned long long)free);
            return -1;
        } else if (req->cores > cores_free) {
            snprintf(err, errlen, "GPU %u: %u cores requested, %u free", g, req->cores, cores_free);
            return -1;
        }
    }
    for (uint32_t k = 0; k < choice->count; k++) {
        uint32_t g = choice->gpu[k];
        choice->units[k] = req->whole ? node->gpu_total[g] : req->units;
        choice->cores[k] = req->whole ? node->cores_total[g] : req->cores;
    }
    node->cpu_requested += req->cpu;
    node->memory_requested += req->memory;
    for (uint32_t k = 0; k < choice->count; k++) {
        node->gpu_used[choice->gpu[k]] += choice->units[k];
        node->cores_used[choice->gpu[k]] += choice->cores[k];
    }
    return 0;
}

int placement_release(struct placement_node *node, const struct placement_request *req,
                      const struct placement_choice *choice, char *err, size_t errlen)
{
    if (check_choice_shape(node, req, choice, err, errlen) < 0)
        return -1;
    if (req->cpu > node->cpu_requested || req->memory > node->memory_requested) {
        snprintf(err, errlen, "release of more CPU or memory than the node has requested");
        return -1;
    }
    for (uint32_t k = 0; k < choice->count; k++) {
        if (choice->units[k] > node->gpu_used[choice->gpu[k]]) {
            snprintf(err, errlen, "GPU %u: release of %llu units, %llu in use", choice->gpu[k],
                     (unsigned long long)choice->units[k],
                     (unsigned long long)node->gpu_used[choice->gpu[k]]);
            return -1;
        }
        if (choice->cores[k] > node->cores_used[choice->gpu[k]]) {
            snprintf(err, errlen, "GPU %u: release of %u cores, %u in use", choice->gpu[k],
                     choice->cores[k], node->cores_used[choice->gpu[k]]);
            return -1;
        }
    }
    node->cpu_requested -= req->cpu;
    node->memory_requested -= req->memory;
    for (uint32_t k = 0; k < choice->count; k++) {
        node->gpu_used[choice->gpu[k]] -= choice->units[k];
        node->cores_used[choice->gpu[k]] -= choice->cores[k];
    }
    return 0;
}

/* ---- online workload model ---------------------------------------------- */

static bool same_kind(const struct placement_class *c, const struct placement_request *req)
{
    return c->gpu_count == req->gpu_count && c->whole == req->whole && c->models == req->models;
}

void placement_stats_observe(struct placement_ctx *ctx, const struct placement_request *req)
{
    bool share = req->gpu_count > 0 && !req->whole;
    uint64_t units = share ? req->units : 0;
    uint32_t cores = share ? req->cores : 0;
    struct placement_class *hit = NULL;
    for (uint32_t i = 0; i < ctx->class_count && !hit; i++)
        if (same_kind(&ctx->classes[i], req) && ctx->classes[i].units == units &&
            ctx->classes[i].cores == cores)
            hit = &ctx->classes[i];
    if (!hit && ctx->class_count < PLACEMENT_MAX_CLASSES) {
        hit = &ctx->classes[ctx->class_count++];
        *hit = (struct placement_class){.gpu_count = req->gpu_count,
                                        .whole = req->whole,
                                        .units = units,
                                        .cores = cores,
                                        .models = req->models};
    }
    if (!hit) {
        /* Table full: the closest class of the same kind stands in for it
         * (by units, then by cores). */
        uint64_t best_gap = UINT64_MAX;
        uint32_t best_cores_gap = UINT32_MAX;
        for (uint32_t i = 0; i < ctx->class_count; i++) {
            struct placement_class *c = &ctx->classes[i];
            if (!same_kind(c, req))
                continue;
            uint64_t gap = c->units > units ? c->units - units : units - c->units;
            uint32_t cores_gap = c->cores > cores ? c->cores - cores : cores - c->cores;
            if (gap < best_gap || (gap == best_gap && cores_gap < best_cores_gap)) {
                best_gap = gap;
                best_cores_gap = cores_gap;
                hit = c;
            }
        }
    }
    if (!hit)
        return; /* a new kind with no room: not modelled */
    if (req->gpu_count > 0 && req->units > 0) {
        ctx->gpu_pod_cpu += (double)req->cpu;
        ctx->gpu_pod_memory += (double)req->memory;
        ctx->gpu_pod_units += (double)req->units * req->gpu_count;
    }
    hit->weight += 1.0;
    hit->cpu_sum += (double)req->cpu;
    hit->memory_sum += (double)req->memory;
    if (hit->weight == 1.0 || req->cpu < hit->cpu_min)
        hit->cpu_min = req->cpu;
    if (hit->weight == 1.0 || req->memory < hit->memory_min)
        hit->memory_min = req->memory;
    ctx->observed += 1.0;
}
