/* Unit tests: gpu-mem mode pieces without sockets or an API server:
 * units and the 4 MiB check (gpumem.c), the pod identity decision
 * (podidentity.c), pod parsing (podview.c), the ledger, PodResources decoding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>

#include "fixtures.h"
#include "gpumem.h"
#include "gpumem_ledger.h"
#include "plugin.h"
#include "podidentity.h"
#include "podresources.h"
#include "podresources.pb-c.h"
#include "podview.h"

/* ---- units and the kubelet's message limit ---------------------------------------- */

static void gpumem_config(struct gp_config *cfg, enum pool_mem_unit unit)
{
    fixture_config(cfg);
    cfg->resource_mode = RESOURCE_MODE_GPU_MEM;
    cfg->memory_unit = unit;
}

/* The computed size equals what the plugin really sends, NUMA known or not. */
static void test_snapshot_size_is_exact(void **state)
{
    (void)state;
    for (int numa_case = 0; numa_case < 3; numa_case++) {
        struct gpu_inventory inv;
        struct gp_config cfg;
        struct plugin_node node;
        char err[256];
        fixture_inventory(&inv, 4, 0);
        for (size_t g = 0; g < inv.count; g++) {
            inv.gpus[g].memory_bytes = (unsigned long long)(g + 1) * 3 << 30;
            inv.gpus[g].numa_node = numa_case == 0 ? GPU_NUMA_UNKNOWN : numa_case == 1 ? 0 : 200;
        }
        gpumem_config(&cfg, POOL_UNIT_GIB);
        assert_int_equal(plugin_node_init(&node, &cfg, &inv, err, sizeof err), 0);
        assert_int_equal(node.resources.resources[0].device_count, 3 + 6 + 9 + 12);
        assert_string_equal(node.resources.resources[0].name, "aliyun.com/gpu-mem");
        /* the longest health string */
        assert_int_equal(node_state_set_all_health(plugin_node_state(&node), false), inv.count);
        struct rpc_handlers h = plugin_node_handlers(&node, 0);
        struct rpc_buf buf;
        uint64_t gen;
        assert_int_equal(h.snapshot(h.ctx, &buf, &gen), 0);
        assert_int_equal(buf.len, gpumem_snapshot_size(&inv, POOL_UNIT_GIB));
        free(buf.data);
        plugin_node_free(&node);
        fixture_inventory_free(&inv);
    }
}

static void test_unit_ids_and_mib_limit(void **state)
{
    (void)state;
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct resource_set set;
    char err[512];
    fixture_inventory(&inv, 8, 0);
    for (size_t g = 0; g < inv.count; g++)
        inv.gpus[g].memory_bytes = 80ull << 30;
    gpumem_config(&cfg, POOL_UNIT_GIB);
    assert_int_equal(gpumem_resource_build(&inv, &cfg, &set, err, sizeof err), 0);
    assert_int_equal(set.resources[0].device_count, 640);
    char want[160];
    snprintf(want, sizeof want, "%s-_-79", inv.gpus[7].uuid);
    assert_string_equal(set.resources[0].devices[639].id, want);
    assert_int_equal(set.resources[0].devices[639].gpu, 7);
    resource_set_free(&set);

    cfg.memory_unit = POOL_UNIT_MIB;
    assert_int_equal(gpumem_resource_build(&inv, &cfg, &set, err, sizeof err), -1);
    assert_non_null(strstr(err, "655360 MiB devices"));
    assert_non_null(strstr(err, "use --gpu-memory-unit=GiB"));
    fixture_inventory_free(&inv);
}

static void test_whole_gpu_features_refused(void **state)
{
    (void)state;
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct resource_set set;
    char err[512];
    fixture_inventory(&inv, 2, 0);
    gpumem_config(&cfg, POOL_UNIT_GIB);
    inv.gpus[1].mig_enabled = true;
    assert_int_equal(gpumem_resource_build(&inv, &cfg, &set, err, sizeof err), -1);
    assert_non_null(strstr(err, "has MIG enabled"));
    inv.gpus[1].mig_enabled = false;
    cfg.mig_strategy = MIG_STRATEGY_MIXED;
    assert_int_equal(gpumem_resource_build(&inv, &cfg, &set, err, sizeof err), -1);
    assert_non_null(strstr(err, "--mig-strategy"));
    fixture_inventory_free(&inv);
}

static void test_parse_idx(void **state)
{
    (void)state;
    struct gpu_inventory inv;
    struct gpumem_assignment as;
    char err[256];
    fixture_inventory(&inv, 4, 0);
    assert_int_equal(gpumem_parse_idx("2", &inv, &as, err, sizeof err), 0);
    assert_int_equal(as.gpu_count, 1);
    assert_int_equal(as.gpus[0], 2);
    assert_int_equal(gpumem_parse_idx("3,0", &inv, &as, err, sizeof err), 0);
    assert_int_equal(as.gpu_count, 2);
    assert_int_equal(as.gpus[0], 3);
    assert_int_equal(as.gpus[1], 0);
    const char *bad[] = {"", "x", "1,", ",1", "1,1", "4", "-1", "1 ", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(gpumem_parse_idx(bad[i], &inv, &as, err, sizeof err), -1);
    assert_int_equal(gpumem_parse_idx(NULL, &inv, &as, err, sizeof err), -1);
    assert_int_equal(gpumem_parse_idx("4", &inv, &as, err, sizeof err), -1);
    assert_non_null(strstr(err, "names GPU 4, which this node does not have"));
    fixture_inventory_free(&inv);
}

static void test_container_edits(void **state)
{
    (void)state;
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct resource_set set;
    struct gpumem_assignment as;
    struct arena a = ARENA_INIT;
    struct container_edits out;
    struct edits_options opts = {.device_list = EDITS_LIST_ENVVAR};
    char err[256];
    fixture_inventory(&inv, 4, 0);
    gpumem_config(&cfg, POOL_UNIT_GIB);
    assert_int_equal(gpumem_resource_build(&inv, &cfg, &set, err, sizeof err), 0);
    assert_int_equal(gpumem_parse_idx("1,3", &inv, &as, err, sizeof err), 0);
    as.pod_units = 8;
    container_edits_init(&out, &a);
    assert_int_equal(gpumem_container_edits(&opts, cfg.memory_unit, &inv, &set.resources[0], &as, 3,
                                            &out, err, sizeof err),
                     0);
    char want[256];
    snprintf(want, sizeof want, "%s,%s", inv.gpus[1].uuid, inv.gpus[3].uuid);
    assert_string_equal(container_edits_env(&out, "NVIDIA_VISIBLE_DEVICES"), want);
    assert_string_equal(container_edits_env(&out, "ALIYUN_COM_GPU_MEM_IDX"), "1,3");
    assert_string_equal(container_edits_env(&out, "ALIYUN_COM_GPU_MEM_POD"), "8");
    assert_string_equal(container_edits_env(&out, "ALIYUN_COM_GPU_MEM_CONTAINER"), "3");
    assert_string_equal(container_edits_env(&out, "ALIYUN_COM_GPU_MEM_DEV"), "40");
    arena_free(&a);
    opts.id_by_index = true;
    container_edits_init(&out, &a);
    assert_int_equal(gpumem_container_edits(&opts, cfg.memory_unit, &inv, &set.resources[0], &as, 3,
                                            &out, err, sizeof err),
                     0);
    assert_string_equal(container_edits_env(&out, "NVIDIA_VISIBLE_DEVICES"), "1,3");
    /* MiB units: _DEV counts the first GPU's MiB. */
    arena_free(&a);
    container_edits_init(&out, &a);
    assert_int_equal(gpumem_container_edits(&opts, POOL_UNIT_MIB, &inv, &set.resources[0], &as, 3,
                                            &out, err, sizeof err),
                     0);
    char dev[32];
    snprintf(dev, sizeof dev, "%llu", inv.gpus[1].memory_bytes >> 20);
    assert_string_equal(container_edits_env(&out, "ALIYUN_COM_GPU_MEM_DEV"), dev);
    arena_free(&a);
    resource_set_free(&set);
    fixture_inventory_free(&inv);
}

/* ---- pod identity ---------------------------------------------------------------------- */

struct world {
    struct gpumem_pod pods[8];
    size_t n;
    unsigned progress[8];
};

static const struct gpumem_pod *w_lookup(void *ctx, const char *ns, const char *name)
{
    struct world *w = ctx;
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->pods[i].ns, ns) == 0 && strcmp(w->pods[i].name, name) == 0)
            return &w->pods[i];
    return NULL;
}

static unsigned w_progress(void *ctx, const char *uid)
{
    struct world *w = ctx;
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->pods[i].uid, uid) == 0)
            return w->progress[i];
    return 0;
}

static struct gpumem_container ctr_a[] = {{"main", 4, false, false, 0}};
static struct gpumem_container ctr_init_app[] = {{"init", 2, true, false, 0},
                                                 {"main", 4, false, false, 0}};
static struct gpumem_container ctr_init_only[] = {{"init", 3, true, false, 0}};

static struct gpumem_pod *w_add(struct world *w, const char *name, struct gpumem_container *c,
                                size_t nc)
{
    struct gpumem_pod *p = &w->pods[w->n++];
    memset(p, 0, sizeof *p);
    p->ns = "default";
    p->name = (char *)name;
    p->uid = (char *)name; /* unique enough here */
    p->idx = "0";
    p->containers = c;
    p->n_containers = nc;
    return p;
}

/* List entries: pod names with "+" for an app container holding devices. */
static struct pr_container listed_main_with = {"main", 4};
static struct pr_container listed_main_without = {"main", 0};

static struct pr_pod listed(const char *name, bool has_devices)
{
    struct pr_pod p = {.ns = "default",
                       .name = (char *)name,
                       .n_containers = 1,
                       .containers = has_devices ? &listed_main_with : &listed_main_without};
    return p;
}

static void test_identity_equal_pods(void **state)
{
    (void)state;
    struct world w = {0};
    struct identity_source src = {&w, w_lookup, w_progress};
    struct identity_decision d;
    w_add(&w, "a", ctr_a, 1);
    w_add(&w, "b", ctr_a, 1);
    /* the kubelet admits b; a is not in its pod manager yet */
    struct pr_pod l1[] = {listed("b", false)};
    struct pr_list list = {1, l1};
    assert_int_equal(identify_pod(&src, &list, 4, &d), IDENTITY_FOUND);
    assert_string_equal(d.pod->name, "b");
    assert_false(d.repeat);
    /* both in the pod manager without devices (a was rejected, still Pending) */
    struct pr_pod l2[] = {listed("a", false), listed("b", false)};
    struct pr_list list2 = {2, l2};
    assert_int_equal(identify_pod(&src, &list2, 4, &d), IDENTITY_WAIT);
    assert_non_null(strstr(d.why, "default/a, default/b"));
    w.pods[0].terminal = true; /* its Failed status arrived */
    assert_int_equal(identify_pod(&src, &list2, 4, &d), IDENTITY_FOUND);
    assert_string_equal(d.pod->name, "b");
    /* a pod the watch has not delivered: wait, even with a single candidate */
    struct pr_pod l3[] = {listed("b", false), listed("zz", false)};
    struct pr_list list3 = {2, l3};
    assert_int_equal(identify_pod(&src, &list3, 4, &d), IDENTITY_WAIT);
    assert_non_null(strstr(d.why, "default/zz"));
    /* ... unless the API deleted it (tombstone) */
    struct gpumem_pod *zz = w_add(&w, "zz", ctr_a, 1);
    zz->deleted = true;
    assert_int_equal(identify_pod(&src, &list3, 4, &d), IDENTITY_FOUND);
}

static void test_identity_done_and_repeat(void **state)
{
    (void)state;
    struct world w = {0};
    struct identity_source src = {&w, w_lookup, w_progress};
    struct identity_decision d;
    w_add(&w, "old", ctr_a, 1);
    w.progress[0] = 1;
    w_add(&w, "new", ctr_a, 1);
    /* old holds its devices: done whatever the ledger says */
    struct pr_pod l1[] = {listed("old", true), listed("new", false)};
    struct pr_list list = {2, l1};
    assert_int_equal(identify_pod(&src, &list, 4, &d), IDENTITY_FOUND);
    assert_string_equal(d.pod->name, "new");
    /* kubelet restarted without its checkpoint: old is re-allocated */
    struct pr_pod l2[] = {listed("old", false)};
    struct pr_list list2 = {1, l2};
    assert_int_equal(identify_pod(&src, &list2, 4, &d), IDENTITY_FOUND);
    assert_string_equal(d.pod->name, "old");
    assert_true(d.repeat);
    /* a repeat and a fresh pod at once cannot both be admitted: wait */
    struct pr_pod l3[] = {listed("old", false), listed("new", false)};
    struct pr_list list3 = {2, l3};
    assert_int_equal(identify_pod(&src, &list3, 4, &d), IDENTITY_WAIT);
    /* the annotation stands in for a lost ledger */
    w.progress[0] = 0;
    w.pods[0].assigned = true;
    assert_int_equal(identify_pod(&src, &list2, 4, &d), IDENTITY_FOUND);
    assert_true(d.repeat);
}

/* The container's Allocate ordinal (its region directory, isolation.h):
 * the ledger's count for a fresh call, the first container of the size
 * still lacking devices for a repeat. */
static struct gpumem_container ctr_three[] = {
    {"init", 2, true, false, 0}, {"a", 2, false, false, 0}, {"b", 2, false, false, 0}};

static void test_identity_container_ordinal(void **state)
{
    (void)state;
    struct world w = {0};
    struct identity_source src = {&w, w_lookup, w_progress};
    struct identity_decision d;
    w_add(&w, "p", ctr_three, 3);
    struct pr_container none[] = {{"a", 0}, {"b", 0}};
    struct pr_pod l[] = {{.ns = "default", .name = "p", .n_containers = 2, .containers = none}};
    struct pr_list list = {1, l};
    for (unsigned done = 0; done < 3; done++) {
        w.progress[0] = done;
        assert_int_equal(identify_pod(&src, &list, 2, &d), IDENTITY_FOUND);
        assert_false(d.repeat);
        assert_int_equal(d.container, done);
    }
    /* answered in full; the kubelet re-allocates: a lacks devices, then only b */
    w.progress[0] = 3;
    assert_int_equal(identify_pod(&src, &list, 2, &d), IDENTITY_FOUND);
    assert_true(d.repeat);
    assert_int_equal(d.container, 1);
    none[0].units = 2;
    assert_int_equal(identify_pod(&src, &list, 2, &d), IDENTITY_FOUND);
    assert_true(d.repeat);
    assert_int_equal(d.container, 2);
}

static void test_identity_init_containers(void **state)
{
    (void)state;
    struct world w = {0};
    struct identity_source src = {&w, w_lookup, w_progress};
    struct identity_decision d;
    w_add(&w, "p", ctr_init_app, 2);
    struct pr_pod l[] = {listed("p", false)};
    struct pr_list list = {1, l};
    assert_int_equal(identify_pod(&src, &list, 2, &d), IDENTITY_FOUND); /* the init container */
    assert_int_equal(identify_pod(&src, &list, 4, &d), IDENTITY_FAIL);  /* not yet the app one */
    assert_non_null(strstr(d.why, "expects a request of 2"));
    w.progress[0] = 1;
    assert_int_equal(identify_pod(&src, &list, 4, &d), IDENTITY_FOUND);
    /* init-only pods: done once answered, never taken for a re-Allocate */
    struct world w2 = {0};
    struct identity_source src2 = {&w2, w_lookup, w_progress};
    w_add(&w2, "io", ctr_init_only, 1);
    w2.progress[0] = 1;
    w_add(&w2, "eq", (struct gpumem_container[]){{"main", 3, false, false, 0}}, 1);
    struct pr_pod l2[] = {{.ns = "default", .name = "io", .n_containers = 0},
                          {.ns = "default", .name = "eq", .n_containers = 0}};
    struct pr_list list2 = {2, l2};
    assert_int_equal(identify_pod(&src2, &list2, 3, &d), IDENTITY_FOUND);
    assert_string_equal(d.pod->name, "eq");
}

static void test_identity_bad_and_none(void **state)
{
    (void)state;
    struct world w = {0};
    struct identity_source src = {&w, w_lookup, w_progress};
    struct identity_decision d;
    struct gpumem_pod *p = w_add(&w, "q", ctr_a, 1);
    p->bad = "the aliyun.com/gpu-mem limit of container \"main\" is not a whole number of units";
    struct pr_pod l[] = {listed("q", false)};
    struct pr_list list = {1, l};
    assert_int_equal(identify_pod(&src, &list, 4, &d), IDENTITY_FAIL);
    assert_non_null(strstr(d.why, "not a whole number"));
    struct pr_list empty = {0, NULL};
    assert_int_equal(identify_pod(&src, &empty, 4, &d), IDENTITY_FAIL);
    assert_non_null(strstr(d.why, "is waiting for aliyun.com/gpu-mem"));
}

/* ---- pods from JSON -------------------------------------------------------------------- */

static void test_pod_parse(void **state)
{
    (void)state;
    json_error_t jerr;
    json_t *obj = json_loads(
        "{\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\",\"uid\":\"u-1\",\"annotations\":"
        "{\"ALIYUN_COM_GPU_MEM_IDX\":\"1,2\",\"ALIYUN_COM_GPU_MEM_POD\":\"6\","
        "\"ALIYUN_COM_GPU_MEM_ASSIGNED\":\"true\"}},"
        "\"spec\":{\"initContainers\":[{\"name\":\"i\",\"resources\":{\"limits\":"
        "{\"aliyun.com/gpu-mem\":\"2\"}}}],\"containers\":[{\"name\":\"a\"},{\"name\":\"b\","
        "\"resources\":{\"limits\":{\"aliyun.com/gpu-mem\":4}}}]},"
        "\"status\":{\"phase\":\"Running\"}}",
        0, &jerr);
    assert_non_null(obj);
    struct gpumem_pod p;
    char err[128];
    assert_int_equal(gpumem_pod_parse(obj, &p, err, sizeof err), 0);
    assert_string_equal(p.ns, "ns");
    assert_string_equal(p.uid, "u-1");
    assert_string_equal(p.idx, "1,2");
    assert_true(p.has_pod_units);
    assert_int_equal(p.pod_units, 6);
    assert_true(p.assigned);
    assert_false(p.terminal);
    assert_null(p.bad);
    assert_int_equal(p.n_containers, 2);
    assert_string_equal(p.containers[0].name, "i");
    assert_true(p.containers[0].init);
    assert_string_equal(p.containers[1].name, "b");
    assert_int_equal(p.containers[1].units, 4);
    gpumem_pod_clear(&p);
    json_decref(obj);
    obj = json_loads("{\"metadata\":{\"name\":\"x\"},\"spec\":{\"containers\":[{\"name\":\"c\","
                     "\"resources\":{\"limits\":{\"aliyun.com/gpu-mem\":\"1500m\"}}}]},"
                     "\"status\":{\"phase\":\"Failed\"}}",
                     0, &jerr);
    assert_int_equal(gpumem_pod_parse(obj, &p, err, sizeof err), 0);
    assert_true(p.terminal);
    assert_non_null(p.bad);
    gpumem_pod_clear(&p);
    json_decref(obj);
    /* "1k" is a quantity like any other (the view refused it before poolapi). */
    obj = json_loads("{\"metadata\":{\"name\":\"k\"},\"spec\":{\"containers\":[{\"name\":\"c\","
                     "\"resources\":{\"limits\":{\"aliyun.com/gpu-mem\":\"1k\"}}}]}}",
                     0, &jerr);
    assert_int_equal(gpumem_pod_parse(obj, &p, err, sizeof err), 0);
    assert_null(p.bad);
    assert_int_equal(p.n_containers, 1);
    assert_int_equal(p.containers[0].units, 1000);
    gpumem_pod_clear(&p);
    json_decref(obj);
    /* Through poolapi_pod_containers: a list that is not an array makes the
     * pod unreadable instead of one without gpu-mem containers. */
    obj = json_loads("{\"metadata\":{\"name\":\"m\"},\"spec\":{\"initContainers\":{},"
                     "\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":"
                     "{\"aliyun.com/gpu-mem\":\"2\"}}}]}}",
                     0, &jerr);
    assert_int_equal(gpumem_pod_parse(obj, &p, err, sizeof err), 0);
    assert_non_null(p.bad);
    assert_non_null(strstr(p.bad, "spec.initContainers must be an array"));
    gpumem_pod_clear(&p);
    json_decref(obj);
    /* ALIYUN_COM_GPU_MEM_POD is a string (poolapi_gpu_mem_pod): a JSON number is
     * not taken, so the plugin totals the containers itself. */
    obj = json_loads("{\"metadata\":{\"name\":\"n\",\"annotations\":"
                     "{\"ALIYUN_COM_GPU_MEM_POD\":6}},\"spec\":{}}",
                     0, &jerr);
    assert_int_equal(gpumem_pod_parse(obj, &p, err, sizeof err), 0);
    assert_false(p.has_pod_units);
    assert_int_equal(p.pod_units, 0);
    gpumem_pod_clear(&p);
    json_decref(obj);
    obj = json_loads("[1]", 0, &jerr);
    assert_int_equal(gpumem_pod_parse(obj, &p, err, sizeof err), -1);
    json_decref(obj);
}

/* ---- the ledger -------------------------------------------------------------------------- */

static bool keep_a(void *ctx, const char *uid)
{
    (void)ctx;
    return strcmp(uid, "aaaa-1") == 0;
}

static void test_ledger(void **state)
{
    (void)state;
    char dir[] = "/tmp/gp-ledger-XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct gpumem_ledger *l;
    char err[512];
    assert_int_equal(gpumem_ledger_open(dir, &l, err, sizeof err), 0);
    assert_int_equal(gpumem_ledger_get(l, "aaaa-1"), 0);
    assert_int_equal(gpumem_ledger_set(l, "aaaa-1", 2, err, sizeof err), 0);
    assert_int_equal(gpumem_ledger_set(l, "bbbb-2", 1, err, sizeof err), 0);
    assert_int_equal(gpumem_ledger_set(l, "../evil", 1, err, sizeof err), -1);
    gpumem_ledger_close(l);
    assert_int_equal(gpumem_ledger_open(dir, &l, err, sizeof err), 0); /* a restart */
    assert_int_equal(gpumem_ledger_get(l, "aaaa-1"), 2);
    assert_int_equal(gpumem_ledger_get(l, "bbbb-2"), 1);
    assert_int_equal(gpumem_ledger_prune(l, keep_a, NULL), 1);
    assert_int_equal(gpumem_ledger_count(l), 1);
    gpumem_ledger_close(l);
    assert_int_equal(gpumem_ledger_open(dir, &l, err, sizeof err), 0);
    assert_int_equal(gpumem_ledger_get(l, "bbbb-2"), 0);
    gpumem_ledger_close(l);
    char path[128];
    snprintf(path, sizeof path, "%s/gpumem/aaaa-1", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/gpumem", dir);
    rmdir(path);
    rmdir(dir);
    assert_int_equal(gpumem_ledger_open("/proc/no-such-dir", &l, err, sizeof err), -1);
    assert_non_null(strstr(err, "--state-dir"));
}

/* D9 of the reliability review: a FIFO named like a UID hung start-up in
 * fopen(), a symlink was followed, "-1" read as UINT_MAX. alarm() turns a
 * hang into a failure instead of a stuck test. */
static void put(const char *dir, const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/gpumem/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void test_ledger_hostile_entries(void **state)
{
    (void)state;
    char dir[] = "/tmp/gp-ledger-XXXXXX", sub[128], path[256], target[256];
    assert_non_null(mkdtemp(dir));
    snprintf(sub, sizeof sub, "%s/gpumem", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    put(dir, "good-1", "3\n");
    put(dir, "minus-1", "-1\n");
    put(dir, "garbage-1", "3x\n");
    put(dir, "huge-1", "99999999999\n");
    snprintf(target, sizeof target, "%s/outside", dir);
    FILE *f = fopen(target, "w");
    assert_non_null(f);
    fputs("7\n", f);
    assert_int_equal(fclose(f), 0);
    snprintf(path, sizeof path, "%s/link-1", sub);
    assert_int_equal(symlink(target, path), 0);
    snprintf(path, sizeof path, "%s/fifo-1", sub);
    assert_int_equal(mkfifo(path, 0600), 0);
    snprintf(path, sizeof path, "%s/dir-1", sub);
    assert_int_equal(mkdir(path, 0700), 0);

    struct gpumem_ledger *l;
    char err[512];
    alarm(10);
    assert_int_equal(gpumem_ledger_open(dir, &l, err, sizeof err), 0);
    alarm(0);
    assert_int_equal(gpumem_ledger_get(l, "good-1"), 3);
    assert_int_equal(gpumem_ledger_get(l, "link-1"), 0);
    assert_int_equal(gpumem_ledger_get(l, "fifo-1"), 0);
    assert_int_equal(gpumem_ledger_get(l, "dir-1"), 0);
    assert_int_equal(gpumem_ledger_get(l, "minus-1"), 0);
    assert_int_equal(gpumem_ledger_get(l, "garbage-1"), 0);
    assert_int_equal(gpumem_ledger_get(l, "huge-1"), 0);
    assert_int_equal(gpumem_ledger_count(l), 1);
    gpumem_ledger_close(l);
    const char *names[] = {"good-1", "minus-1", "garbage-1", "huge-1", "link-1", "fifo-1"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", sub, names[i]);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/dir-1", sub);
    rmdir(path);
    unlink(target);
    rmdir(sub);
    rmdir(dir);
}

/* ---- PodResources --------------------------------------------------------------------------- */

static void test_podresources_decode(void **state)
{
    (void)state;
    char *ids[] = {"u1", "u2", "u3"};
    char *other[] = {"GPU-x"};
    V1__ContainerDevices mem = V1__CONTAINER_DEVICES__INIT, gpu = V1__CONTAINER_DEVICES__INIT;
    mem.resource_name = "aliyun.com/gpu-mem";
    mem.n_device_ids = 3;
    mem.device_ids = ids;
    gpu.resource_name = "nvidia.com/gpu";
    gpu.n_device_ids = 1;
    gpu.device_ids = other;
    V1__ContainerDevices *devs[] = {&mem, &gpu};
    V1__ContainerResources c1 = V1__CONTAINER_RESOURCES__INIT, c2 = V1__CONTAINER_RESOURCES__INIT;
    c1.name = "a";
    c1.n_devices = 2;
    c1.devices = devs;
    c2.name = "b";
    V1__ContainerResources *cs[] = {&c1, &c2};
    V1__PodResources pod = V1__POD_RESOURCES__INIT;
    pod.name = "p";
    pod.namespace_ = "ns";
    pod.n_containers = 2;
    pod.containers = cs;
    V1__PodResources *pods[] = {&pod};
    V1__ListPodResourcesResponse resp = V1__LIST_POD_RESOURCES_RESPONSE__INIT;
    resp.n_pod_resources = 1;
    resp.pod_resources = pods;
    uint8_t buf[512];
    size_t len = v1__list_pod_resources_response__pack(&resp, buf);
    struct pr_list list;
    char err[128];
    assert_int_equal(podresources_decode(buf, len, "aliyun.com/gpu-mem", &list, err, sizeof err),
                     0);
    assert_int_equal(list.n_pods, 1);
    assert_string_equal(list.pods[0].ns, "ns");
    assert_int_equal(list.pods[0].n_containers, 2);
    assert_int_equal(list.pods[0].containers[0].units, 3);
    assert_int_equal(list.pods[0].containers[1].units, 0);
    pr_list_free(&list);
    buf[0] = 0xff;
    assert_int_equal(podresources_decode(buf, 3, "aliyun.com/gpu-mem", &list, err, sizeof err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapshot_size_is_exact),
        cmocka_unit_test(test_unit_ids_and_mib_limit),
        cmocka_unit_test(test_whole_gpu_features_refused),
        cmocka_unit_test(test_parse_idx),
        cmocka_unit_test(test_container_edits),
        cmocka_unit_test(test_identity_equal_pods),
        cmocka_unit_test(test_identity_done_and_repeat),
        cmocka_unit_test(test_identity_container_ordinal),
        cmocka_unit_test(test_identity_init_containers),
        cmocka_unit_test(test_identity_bad_and_none),
        cmocka_unit_test(test_pod_parse),
        cmocka_unit_test(test_ledger),
        cmocka_unit_test(test_ledger_hostile_entries),
        cmocka_unit_test(test_podresources_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
