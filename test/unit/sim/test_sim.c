/* test_sim.c -- openb CSV loaders (both pod formats, every error with
 * file:line), the workload protocol (130% demand by resampling or
 * truncation, seeded determinism) and small replays. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "replay.h"
#include "trace.h"

#define NODE_HEADER "sn,cpu_milli,memory_mib,gpu,model\n"
#define POD_HEADER                                                                      \
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time," \
    "deletion_time,scheduled_time\n"
#define POD_HEADER_SHORT "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"

/* Writes text to a fresh temporary file; returns its path (static buffer
 * per slot so two files can be alive at once). */
static const char *write_tmp(int slot, const char *text)
{
    static char paths[2][64];
    snprintf(paths[slot], sizeof(paths[slot]), "/tmp/gp-test-sim-XXXXXX");
    int fd = mkstemp(paths[slot]);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    return paths[slot];
}

static void load_ok(struct sim_trace *t, const char *nodes, const char *pods)
{
    char err[256];
    const char *np = write_tmp(0, nodes), *pp = write_tmp(1, pods);
    sim_trace_init(t);
    int rc = sim_load_nodes(t, np, err, sizeof(err));
    if (rc == 0)
        rc = sim_load_pods(t, pp, err, sizeof(err));
    unlink(np);
    unlink(pp);
    if (rc != 0)
        fail_msg("load failed: %s", err);
}

/* Loads a pod file that must fail; checks err holds "<path>:<line>: <what>". */
static void pods_fail(const char *text, int line, const char *what)
{
    struct sim_trace t;
    sim_trace_init(&t);
    char err[256], want[128];
    const char *path = write_tmp(0, text);
    assert_int_equal(sim_load_pods(&t, path, err, sizeof(err)), -1);
    snprintf(want, sizeof(want), "%s:%d: ", path, line);
    unlink(path);
    if (strncmp(err, want, strlen(want)) != 0 || !strstr(err, what))
        fail_msg("error '%s' lacks '%s' + '%s'", err, want, what);
    assert_int_equal(t.pod_count, 0);
    sim_trace_free(&t);
}

static void nodes_fail(const char *text, int line, const char *what)
{
    struct sim_trace t;
    sim_trace_init(&t);
    char err[256], want[128];
    const char *path = write_tmp(0, text);
    assert_int_equal(sim_load_nodes(&t, path, err, sizeof(err)), -1);
    snprintf(want, sizeof(want), "%s:%d: ", path, line);
    unlink(path);
    if (strncmp(err, want, strlen(want)) != 0 || !strstr(err, what))
        fail_msg("error '%s' lacks '%s' + '%s'", err, want, what);
    assert_int_equal(t.node_count, 0);
    sim_trace_free(&t);
}

static void test_load_both_pod_formats(void **state)
{
    (void)state;
    struct sim_trace t;
    load_ok(&t, NODE_HEADER "n0,64000,262144,2,P100\nn1,96000,393216,8,G2\r\n",
            POD_HEADER "p0,12000,16384,1,1000,,LS,Running,0,1,0\n"
                       "p1,6000,12288,1,460,V100M16|G2,LS,Running,0,1,0\n"
                       "\n"
                       "p2,8000,1024,0,0,,BE,Running,0,1,0\n"
                       "p3,8000,1024,4,1000,,BE,Running,0,1,0\n");
    assert_int_equal(t.node_count, 2);
    assert_string_equal(t.nodes[1].name, "n1");
    assert_int_equal(t.nodes[1].gpu_count, 8);
    assert_int_equal(t.nodes[1].gpu_total[7], 1000);
    assert_int_equal(t.nodes[0].cpu_allocatable, 64000);
    assert_int_equal(t.nodes[0].memory_allocatable, 262144);
    assert_int_equal(sim_trace_capacity_milli(&t), 10000);
    assert_int_equal(t.pod_count, 4);
    assert_true(t.pods[0].req.whole);
    assert_int_equal(t.pods[0].req.gpu_count, 1);
    assert_int_equal(t.pods[0].demand_milli, 1000);
    assert_false(t.pods[1].req.whole);
    assert_int_equal(t.pods[1].req.units, 460);
    assert_int_equal(t.pods[1].demand_milli, 460);
    int g2 = placement_model_id(&t.models, "G2");
    int v100 = placement_model_id(&t.models, "V100M16");
    assert_int_equal(g2, t.nodes[1].model);
    assert_int_equal(t.pods[1].req.models, (UINT64_C(1) << g2) | (UINT64_C(1) << v100));
    assert_int_equal(t.pods[2].req.gpu_count, 0);
    assert_int_equal(t.pods[2].demand_milli, 0);
    assert_int_equal(t.pods[3].req.gpu_count, 4);
    assert_true(t.pods[3].req.whole);
    assert_int_equal(t.pods[3].demand_milli, 4000);
    sim_trace_free(&t);

    load_ok(&t, NODE_HEADER "n0,64000,262144,2,P100\n",
            POD_HEADER_SHORT "p0,12000,16384,8,1000\np1,1,1,1,50\n");
    assert_int_equal(t.pod_count, 2);
    assert_int_equal(t.pods[0].demand_milli, 8000);
    assert_int_equal(t.pods[1].req.units, 50);
    assert_int_equal(t.pods[1].req.models, 0);
    sim_trace_free(&t);
}

static void test_pod_errors(void **state)
{
    (void)state;
    pods_fail("", 0, "empty file");
    pods_fail("name,cpu,memory_mib,num_gpu,gpu_milli\n", 1, "header column 2 is 'cpu'");
    pods_fail("name,cpu_milli,memory_mib\n", 1, "header has 3 columns");
    pods_fail(POD_HEADER_SHORT, 1, "no pods");
    pods_fail(POD_HEADER_SHORT "p0,1,1,1\n", 2, "4 columns, expected 5");
    pods_fail(POD_HEADER_SHORT "p0,1,1,1,100\np1,x,1,1,100\n", 3, "cpu_milli: 'x'");
    pods_fail(POD_HEADER_SHORT "p0,-1,1,1,100\n", 2, "cpu_milli: '-1'");
    pods_fail(POD_HEADER_SHORT "p0,1,1.5,1,100\n", 2, "memory_mib: '1.5'");
    pods_fail(POD_HEADER_SHORT "p0,1,99999999999999999999,1,100\n", 2, "out of range");
    pods_fail(POD_HEADER_SHORT "p0,1,1,1,1001\n", 2, "gpu_milli: 1001 is out of range");
    pods_fail(POD_HEADER_SHORT "p0,1,1,1,0\n", 2, "gpu_milli is 0");
    pods_fail(POD_HEADER_SHORT "p0,1,1,0,300\n", 2, "without GPUs");
    pods_fail(POD_HEADER_SHORT "p0,1,1,,300\n", 2, "num_gpu: ''");
    pods_fail(POD_HEADER_SHORT ",1,1,1,300\n", 2, "empty pod name");
    pods_fail(POD_HEADER "p0,1,1,1,300,A||B,LS,Running,0,1,0\n", 2, "empty model name");
    pods_fail(POD_HEADER "p0,1,1,1,300,,LS,Running,0,1\n", 2, "10 columns, expected 11");
}

static void test_node_errors(void **state)
{
    (void)state;
    nodes_fail("", 0, "empty file");
    nodes_fail("sn,cpu_milli,memory_mib,gpus,model\n", 1, "header column 4 is 'gpus'");
    nodes_fail(NODE_HEADER, 1, "no nodes");
    nodes_fail(NODE_HEADER "n0,1,1,2,G2,extra\n", 2, "6 columns, expected 5");
    nodes_fail(NODE_HEADER "n0,1,1,17,G2\n", 2, "gpu: 17 is out of range");
    nodes_fail(NODE_HEADER "n0,1,1,2,\n", 2, "without a model");
    nodes_fail(NODE_HEADER "n0,1,1,2,G2\nn1,1,1e3,2,G2\n", 3, "memory_mib: '1e3'");

    /* more distinct models than the engine tracks */
    char text[8192] = NODE_HEADER;
    for (int i = 0; i <= PLACEMENT_MAX_MODELS; i++) {
        char line[64];
        snprintf(line, sizeof(line), "n%d,1,1,1,M%d\n", i, i);
        strcat(text, line);
    }
    nodes_fail(text, PLACEMENT_MAX_MODELS + 2, "more than");

    struct sim_trace t;
    sim_trace_init(&t);
    char err[256];
    assert_int_equal(sim_load_nodes(&t, "/nonexistent/nodes.csv", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "/nonexistent/nodes.csv: No such file"));
}

static void test_failed_load_keeps_earlier_trace(void **state)
{
    (void)state;
    struct sim_trace t;
    load_ok(&t, NODE_HEADER "n0,64000,262144,2,P100\n", POD_HEADER_SHORT "p0,1,1,1,100\n");
    char err[256];
    const char *bad = write_tmp(0, POD_HEADER_SHORT "p0,1,1,1,100\np1,1,1,1,bad\n");
    assert_int_equal(sim_load_pods(&t, bad, err, sizeof(err)), -1);
    unlink(bad);
    assert_int_equal(t.pod_count, 1);
    assert_int_equal(t.node_count, 1);
    sim_trace_free(&t);
}

/* ---- protocol ----------------------------------------------------------- */

static uint64_t workload_demand(const struct sim_trace *t, const size_t *order, size_t count)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < count; i++) {
        assert_true(order[i] < t->pod_count);
        sum += t->pods[order[i]].demand_milli;
    }
    return sum;
}

static void test_workload_resamples_to_target(void **state)
{
    (void)state;
    struct sim_trace t;
    /* capacity 10 GPUs = 10000 milli; pods demand 1000 + 500 + 0 */
    load_ok(&t, NODE_HEADER "n0,64000,262144,8,G2\nn1,64000,262144,2,T4\n",
            POD_HEADER_SHORT "a,1,1,1,1000\nb,1,1,1,500\nc,1,1,0,0\n");
    size_t *order, count;
    char err[128];
    assert_int_equal(sim_workload(&t, 42, 130, &order, &count, err, sizeof(err)), 0);
    uint64_t demand = workload_demand(&t, order, count);
    assert_true(demand >= 13000);
    assert_true(demand < 13000 + 1000); /* stops at the first pod reaching it */
    /* every original pod is there at least once */
    bool seen[3] = {false};
    for (size_t i = 0; i < count; i++)
        seen[order[i]] = true;
    assert_true(seen[0] && seen[1] && seen[2]);
    /* deterministic per seed, different across seeds */
    size_t *again, count2;
    assert_int_equal(sim_workload(&t, 42, 130, &again, &count2, err, sizeof(err)), 0);
    assert_int_equal(count, count2);
    assert_memory_equal(order, again, count * sizeof(*order));
    free(again);
    assert_int_equal(sim_workload(&t, 43, 130, &again, &count2, err, sizeof(err)), 0);
    assert_true(count != count2 || memcmp(order, again, count * sizeof(*order)) != 0);
    free(again);
    free(order);
    sim_trace_free(&t);
}

static void test_workload_truncates_excess(void **state)
{
    (void)state;
    struct sim_trace t;
    char pods[4096] = POD_HEADER_SHORT;
    for (int i = 0; i < 40; i++)
        strcat(pods, "p,1,1,1,1000\n");
    load_ok(&t, NODE_HEADER "n0,64000,262144,8,G2\nn1,64000,262144,2,T4\n", pods);
    size_t *order, count;
    char err[128];
    assert_int_equal(sim_workload(&t, 7, 130, &order, &count, err, sizeof(err)), 0);
    assert_int_equal(count, 13);
    assert_int_equal(workload_demand(&t, order, count), 13000);
    free(order);
    sim_trace_free(&t);
}

static void test_workload_errors(void **state)
{
    (void)state;
    struct sim_trace t;
    load_ok(&t, NODE_HEADER "n0,64000,262144,2,G2\n", POD_HEADER_SHORT "c,1,1,0,0\n");
    size_t *order, count;
    char err[128];
    assert_int_equal(sim_workload(&t, 1, 130, &order, &count, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "demand no GPU"));
    sim_trace_free(&t);
    load_ok(&t, NODE_HEADER "n0,64000,262144,0,\n", POD_HEADER_SHORT "a,1,1,1,100\n");
    assert_int_equal(sim_workload(&t, 1, 130, &order, &count, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "no GPUs"));
    sim_trace_free(&t);
}

static void test_rng(void **state)
{
    (void)state;
    struct sim_rng a, b;
    sim_rng_seed(&a, 42);
    sim_rng_seed(&b, 42);
    int counts[5] = {0};
    for (int i = 0; i < 5000; i++) {
        uint64_t x = sim_rng_below(&a, 5);
        assert_true(x < 5);
        assert_int_equal(x, sim_rng_below(&b, 5));
        counts[x]++;
    }
    for (int i = 0; i < 5; i++)
        assert_true(counts[i] > 800 && counts[i] < 1200);
    assert_int_equal(sim_rng_below(&a, 1), 0);
}

/* A replay never allocates more than capacity, honours CPU, and is
 * deterministic. Here CPU runs out first: 2 nodes x 4 cores, pods of
 * 3 cores each with a whole GPU: at most 2 per node. */
static void test_replay_respects_cpu(void **state)
{
    (void)state;
    struct sim_trace t;
    load_ok(&t, NODE_HEADER "n0,4000,1000,4,G2\nn1,4000,1000,4,G2\n",
            POD_HEADER_SHORT "a,3000,10,1,1000\n");
    for (int p = PLACEMENT_GPUPOOL; p <= PLACEMENT_SPREAD; p++) {
        struct sim_result r, again;
        char err[128];
        assert_int_equal(sim_replay(&t, (enum placement_policy)p, 5, 130, &r, err, sizeof(err)), 0);
        assert_int_equal(r.capacity_milli, 8000);
        assert_int_equal(r.alloc_milli, 2000); /* one 3-core pod per 4-core node */
        assert_int_equal(r.pods, 11);          /* 11 * 1000 >= 1.3 * 8000 */
        assert_int_equal(r.failed, 9);
        assert_true(r.alloc_pct == 25.0);
        assert_int_equal(sim_replay(&t, (enum placement_policy)p, 5, 130, &again, err, sizeof(err)),
                         0);
        assert_memory_equal(&r, &again, sizeof(r));
    }
    sim_trace_free(&t);
}

static void test_replay_shares_and_models(void **state)
{
    (void)state;
    struct sim_trace t;
    /* one T4 GPU and one G2 GPU; pods want half a G2 */
    load_ok(&t, NODE_HEADER "n0,64000,262144,1,T4\nn1,64000,262144,1,G2\n",
            POD_HEADER "a,1,1,1,500,G2,LS,Running,0,1,0\n");
    struct sim_result r;
    char err[128];
    assert_int_equal(sim_replay(&t, PLACEMENT_GPUPOOL, 1, 130, &r, err, sizeof(err)), 0);
    assert_int_equal(r.capacity_milli, 2000);
    assert_int_equal(r.alloc_milli, 1000); /* both halves of the G2, nothing on the T4 */
    assert_int_equal(r.pods, 6);
    assert_int_equal(r.failed, 4);
    sim_trace_free(&t);
}

/* Cores: 100 per GPU, a share asks ceil(gpu_milli / 10), whole GPUs none
 * of their own (they take every core); off clears them, skew keeps them
 * within 1..100 around gpu_milli / 10 and the same on every call. */
static void test_cores(void **state)
{
    (void)state;
    struct sim_trace t;
    load_ok(&t, NODE_HEADER "n0,64000,262144,2,T4\n",
            POD_HEADER "a,1,1,1,455,,LS,Running,0,1,0\n"
                       "b,1,1,1,1000,,LS,Running,0,1,0\n"
                       "c,1,1,0,0,,LS,Running,0,1,0\n"
                       "d,1,1,1,5,,LS,Running,0,1,0\n");
    assert_int_equal(t.nodes[0].cores_total[0], 100);
    assert_int_equal(t.nodes[0].cores_total[1], 100);
    assert_int_equal(t.pods[0].req.cores, 46);
    assert_int_equal(t.pods[1].req.cores, 0);
    assert_true(t.pods[1].req.whole);
    assert_int_equal(t.pods[2].req.cores, 0);
    assert_int_equal(t.pods[3].req.cores, 1);
    sim_trace_set_cores(&t, SIM_CORES_OFF);
    assert_int_equal(t.pods[0].req.cores + t.pods[3].req.cores, 0);
    sim_trace_set_cores(&t, SIM_CORES_SKEW);
    uint32_t skewed = t.pods[0].req.cores;
    assert_true(skewed >= 22 && skewed <= 69); /* 45.5 x [0.5, 1.5) */
    assert_true(t.pods[3].req.cores >= 1);
    sim_trace_set_cores(&t, SIM_CORES_SKEW);
    assert_int_equal(t.pods[0].req.cores, skewed);
    sim_trace_set_cores(&t, SIM_CORES_MILLI);
    assert_int_equal(t.pods[0].req.cores, 46);
    sim_trace_free(&t);
}

/* With cores that do not follow the units, a replay never books more than
 * 100 cores on a GPU: two pods of 300 milli whose cores are 60 cannot
 * share a GPU although their units would. */
static void test_replay_never_overbooks_cores(void **state)
{
    (void)state;
    struct sim_trace t;
    load_ok(&t, NODE_HEADER "n0,64000,262144,1,T4\n", POD_HEADER "a,1,1,1,300,,LS,Running,0,1,0\n");
    t.pods[0].req.cores = 60;
    struct sim_result r;
    char err[128];
    for (int p = 0; p < 3; p++) {
        assert_int_equal(sim_replay(&t, (enum placement_policy)p, 1, 130, &r, err, sizeof(err)), 0);
        assert_int_equal(r.alloc_milli, 300); /* one pod: 600 milli of units were free */
        assert_int_equal(r.failed, r.pods - 1);
    }
    sim_trace_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_both_pod_formats),
        cmocka_unit_test(test_pod_errors),
        cmocka_unit_test(test_node_errors),
        cmocka_unit_test(test_failed_load_keeps_earlier_trace),
        cmocka_unit_test(test_workload_resamples_to_target),
        cmocka_unit_test(test_workload_truncates_excess),
        cmocka_unit_test(test_workload_errors),
        cmocka_unit_test(test_rng),
        cmocka_unit_test(test_replay_respects_cpu),
        cmocka_unit_test(test_replay_shares_and_models),
        cmocka_unit_test(test_cores),
        cmocka_unit_test(test_replay_never_overbooks_cores),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
