/* test_placement.c -- the placement engine: feasibility edges, each policy's
 * choice on hand-made nodes, commit/release checks, and a seeded property
 * test that no policy ever over-commits and release restores exact state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "placement.h"

static struct placement_node gpu_node(uint32_t gpus, uint64_t per_gpu)
{
    struct placement_node n = {.cpu_allocatable = 64000,
                               .memory_allocatable = 262144,
                               .gpu_count = gpus,
                               .model = PLACEMENT_MODEL_NONE};
    for (uint32_t g = 0; g < gpus; g++) {
        n.gpu_total[g] = per_gpu;
        n.cores_total[g] = 100;
    }
    return n;
}


static struct placement_request share(uint64_t units)
{
    return (struct placement_request){.cpu = 1000, .memory = 1024, .gpu_count = 1, .units = units};
}

static struct placement_request share_cores(uint64_t units, uint32_t cores)
{
    struct placement_request r = share(units);
    r.cores = cores;
    return r;
}

/* ---- feasibility -------------------------------------------------------- */

static void test_exact_fit_and_one_over(void **state)
{
    (void)state;
    struct placement_node n = gpu_node(2, 1000);
    n.gpu_used[0] = 600;
    n.gpu_used[1] = 700;
    struct placement_request r = share(400);
    assert_true(placement_fits(&n, &r));
    r.units = 401;
    assert_false(placement_fits(&n, &r));

    /* CPU and memory: requested + request <= allocatable, exactly. */
    r = share(100);
    n.cpu_requested = 63000;
    r.cpu = 1000;
    assert_true(placement_fits(&n, &r));
    r.cpu = 1001;
    assert_false(placement_fits(&n, &r));
    r.cpu = 0;
    n.memory_requested = 262144 - 10;
    r.memory = 10;
    assert_true(placement_fits(&n, &r));
    r.memory = 11;
    assert_false(placement_fits(&n, &r));
}

static void test_unhealthy_gpu_takes_nothing(void **state)
{
    (void)state;
    struct placement_node n = gpu_node(2, 1000);
    n.gpu_used[1] = 900;
    n.unhealthy = 1u << 0;
    struct placement_request r = share(500);
    assert_false(placement_fits(&n, &r));
    assert_int_equal(placement_gpu_free(&n, 0), 0);
    r.units = 100;
    struct placement_choice c;
    assert_int_equal(placement_choose(NULL, PLACEMENT_BINPACK, &n, &r, &c), 0);
    assert_int_equal(c.count, 1);
    assert_int_equal(c.gpu[0], 1);
    /* A commit naming the unhealthy GPU is refused. */
    c.gpu[0] = 0;
    char err[128];
    assert_int_equal(placement_commit(&n, &r, &c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "unhealthy"));
    assert_int_equal(n.gpu_used[0], 0);
}

static void test_model_constraint(void **state)
{
    (void)state;
    struct placement_ctx ctx;
    placement_ctx_init(&ctx);
    struct placement_node n = gpu_node(1, 1000);
    n.model = placement_model_id(&ctx, "V100M16");
    assert_int_equal(n.model, 0);
    assert_int_equal(placement_model_id(&ctx, "V100M16"), 0); /* interned once */
    struct placement_request r = share(100);
    assert_int_equal(placement_request_allow_model(&ctx, &r, "T4"), 0);
    assert_false(placement_fits(&n, &r));
    assert_int_equal(placement_request_allow_model(&ctx, &r, "V100M16"), 0);
    assert_true(placement_fits(&n, &r));
    /* A node of unknown model takes only unconstrained requests. */
    n.model = PLACEMENT_MODEL_NONE;
    assert_false(placement_fits(&n, &r));
    r.models = 0;
    assert_true(placement_fits(&n, &r));
    assert_string_equal(placement_model_name(&ctx, 1), "T4");
    assert_null(placement_model_name(&ctx, 2));
}

static void test_model_table_limits(void **state)
{
    (void)state;
    struct placement_ctx ctx;
    placement_ctx_init(&ctx);
    char name[PLACEMENT_MODEL_LEN + 8];
    memset(name, 'x', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    assert_int_equal(placement_model_id(&ctx, name), -1);
    assert_int_equal(placement_model_id(&ctx, ""), -1);
    for (int i = 0; i < PLACEMENT_MAX_MODELS; i++) {
        snprintf(name, sizeof(name), "m%d", i);
        assert_int_equal(placement_model_id(&ctx, name), i);
    }
    assert_int_equal(placement_model_id(&ctx, "one-too-many"), -1);
    struct placement_request r = share(1);
    assert_int_equal(placement_request_allow_model(&ctx, &r, "one-too-many"), -1);
    assert_int_equal(r.models, 0);
}

static void test_multi_gpu_needs_distinct_gpus(void **state)
{
    (void)state;
    struct placement_node n = gpu_node(4, 1000);
    n.gpu_used[0] = 0;
    n.gpu_used[1] = 600;
    n.gpu_used[2] = 600;
    n.gpu_used[3] = 600;
    /* 2 x 400: one GPU has 1000 free, but two distinct GPUs are needed. */
    struct placement_request r = share(400);
    r.gpu_count = 2;
    assert_true(placement_fits(&n, &r));
    r.units = 401;
    assert_false(placement_fits(&n, &r));
    /* Whole GPUs need untouched ones. */
    struct placement_request w = {.gpu_count = 1, .whole = true};
    assert_true(placement_fits(&n, &w));
    w.gpu_count = 2;
    assert_false(placement_fits(&n, &w));
    /* More GPUs than the node has, or than any node can have. */
    w.gpu_count = 5;
    assert_false(placement_fits(&n, &w));
    w.gpu_count = UINT32_MAX;
    assert_false(placement_fits(&n, &w));
    /* A share of 0 units never fits. */
    r = share(0);
    assert_false(placement_fits(&n, &r));
}

static void test_huge_requests_do_not_wrap(void **state)
{
    (void)state;
    struct placement_node n = gpu_node(2, 1000);
    n.cpu_requested = 100;
    struct placement_request r = share(100);
    r.cpu = UINT64_MAX;
    assert_false(placement_fits(&n, &r));
    r.cpu = UINT64_MAX - 50; /* requested + cpu would wrap to a small number */
    assert_false(placement_fits(&n, &r));
    r = share(UINT64_MAX);
    assert_false(placement_fits(&n, &r));
    r = share(100);
    r.memory = UINT64_MAX;
    assert_false(placement_fits(&n, &r));
    /* An already over-committed node (data from outside) fits nothing. */
    n.cpu_requested = n.cpu_allocatable + 5;
    r = share(1);
    r.cpu = 0;
    r.memory = 0;
    assert_true(placement_fits(&n, &r));
    r.cpu = 1;
    assert_false(placement_fits(&n, &r));
    /* commit of a choice with huge units is refused, state unchanged */
    n.cpu_requested = 0;
    struct placement_choice c = {.count = 1, .gpu = {0}};
    r = share(UINT64_MAX);
    char err[128];
    assert_int_equal(placement_commit(&n, &r, &c, err, sizeof(err)), -1);
    assert_int_equal(n.gpu_used[0], 0);
    assert_int_equal(n.cpu_requested, 0);
}

static void test_cpu_only_request(void **state)
{
    (void)state;
    struct placement_node n = gpu_node(0, 0);
    struct placement_request r = {.cpu = 64000, .memory = 1};
    struct placement_choice c;
    assert_int_equal(placement_choose(NULL, PLACEMENT_GPUPOOL, &n, &r, &c), 0);
    assert_int_equal(c.count, 0);
    char err[128];
    assert_int_equal(placement_commit(&n, &r, &c, err, sizeof(err)), 0);
    assert_int_equal(n.cpu_requested, 64000);
    assert_false(placement_fits(&n, &r));
    r.gpu_count = 1;
    r.units = 1;
    r.cpu = 0;
    assert_false(placement_fits(&n, &r)); /* no GPUs */
}

/* ---- policies ----------------------------------------------------------- */

/* gpushare's design-doc example: free 12207, 8138, 4069, 16276; 8138 -> GPU1. */
static void test_binpack_and_spread_choice(void **state)
{
    (void)state;
    struct placement_node n = gpu_node(4, 16276);
    n.gpu_used[0] = 16276 - 12207;
    n.gpu_used[1] = 16276 - 8138;
    n.gpu_used[2] = 16276 - 4069;
    struct placement_request r = share(8138);
    struct placement_choice c;
    assert_int_equal(placement_choose(NULL, PLACEMENT_BINPACK, &n, &r, &c), 0);
    assert_int_equal(c.count, 1);
    assert_int_equal(c.gpu[0], 1);
    assert_int_equal(c.units[0], 8138);
    assert_int_equal(placement_choose(NULL, PLACEMENT_SPREAD, &n, &r, &c), 0);
    assert_int_equal(c.gpu[0], 3);
    /* gpupool with nothing learnt behaves as binpack */
    assert_int_equal(placement_choose(NULL, PLACEMENT_GPUPOOL, &n, &r, &c), 0);
    assert_int_equal(c.gpu[0], 1);
    /* Equal free: ties go to the lowest index. */
    n.gpu_used[3] = n.gpu_used[1];
    assert_int_equal(placement_choose(NULL, PLACEMENT_BINPACK, &n, &r, &c), 0);
    assert_int_equal(c.gpu[0], 1);
}

static void test_binpack_prefers_fuller_node(void **state)
{
    (void)state;
    struct placement_node empty = gpu_node(2, 1000), used = gpu_node(2, 1000);
    used.gpu_used[0] = 500;
    used.cpu_requested = 4000;
    struct placement_request r = share(300);
    double s_empty = placement_score(NULL, PLACEMENT_BINPACK, &empty, &r, NULL);
    double s_used = placement_score(NULL, PLACEMENT_BINPACK, &used, &r, NULL);
    assert_true(s_used > s_empty);
    assert_true(placement_score(NULL, PLACEMENT_SPREAD, &empty, &r, NULL) >
                placement_score(NULL, PLACEMENT_SPREAD, &used, &r, NULL));
    r.units = 2000;
    assert_true(placement_score(NULL, PLACEMENT_BINPACK, &used, &r, NULL) == PLACEMENT_NO_FIT);
}

static void observe_n(struct placement_ctx *ctx, struct placement_request r, int n)
{
    for (int i = 0; i < n; i++)
        placement_stats_observe(ctx, &r);
}

/* Against a mix of 500-unit pods, a 500 goes where it completes a GPU, not
 * where it would leave 300 units that no 500 can use, although the latter
 * is the tighter (best-fit) GPU. */
static void test_gpupool_avoids_useless_leftovers(void **state)
{
    (void)state;
    struct placement_ctx ctx;
    placement_ctx_init(&ctx);
    observe_n(&ctx, share(500), 10);
    struct placement_node n = gpu_node(2, 1000);
    n.gpu_used[0] = 200; /* 800 free: a 500 would leave 300, useless */
    n.gpu_used[1] = 0;   /* 1000 free: leaves 500, exactly one more */
    struct placement_request r = share(500);
    struct placement_choice c;
    assert_int_equal(placement_choose(&ctx, PLACEMENT_BINPACK, &n, &r, &c), 0);
    assert_int_equal(c.gpu[0], 0);
    assert_int_equal(placement_choose(&ctx, PLACEMENT_GPUPOOL, &n, &r, &c), 0);
    assert_int_equal(c.gpu[0], 1);
}

/* Whole-GPU pods dominate the mix: a share goes to the node whose GPU is
 * already broken rather than breaking an untouched one. */
static void test_gpupool_keeps_whole_gpus_intact(void **state)
{
    (void)state;
    struct placement_ctx ctx;
    placement_ctx_init(&ctx);
    struct placement_request whole = {.cpu = 1000, .gpu_count = 1, .whole = true, .units = 1000};
    observe_n(&ctx, whole, 20);
    observe_n(&ctx, share(250), 5);
    struct placement_node fresh = gpu_node(2, 1000), broken = gpu_node(2, 1000);
    broken.gpu_used[0] = 250;
    struct placement_request r = share(250);
    double s_fresh = placement_score(&ctx, PLACEMENT_GPUPOOL, &fresh, &r, NULL);
    struct placement_choice c;
    double s_broken = placement_score(&ctx, PLACEMENT_GPUPOOL, &broken, &r, &c);
    assert_true(s_broken > s_fresh);
    assert_int_equal(c.gpu[0], 0);
}

/* A CPU-only pod goes where CPU is plentiful relative to GPUs, not onto the
 * node whose CPU its GPUs need. */
static void test_gpupool_cpu_pod_avoids_stranding(void **state)
{
    (void)state;
    struct placement_ctx ctx;
    placement_ctx_init(&ctx);
    struct placement_request whole = {
        .cpu = 12000, .memory = 1024, .gpu_count = 1, .whole = true, .units = 1000};
    observe_n(&ctx, whole, 10);
    struct placement_request cpu_pod = {.cpu = 16000, .memory = 1024};
    observe_n(&ctx, cpu_pod, 2);
    struct placement_node tight = gpu_node(8, 1000), roomy = gpu_node(2, 1000);
    tight.cpu_allocatable = 96000;  /* 12 cores per GPU: all needed */
    roomy.cpu_allocatable = 104000; /* 52 cores per GPU */
    double s_tight = placement_score(&ctx, PLACEMENT_GPUPOOL, &tight, &cpu_pod, NULL);
    double s_roomy = placement_score(&ctx, PLACEMENT_GPUPOOL, &roomy, &cpu_pod, NULL);
    assert_true(s_roomy > s_tight);
}

static void test_policy_names(void **state)
{
    (void)state;
    enum placement_policy p;
    assert_int_equal(placement_policy_parse("binpack", &p), 0);
    assert_int_equal(p, PLACEMENT_BINPACK);
    assert_int_equal(placement_policy_parse("spread", &p), 0);
    assert_int_equal(p, PLACEMENT_SPREAD);
    assert_int_equal(placement_policy_parse("default", &p), 0);
    assert_int_equal(p, PLACEMENT_GPUPOOL);
    assert_int_equal(placement_policy_parse("gpupool", &p), 0);
    assert_int_equal(p, PLACEMENT_GPUPOOL);
    assert_int_equal(placement_policy_parse("fgd", &p), -1);
    assert_int_equal(placement_policy_parse(NULL, &p), -1);
    assert_string_equal(placement_policy_name(PLACEMENT_SPREAD), "spread");
}

static void test_scores_to_priorities(void **state)
{
    (void)state;
    double scores[4] = {-5.0, PLACEMENT_NO_FIT, 5.0, 0.0};
    int prio[4];
    placement_scores_to_priorities(scores, 4, 10, prio);
    assert_int_equal(prio[0], 0);
    assert_int_equal(prio[1], 0);
    assert_int_equal(prio[2], 10);
    assert_int_equal(prio[3], 5);
    double same[2] = {3.0, 3.0};
    placement_scores_to_priorities(same, 2, 100, prio);
    assert_int_equal(prio[0], 100);
    assert_int_equal(prio[1], 100);
}

static void test_stats_table_full_merges(void **state)
{
    (void)state;
    struct placement_ctx ctx;
    placement_ctx_init(&ctx);
    for (int i = 0; i < PLACEMENT_MAX_CLASSES; i++)
        observe_n(&ctx, share(10 + (uint64_t)i * 10), 1);
    assert_int_equal(ctx.class_count, PLACEMENT_MAX_CLASSES);
    observe_n(&ctx, share(10 * PLACEMENT_MAX_CLASSES + 3), 1); /* closest: the largest */
    assert_int_equal(ctx.class_count, PLACEMENT_MAX_CLASSES);
    assert_true(ctx.classes[PLACEMENT_MAX_CLASSES - 1].weight == 2.0);
    /* a new kind with no room is not modelled */
    struct placement_request two = share(100);
    two.gpu_count = 2;
    observe_n(&ctx, two, 1);
    assert_true(ctx.observed == PLACEMENT_MAX_CLASSES + 1);
}

/* ---- commit / release --------------------------------------------------- */

/* A shape counts as usable on a node that can host its least demanding
 * pod: when most of a shape's pods ask little CPU, a pod is placed where
 * they can still use the rest of the GPU, although the mean request would
 * fit neither node. */
static void test_class_uses_least_demanding_pod(void **state)
{
    (void)state;
    struct placement_ctx ctx;
    placement_ctx_init(&ctx);
    struct placement_request small = share(500), big = share(500);
    small.cpu = 2000;
    big.cpu = 30000;
    observe_n(&ctx, big, 1);
    observe_n(&ctx, small, 3);
    assert_int_equal(ctx.class_count, 1);
    assert_true(ctx.classes[0].cpu_min == 2000);
    assert_true(ctx.classes[0].memory_min == 1024);

    /* Three of four pods ask 2 cores, one 30 (mean 9). Node a has 5 cores
     * left, b 3: after a pod taking half a GPU and 2.5 cores, a can still
     * host the 2-core pods on the other half, b none. Judged by the mean
     * request, neither node could host the shape before or after, and the
     * fuller b would win. */
    placement_ctx_init(&ctx);
    observe_n(&ctx, small, 3);
    observe_n(&ctx, big, 1);
    struct placement_node a = gpu_node(1, 1000), b = gpu_node(1, 1000);
    a.cpu_requested = a.cpu_allocatable - 5000;
    b.cpu_requested = b.cpu_allocatable - 3000;
    struct placement_request pod = share(500);
    pod.cpu = 2500;
    assert_true(placement_score(&ctx, PLACEMENT_GPUPOOL, &a, &pod, NULL) >
                placement_score(&ctx, PLACEMENT_GPUPOOL, &b, &pod, NULL));
}

static void test_commit_refuses_overcommit(void **state)
{
    (void)state;
    struct placement_node n = gpu_node(2, 1000), before;
    n.gpu_used[0] = 700;
    before = n;
    char err[128];
    struct placement_request r = share(400);
    struct placement_choice c = {.count = 1, .gpu = {0}};
    assert_int_equal(placement_commit(&n, &r, &c, err, sizeof(err)), -1);
    assert_memory_equal(&n, &before, sizeof(n));
    /* duplicate and out-of-range GPUs, wrong count */
    r.gpu_count = 2;
    c = (struct placement_choice){.count = 2, .gpu = {1, 1}};
    assert_int_equal(placement_commit(&n, &r, &c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "twice"));
    c = (struct placement_choice){.count = 2, .gpu = {1, 7}};
    assert_int_equal(placement_commit(&n, &r, &c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "out of range"));
    c.count = 1;
    assert_int_equal(placement_commit(&n, &r, &c, err, sizeof(err)), -1);
    /* whole GPU on a used one */
    struct placement_request w = {.gpu_count = 1, .whole = true};
    c = (struct placement_choice){.count = 1, .gpu = {0}};
    assert_int_equal(placement_commit(&n, &w, &c, err, sizeof(err)), -1);
    /* CPU over allocatable */
    r = share(100);
    r.cpu = 64001;
    c = (struct placement_choice){.count = 1, .gpu = {1}};
    assert_int_equal(placement_commit(&n, &r, &c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "CPU"));
    assert_memory_equal(&n, &before, sizeof(n));
    /* whole commit fills units with the GPU's total; release undoes it */
    c = (struct placement_choice){.count = 1, .gpu = {1}};
    assert_int_equal(placement_commit(&n, &w, &c, err, sizeof(err)), 0);
    assert_int_equal(c.units[0], 1000);
    assert_int_equal(n.gpu_used[1], 1000);
    assert_int_equal(placement_release(&n, &w, &c, err, sizeof(err)), 0);
    assert_memory_equal(&n, &before, sizeof(n));
}

static void test_release_refuses_underflow(void **state)
{
    (void)state;
    struct placement_node n = gpu_node(1, 1000), before;
    before = n;
    char err[128];
    struct placement_request r = share(100);
    struct placement_choice c = {.count = 1, .gpu = {0}, .units = {100}};
    assert_int_equal(placement_release(&n, &r, &c, err, sizeof(err)), -1);
    assert_memory_equal(&n, &before, sizeof(n));
    n.cpu_requested = 1000;
    n.memory_requested = 1024;
    assert_int_equal(placement_release(&n, &r, &c, err, sizeof(err)), -1);
    assert_int_equal(n.cpu_requested, 1000);
}

/* ---- cores: the second dimension ----------------------------------------- */

/* Two shares of 60 cores never share a GPU, whatever memory is left, and
 * every policy agrees; a third one finds no GPU once both are taken. */
static void test_cores_never_add_past_100(void **state)
{
    (void)state;
    const enum placement_policy policies[] = {PLACEMENT_GPUPOOL, PLACEMENT_BINPACK,
                                              PLACEMENT_SPREAD};
    struct placement_ctx ctx;
    placement_ctx_init(&ctx);
    struct placement_request r = share_cores(1000, 60);
    placement_stats_observe(&ctx, &r);
    for (size_t p = 0; p < 3; p++) {
        struct placement_node n = gpu_node(2, 16000);
        struct placement_choice c1, c2, c3;
        char err[160];
        assert_int_equal(placement_choose(&ctx, policies[p], &n, &r, &c1), 0);
        assert_int_equal(c1.cores[0], 60);
        assert_int_equal(placement_commit(&n, &r, &c1, err, sizeof(err)), 0);
        assert_int_equal(placement_gpu_cores_free(&n, c1.gpu[0]), 40);
        assert_int_equal(placement_choose(&ctx, policies[p], &n, &r, &c2), 0);
        assert_int_not_equal(c2.gpu[0], c1.gpu[0]); /* memory alone would allow the same GPU */
        assert_int_equal(placement_commit(&n, &r, &c2, err, sizeof(err)), 0);
        assert_false(placement_fits(&n, &r));
        assert_int_equal(placement_choose(&ctx, policies[p], &n, &r, &c3), -1);
        /* a hand-made choice of a GPU short of cores is refused, nothing changes */
        struct placement_node saved = n;
        c3 = (struct placement_choice){.count = 1, .gpu = {c1.gpu[0]}};
        assert_int_equal(placement_commit(&n, &r, &c3, err, sizeof(err)), -1);
        assert_non_null(strstr(err, "60 cores requested, 40 free"));
        assert_memory_equal(&n, &saved, sizeof(n));
        /* 40 more cores still fit beside the first */
        struct placement_request small = share_cores(1000, 40);
        assert_true(placement_fits(&n, &small));
        assert_int_equal(placement_release(&n, &r, &c2, err, sizeof(err)), 0);
        assert_int_equal(placement_release(&n, &r, &c1, err, sizeof(err)), 0);
        assert_int_equal(n.cores_used[0] + n.cores_used[1], 0);
    }
}

/* A pod asking no cores is scheduled on memory alone, even on a GPU whose
 * cores are all booked; a whole GPU needs both dimensions untouched and
 * takes every core. */
static void test_cores_memory_only_and_whole(void **state)
{
    (void)state;
    struct placement_node n = gpu_node(1, 16000);
    struct placement_choice c = {.count = 1, .gpu = {0}};
    char err[160];
    struct placement_request all = share_cores(4000, 100);
    assert_int_equal(placement_commit(&n, &all, &c, err, sizeof(err)), 0);
    struct placement_request mem_only = share(8000);
    assert_true(placement_fits(&n, &mem_only));
    assert_false(
        placement_fits(&n, &(struct placement_request){.gpu_count = 1, .units = 1, .cores = 1}));
    assert_int_equal(placement_release(&n, &all, &c, err, sizeof(err)), 0);

    /* cores booked, memory untouched: not a whole GPU */
    struct placement_node odd = gpu_node(1, 16000);
    odd.cores_used[0] = 10;
    struct placement_request whole = {.gpu_count = 1, .whole = true};
    assert_false(placement_fits(&odd, &whole));
    struct placement_node fresh = gpu_node(1, 16000);
    struct placement_choice w = {.count = 1, .gpu = {0}};
    assert_int_equal(placement_commit(&fresh, &whole, &w, err, sizeof(err)), 0);
    assert_int_equal(w.units[0], 16000);
    assert_int_equal(w.cores[0], 100);
    assert_int_equal(fresh.cores_used[0], 100);
    /* a node without core capacity (an old caller) hosts only core-free pods */
    struct placement_node old = gpu_node(1, 16000);
    old.cores_total[0] = 0;
    assert_true(placement_fits(&old, &mem_only));
    assert_false(placement_fits(&old, &all));
    assert_true(placement_fits(&old, &whole));
}

/* gpupool counts a GPU's free memory as lost to a class that cannot get
 * its cores there. With 4000-unit, 50-core pods in the mix, taking the last
 * 50 cores of the half-used GPU would leave 4000 units no such pod can use,
 * so the pod goes to the fresh GPU; with no cores asked, memory alone ties
 * and the tighter GPU wins. */
static void test_gpupool_counts_cores_in_fragmentation(void **state)
{
    (void)state;
    struct placement_request with[2] = {share_cores(4000, 50), share(4000)};
    uint8_t expect[2] = {0, 1};
    for (int v = 0; v < 2; v++) {
        struct placement_ctx ctx;
        placement_ctx_init(&ctx);
        for (int i = 0; i < 10; i++)
            placement_stats_observe(&ctx, &with[v]);
        struct placement_node n = gpu_node(2, 16000);
        n.gpu_used[1] = 8000;
        n.cores_used[1] = 50;
        struct placement_choice c;
        assert_int_equal(placement_choose(&ctx, PLACEMENT_GPUPOOL, &n, &with[v], &c), 0);
        assert_int_equal(c.gpu[0], expect[v]);
    }
}

/* ---- property test ------------------------------------------------------ */

static uint64_t prop_rng(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

#define PROP_NODES 12
#define PROP_STEPS 600

struct placed {
    int node;
    struct placement_request req;
    struct placement_choice choice;
};

static void check_invariants(const struct placement_node *nodes, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        assert_true(nodes[i].cpu_requested <= nodes[i].cpu_allocatable);
        assert_true(nodes[i].memory_requested <= nodes[i].memory_allocatable);
        for (uint32_t g = 0; g < nodes[i].gpu_count; g++) {
            assert_true(nodes[i].gpu_used[g] <= nodes[i].gpu_total[g]);
            assert_true(nodes[i].cores_used[g] <= nodes[i].cores_total[g]);
        }
    }
}

static void run_property(enum placement_policy policy, uint64_t seed)
{
    uint64_t s = seed;
    struct placement_ctx ctx;
    placement_ctx_init(&ctx);
    const char *models[3] = {"A", "B", "C"};
    struct placement_node nodes[PROP_NODES], initial[PROP_NODES];
    for (int i = 0; i < PROP_NODES; i++) {
        struct placement_node *n = &nodes[i];
        memset(n, 0, sizeof(*n));
        n->cpu_allocatable = 1000 + prop_rng(&s) % 64000;
        n->memory_allocatable = 1 + prop_rng(&s) % 100000;
        n->gpu_count = (uint32_t)(prop_rng(&s) % (PLACEMENT_MAX_GPUS + 1));
        n->model = placement_model_id(&ctx, models[prop_rng(&s) % 3]);
        n->unhealthy = (uint32_t)(prop_rng(&s) % 8 == 0 ? prop_rng(&s) & 0xffff : 0);
        for (uint32_t g = 0; g < n->gpu_count; g++) {
            n->gpu_total[g] = 1 + prop_rng(&s) % 40000; /* heterogeneous */
            n->cores_total[g] = (uint32_t)(prop_rng(&s) % 3 == 0 ? prop_rng(&s) % 101 : 100);
        }
    }
    memcpy(initial, nodes, sizeof(nodes));
    static struct placed placed[PROP_STEPS];
    size_t placed_count = 0;
    char err[160];
    for (int step = 0; step < PROP_STEPS; step++) {
        struct placement_request r = {0};
        r.cpu = prop_rng(&s) % 9000;
        r.memory = prop_rng(&s) % 9000;
        uint64_t kind = prop_rng(&s) % 10;
        if (kind == 0) {
            r.cpu = UINT64_MAX - prop_rng(&s) % 3; /* hostile */
        } else if (kind < 3) {
            r.gpu_count = 0;
        } else if (kind < 6) {
            r.gpu_count = 1;
            r.units = prop_rng(&s) % 20000;
            r.cores = (uint32_t)(prop_rng(&s) % 2 ? prop_rng(&s) % 110 : 0);
        } else if (kind < 8) {
            r.gpu_count = 1 + (uint32_t)(prop_rng(&s) % 4);
            r.whole = true;
            r.units = 1000;
        } else {
            r.gpu_count = 1 + (uint32_t)(prop_rng(&s) % 3);
            r.units = prop_rng(&s) % 12000;
            r.cores = (uint32_t)(prop_rng(&s) % 60);
        }
        if (prop_rng(&s) % 4 == 0)
            assert_int_equal(placement_request_allow_model(&ctx, &r, models[prop_rng(&s) % 3]), 0);
        placement_stats_observe(&ctx, &r);
        int best = -1;
        double best_score = PLACEMENT_NO_FIT;
        struct placement_choice best_choice = {0}, c;
        for (int i = 0; i < PROP_NODES; i++) {
            double score = placement_score(&ctx, policy, &nodes[i], &r, &c);
            assert_true(score == PLACEMENT_NO_FIT ? !placement_fits(&nodes[i], &r)
                                                  : placement_fits(&nodes[i], &r));
            if (score != PLACEMENT_NO_FIT && (best < 0 || score > best_score)) {
                best = i;
                best_score = score;
                best_choice = c;
            }
        }
        if (best >= 0) {
            assert_int_equal(placement_commit(&nodes[best], &r, &best_choice, err, sizeof(err)), 0);
            placed[placed_count++] = (struct placed){best, r, best_choice};
        }
        /* A random, probably infeasible, choice must be refused or stay in bounds. */
        int i = (int)(prop_rng(&s) % PROP_NODES);
        struct placement_choice wild = {.count =
                                            r.gpu_count > PLACEMENT_MAX_GPUS ? 0 : r.gpu_count};
        for (uint32_t k = 0; k < wild.count; k++)
            wild.gpu[k] = (uint8_t)(prop_rng(&s) % (PLACEMENT_MAX_GPUS + 2));
        struct placement_node saved = nodes[i];
        if (placement_commit(&nodes[i], &r, &wild, err, sizeof(err)) == 0)
            placed[placed_count++] = (struct placed){i, r, wild};
        else
            assert_memory_equal(&nodes[i], &saved, sizeof(saved));
        check_invariants(nodes, PROP_NODES);
        if (placed_count >= PROP_STEPS - 2)
            break;
    }
    assert_true(placed_count > 20); /* the test exercised commits */
    /* Release everything in a shuffled order: exact initial state. */
    for (size_t k = placed_count; k > 1; k--) {
        size_t j = prop_rng(&s) % k;
        struct placed t = placed[k - 1];
        placed[k - 1] = placed[j];
        placed[j] = t;
    }
    for (size_t k = 0; k < placed_count; k++) {
        struct placed *p = &placed[k];
        assert_int_equal(placement_release(&nodes[p->node], &p->req, &p->choice, err, sizeof(err)),
                         0);
        check_invariants(nodes, PROP_NODES);
    }
    assert_memory_equal(nodes, initial, sizeof(nodes));
}

/* ---- gpupool score against its definition ------------------------------- */

/* A direct, slow transcription of the gpupool measure (docs/placement.md):
 * the engine computes it incrementally, and must get the same numbers. */
struct ref_state {
    uint32_t gpus;
    uint64_t free[PLACEMENT_MAX_GPUS], total[PLACEMENT_MAX_GPUS], free_sum;
    uint32_t cores_free[PLACEMENT_MAX_GPUS], cores_total[PLACEMENT_MAX_GPUS];
    uint64_t cpu_left, memory_left;
    int32_t model;
};

static struct ref_state ref_state_of(const struct placement_node *n)
{
    struct ref_state st = {.gpus = n->gpu_count, .model = n->model};
    for (uint32_t g = 0; g < n->gpu_count; g++) {
        st.free[g] = placement_gpu_free(n, g);
        st.total[g] = (n->unhealthy >> g) & 1 ? 0 : n->gpu_total[g];
        st.cores_total[g] = (n->unhealthy >> g) & 1 ? 0 : n->cores_total[g];
        st.cores_free[g] = (n->unhealthy >> g) & 1 || n->cores_used[g] >= n->cores_total[g]
                               ? 0
                               : n->cores_total[g] - n->cores_used[g];
        st.free_sum += st.free[g];
    }
    st.cpu_left =
        n->cpu_requested >= n->cpu_allocatable ? 0 : n->cpu_allocatable - n->cpu_requested;
    st.memory_left = n->memory_requested >= n->memory_allocatable
                         ? 0
                         : n->memory_allocatable - n->memory_requested;
    return st;
}

/* The free units a pod of class c could not use: all of them when the node
 * cannot host the class's least demanding pod (model, CPU, memory) or has
 * too few usable GPUs, else those on GPUs too small for it. */
static double ref_class_frag(const struct placement_class *c, const struct ref_state *st)
{
    if (c->models && (st->model < 0 || !((c->models >> st->model) & 1)))
        return (double)st->free_sum;
    if (st->cpu_left < c->cpu_min || st->memory_left < c->memory_min)
        return (double)st->free_sum;
    if (c->gpu_count == 0)
        return 0.0;
    uint32_t usable = 0;
    uint64_t stranded = 0;
    for (uint32_t g = 0; g < st->gpus; g++) {
        bool fits = c->whole
                        ? st->total[g] > 0 && st->free[g] == st->total[g] &&
                              st->cores_free[g] == st->cores_total[g]
                        : c->units > 0 && st->free[g] >= c->units && st->cores_free[g] >= c->cores;
        if (fits)
            usable++;
        else
            stranded += st->free[g];
    }
    return usable >= c->gpu_count ? (double)stranded : (double)st->free_sum;
}

static double ref_frag(const struct placement_ctx *ctx, const struct ref_state *st)
{
    double sum = 0.0;
    for (uint32_t i = 0; i < ctx->class_count; i++)
        sum += ctx->classes[i].weight * ref_class_frag(&ctx->classes[i], st);
    double stranded = 0.0;
    if (ctx->gpu_pod_units > 0.0) {
        if (ctx->gpu_pod_cpu > 0.0)
            stranded =
                (double)st->free_sum - (double)st->cpu_left * ctx->gpu_pod_units / ctx->gpu_pod_cpu;
        if (ctx->gpu_pod_memory > 0.0) {
            double left = (double)st->free_sum -
                          (double)st->memory_left * ctx->gpu_pod_units / ctx->gpu_pod_memory;
            if (left > stranded)
                stranded = left;
        }
        if (stranded < 0.0)
            stranded = 0.0;
    }
    return sum / ctx->observed + stranded;
}

static double ref_fullness(const struct placement_node *n, const struct ref_state *after)
{
    uint64_t capacity = 0;
    for (uint32_t g = 0; g < n->gpu_count; g++)
        capacity += after->total[g];
    double gpu = capacity ? 1.0 - (double)after->free_sum / (double)capacity : 0.0;
    double cpu =
        n->cpu_allocatable ? 1.0 - (double)after->cpu_left / (double)n->cpu_allocatable : 0.0;
    return 0.5 * gpu + 0.5 * cpu;
}

static struct ref_state ref_apply(struct ref_state st, const struct placement_request *r,
                                  const struct placement_choice *c)
{
    st.cpu_left -= r->cpu;
    st.memory_left -= r->memory;
    for (uint32_t k = 0; k < c->count; k++) {
        st.free[c->gpu[k]] -= c->units[k];
        st.cores_free[c->gpu[k]] -= c->cores[k];
        st.free_sum -= c->units[k];
    }
    return st;
}

/* The reference score of node n for r, given the engine's choice: for a
 * single share the best over all GPUs must also be the engine's. */
static void check_against_reference(const struct placement_ctx *ctx, const struct placement_node *n,
                                    const struct placement_request *r)
{
    struct placement_choice c;
    double score = placement_score(ctx, PLACEMENT_GPUPOOL, n, r, &c);
    if (score == PLACEMENT_NO_FIT) {
        assert_false(placement_fits(n, r));
        return;
    }
    struct ref_state before = ref_state_of(n);
    double frag_before = ref_frag(ctx, &before);
    if (r->gpu_count == 1 && !r->whole) {
        double best = PLACEMENT_NO_FIT;
        for (uint32_t g = 0; g < n->gpu_count; g++) {
            if (before.free[g] < r->units || before.total[g] == 0 ||
                before.cores_free[g] < r->cores)
                continue;
            struct placement_choice one = {
                .count = 1, .gpu = {(uint8_t)g}, .units = {r->units}, .cores = {r->cores}};
            struct ref_state after = ref_apply(before, r, &one);
            double delta = frag_before - ref_frag(ctx, &after);
            if (delta > best)
                best = delta;
        }
        struct ref_state after = ref_apply(before, r, &c);
        double mine = frag_before - ref_frag(ctx, &after);
        assert_true(mine == best); /* the engine's GPU is a best one */
        assert_true(score == best + 1e-3 * ref_fullness(n, &after));
        return;
    }
    struct ref_state after = ref_apply(before, r, &c);
    assert_true(score == (frag_before - ref_frag(ctx, &after)) + 1e-3 * ref_fullness(n, &after));
}

static void test_gpupool_matches_reference(void **state)
{
    (void)state;
    uint64_t s = 77;
    struct placement_ctx ctx;
    placement_ctx_init(&ctx);
    const char *models[3] = {"A", "B", "C"};
    for (int i = 0; i < 3; i++)
        assert_true(placement_model_id(&ctx, models[i]) == i);
    for (int round = 0; round < 4000; round++) {
        struct placement_request r = {.cpu = prop_rng(&s) % 12000, .memory = prop_rng(&s) % 9000};
        uint64_t kind = prop_rng(&s) % 8;
        if (kind < 4) {
            r.gpu_count = 1;
            r.units = 50 * (prop_rng(&s) % 21); /* 0..1000, zero included */
            r.cores = (uint32_t)(prop_rng(&s) % 3 ? 10 * (prop_rng(&s) % 11) : 0);
        } else if (kind < 6) {
            r.gpu_count = 1 + (uint32_t)(prop_rng(&s) % 4);
            r.whole = true;
            r.units = 1000;
        } else if (kind == 6) {
            r.gpu_count = 2 + (uint32_t)(prop_rng(&s) % 2);
            r.units = 100 * (1 + prop_rng(&s) % 9);
            r.cores = (uint32_t)(10 * (prop_rng(&s) % 6));
        }
        if (prop_rng(&s) % 5 == 0)
            r.models = UINT64_C(1) << (prop_rng(&s) % 3);
        placement_stats_observe(&ctx, &r);

        struct placement_node n = gpu_node((uint32_t)(prop_rng(&s) % 9), 1000);
        n.cpu_allocatable = 16000 + prop_rng(&s) % 96000;
        n.cpu_requested = prop_rng(&s) % n.cpu_allocatable;
        n.memory_requested = prop_rng(&s) % n.memory_allocatable;
        n.model = (int32_t)(prop_rng(&s) % 4) - 1; /* PLACEMENT_MODEL_NONE too */
        n.unhealthy = prop_rng(&s) % 6 == 0 ? (uint32_t)(prop_rng(&s) & 0xff) : 0;
        for (uint32_t g = 0; g < n.gpu_count; g++) {
            uint64_t k = prop_rng(&s) % 4; /* repeated free values are common */
            n.gpu_used[g] = k == 0 ? 0 : k == 1 ? 1000 : 50 * (prop_rng(&s) % 21);
            /* cores mostly follow memory, sometimes not (memory-only pods) */
            uint64_t kc = prop_rng(&s) % 4;
            n.cores_used[g] =
                kc == 0 ? 0 : (uint32_t)(kc == 1 ? n.gpu_used[g] / 10 : 10 * (prop_rng(&s) % 11));
        }
        check_against_reference(&ctx, &n, &r);
    }
}

static void test_property_never_overcommits(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 30; seed++) {
        run_property(PLACEMENT_GPUPOOL, seed);
        run_property(PLACEMENT_BINPACK, seed);
        run_property(PLACEMENT_SPREAD, seed);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_fit_and_one_over),
        cmocka_unit_test(test_unhealthy_gpu_takes_nothing),
        cmocka_unit_test(test_model_constraint),
        cmocka_unit_test(test_model_table_limits),
        cmocka_unit_test(test_multi_gpu_needs_distinct_gpus),
        cmocka_unit_test(test_huge_requests_do_not_wrap),
        cmocka_unit_test(test_cpu_only_request),
        cmocka_unit_test(test_binpack_and_spread_choice),
        cmocka_unit_test(test_binpack_prefers_fuller_node),
        cmocka_unit_test(test_gpupool_avoids_useless_leftovers),
        cmocka_unit_test(test_gpupool_keeps_whole_gpus_intact),
        cmocka_unit_test(test_gpupool_cpu_pod_avoids_stranding),
        cmocka_unit_test(test_policy_names),
        cmocka_unit_test(test_scores_to_priorities),
        cmocka_unit_test(test_stats_table_full_merges),
        cmocka_unit_test(test_class_uses_least_demanding_pod),
        cmocka_unit_test(test_commit_refuses_overcommit),
        cmocka_unit_test(test_release_refuses_underflow),
        cmocka_unit_test(test_cores_never_add_past_100),
        cmocka_unit_test(test_cores_memory_only_and_whole),
        cmocka_unit_test(test_gpupool_counts_cores_in_fragmentation),
        cmocka_unit_test(test_property_never_overcommits),
        cmocka_unit_test(test_gpupool_matches_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
