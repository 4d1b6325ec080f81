/* test_cuda_core.c -- the isolation library's limits, shared region and
 * ledger, through their headers, with real processes where processes are
 * the point (races, SIGKILL, zombies, fork). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cuda_config.h"
#include "cuda_ledger.h"
#include "cuda_pidmap.h"
#include "cuda_region.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GiB (1LL << 30)
#define MiB (1LL << 20)

static char dir[] = "/tmp/gp-cuda-test-XXXXXX";

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void region_path(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

/* Polls cudareg_usage until it reads want or ms milliseconds have passed;
 * returns the last reading. */
static int64_t usage_within(struct cudareg *r, int64_t want, int ms)
{
    int64_t got = cudareg_usage(r);
    for (int i = 0; got != want && i < ms; i++) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
        got = cudareg_usage(r);
    }
    return got;
}

/* fork() for a helper process that must not outlive the test (a failed
 * assertion leaves the test function before it kills its helpers). */
static pid_t fork_tied(void)
{
    pid_t parent = getpid(), kid = fork();
    if (kid == 0 && (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent))
        _exit(96);
    return kid;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000 * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- limits ---------------------------------------------------------------- */

static void test_parse_size(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        int64_t want;
    } good[] = {
        {"0", 0},
        {"1073741824", GiB},
        {"1g", GiB},
        {"1G", GiB},
        {"1024m", GiB},
        {"1048576k", GiB},
        {"1GiB", GiB},
        {"1gb", GiB},
        {"2t", 2LL << 40},
        {"1Mi", MiB},
        {"8388607t", 8388607LL << 40},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int64_t v = -1;
        assert_int_equal(cudacfg_parse_size(good[i].s, &v), 0);
        assert_int_equal(v, good[i].want);
    }
    static const char *const bad[] = {"",
                                      "-1",
                                      "+1",
                                      " 1g",
                                      "1g ",
                                      "1x",
                                      "1.5g",
                                      "1gg",
                                      "g",
                                      "0x10",
                                      "1ib",
                                      "8388608t",
                                      "99999999999999999999",
                                      "9223372036854775808"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t v = 7;
        assert_int_equal(cudacfg_parse_size(bad[i], &v), -1);
        assert_int_equal(v, 7);
    }
    assert_int_equal(cudacfg_parse_size(NULL, NULL), -1);
}

static void test_config_variables(void **state)
{
    (void)state;
    struct cudacfg c;
    cudacfg_load(&c, NULL);
    assert_int_equal(c.state, CUDACFG_OFF);
    assert_int_equal(cudacfg_limit(&c, 0, 16 * GiB), 0);
    assert_string_equal(c.prefix, CUDACFG_DEFAULT_PREFIX);

    char *all[] = {"PATH=/bin",
                   "CUDA_DEVICE_MEMORY_LIMIT=4g",
                   "CUDA_DEVICE_MEMORY_LIMIT_1=1024m",
                   "CUDA_DEVICE_MEMORY_LIMIT_2=0",
                   "CUDA_DEVICE_MEMORY_SHARED_CACHE=/run/x/region",
                   NULL};
    cudacfg_load(&c, all);
    assert_int_equal(c.state, CUDACFG_ON);
    assert_int_equal(cudacfg_limit(&c, 0, 16 * GiB), 4 * GiB);
    assert_int_equal(cudacfg_limit(&c, 1, 16 * GiB), GiB);
    assert_int_equal(cudacfg_limit(&c, 2, 16 * GiB), 0); /* HAMi's 0: no limit */
    assert_int_equal(cudacfg_limit(&c, 63, 16 * GiB), 4 * GiB);
    assert_int_equal(cudacfg_limit(&c, 64, 16 * GiB), 0);
    assert_string_equal(c.prefix, "/run/x/region");

    /* gpushare's share: 4 of 16 units of a 16 GiB GPU; the CUDA variables win. */
    char *share[] = {"ALIYUN_COM_GPU_MEM_CONTAINER=4", "ALIYUN_COM_GPU_MEM_DEV=16", NULL};
    cudacfg_load(&c, share);
    assert_int_equal(c.state, CUDACFG_ON);
    assert_int_equal(cudacfg_limit(&c, 0, 16 * GiB), 4 * GiB);
    assert_int_equal(cudacfg_limit(&c, 1, 15 * GiB), 15 * GiB / 4);
    char *both[] = {"ALIYUN_COM_GPU_MEM_CONTAINER=4", "ALIYUN_COM_GPU_MEM_DEV=16",
                    "CUDA_DEVICE_MEMORY_LIMIT_0=2g", NULL};
    cudacfg_load(&c, both);
    assert_int_equal(cudacfg_limit(&c, 0, 16 * GiB), 2 * GiB);
    assert_int_equal(cudacfg_limit(&c, 1, 16 * GiB), 4 * GiB);
}

static void test_config_broken_fails_closed(void **state)
{
    (void)state;
    static const char *const cases[][3] = {
        {"CUDA_DEVICE_MEMORY_LIMIT=4 GiB", NULL, "CUDA_DEVICE_MEMORY_LIMIT=\"4 GiB\""},
        {"CUDA_DEVICE_MEMORY_LIMIT_0=-1", NULL, "CUDA_DEVICE_MEMORY_LIMIT_0=\"-1\""},
        {"CUDA_DEVICE_MEMORY_LIMIT_64=1g", NULL, "device ordinal"},
        {"CUDA_DEVICE_MEMORY_LIMIT_x=1g", NULL, "device ordinal"},
        /* D14: a limit whose name lost its ordinal was ignored (no limit). */
        {"CUDA_DEVICE_MEMORY_LIMIT_=4g", NULL, "CUDA_DEVICE_MEMORY_LIMIT_=\"4g\""},
        {"CUDA_DEVICE_MEMORY_LIMIT_01=1g", "CUDA_DEVICE_MEMORY_LIMIT_1=2g", "device ordinal"},
        {"CUDA_DEVICE_MEMORY_LIMIT_1x=1g", NULL, "device ordinal"},
        {"CUDA_DEVICE_MEMORY_LIMIT_-1=1g", NULL, "device ordinal"},
        {"ALIYUN_COM_GPU_MEM_CONTAINER=4", NULL, "ALIYUN_COM_GPU_MEM_DEV"},
        {"ALIYUN_COM_GPU_MEM_CONTAINER=4", "ALIYUN_COM_GPU_MEM_DEV=0", "positive"},
        {"ALIYUN_COM_GPU_MEM_CONTAINER=4g", "ALIYUN_COM_GPU_MEM_DEV=16", "number of units"},
        /* D14: a share of 0 units meant no limit at all. */
        {"ALIYUN_COM_GPU_MEM_CONTAINER=0", "ALIYUN_COM_GPU_MEM_DEV=16",
         "ALIYUN_COM_GPU_MEM_CONTAINER=\"0\" is not a positive number"},
        {"ALIYUN_COM_GPU_MEM_DEV=16", NULL, "ALIYUN_COM_GPU_MEM_CONTAINER=\"\""},
        {"CUDA_DEVICE_MEMORY_LIMIT=1g", "CUDA_DEVICE_MEMORY_SHARED_CACHE=", "usable path"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *env[] = {"PATH=/bin", (char *)cases[i][0], (char *)cases[i][1], NULL};
        struct cudacfg c;
        cudacfg_load(&c, env);
        if (c.state != CUDACFG_BROKEN || strstr(c.why, cases[i][2]) == NULL)
            fail_msg("%s %s: state %d, \"%s\"", cases[i][0], cases[i][1] ? cases[i][1] : "",
                     (int)c.state, c.why);
        assert_int_equal(cudacfg_limit(&c, 0, 16 * GiB), 0);
        assert_int_equal(cudacfg_container_limit(&c, 0, 16 * GiB), 0);
    }
    /* Names that only look alike are not ours. */
    char *other[] = {"CUDA_DEVICE_MEMORY_LIMITS=1g", "XCUDA_DEVICE_MEMORY_LIMIT_0=1g",
                     "CUDA_DEVICE_MEMORY_LIMIT", NULL};
    struct cudacfg c;
    cudacfg_load(&c, other);
    assert_int_equal(c.state, CUDACFG_OFF);
}

/* The DRA driver's form: limits and region prefixes keyed by the device's
 * UUID (a container holding several claims), winning over the ordinal
 * forms; NVML's MIG-<hex> and the library's GPU-<hex> are one device. */
static void test_config_limits_by_uuid(void **state)
{
    (void)state;
    struct cudacfg c;
    char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT_GPU-8c1e0c2a-0000-1111-2222-333344445555=4g",
                   "CUDA_DEVICE_MEMORY_SHARED_CACHE_GPU-8c1e0c2a-0000-1111-2222-333344445555="
                   "/run/gpupool-cuda/claims/u1/region",
                   "CUDA_DEVICE_MEMORY_LIMIT_MIG-0a0b0c0d-1111-2222-3333-444455556666=1024m",
                   "CUDA_DEVICE_MEMORY_SHARED_CACHE_MIG-0a0b0c0d-1111-2222-3333-444455556666="
                   "/run/gpupool-cuda/claims/u2/region",
                   "CUDA_DEVICE_MEMORY_LIMIT_GPU-ffff0000-0000-0000-0000-000000000000=0",
                   "CUDA_DEVICE_MEMORY_LIMIT_1=2g",
                   NULL};
    cudacfg_load(&c, env);
    assert_int_equal(c.state, CUDACFG_ON);
    assert_int_equal(c.uuid_count, 3);
    assert_int_equal(cudacfg_uuid_limit(&c, "GPU-8c1e0c2a-0000-1111-2222-333344445555"), 4 * GiB);
    assert_int_equal(cudacfg_uuid_limit(&c, "GPU-8C1E0C2A-0000-1111-2222-333344445555"), 4 * GiB);
    /* the library prints every CUDA UUID as GPU-<hex>: a MIG device matches */
    assert_int_equal(cudacfg_uuid_limit(&c, "GPU-0a0b0c0d-1111-2222-3333-444455556666"), GiB);
    assert_int_equal(cudacfg_uuid_limit(&c, "GPU-ffff0000-0000-0000-0000-000000000000"), 0);
    assert_int_equal(cudacfg_uuid_limit(&c, "GPU-99990000-0000-0000-0000-000000000000"), -1);
    assert_int_equal(cudacfg_uuid_limit(&c, "GPU-8c1e0c2a"), -1); /* a prefix is not the UUID */
    assert_string_equal(cudacfg_region_prefix(&c, "GPU-8c1e0c2a-0000-1111-2222-333344445555"),
                        "/run/gpupool-cuda/claims/u1/region");
    assert_string_equal(cudacfg_region_prefix(&c, "GPU-0a0b0c0d-1111-2222-3333-444455556666"),
                        "/run/gpupool-cuda/claims/u2/region");
    /* a device without a prefix of its own: the container's */
    assert_string_equal(cudacfg_region_prefix(&c, "GPU-ffff0000-0000-0000-0000-000000000000"),
                        CUDACFG_DEFAULT_PREFIX);
    /* the ordinal forms are untouched */
    assert_int_equal(cudacfg_limit(&c, 1, 16 * GiB), 2 * GiB);
    assert_int_equal(cudacfg_limit(&c, 0, 16 * GiB), 0);

    /* only a prefix: no limit by UUID, the state stays off */
    char *prefix_only[] = {"CUDA_DEVICE_MEMORY_SHARED_CACHE_GPU-aa=/x/region", NULL};
    cudacfg_load(&c, prefix_only);
    assert_int_equal(c.state, CUDACFG_OFF);
    assert_int_equal(cudacfg_uuid_limit(&c, "GPU-aa"), -1);

    static const char *const bad[][2] = {
        {"CUDA_DEVICE_MEMORY_LIMIT_GPU-zz11=1g", "or a GPU-/MIG- UUID"},
        {"CUDA_DEVICE_MEMORY_LIMIT_GPU-=1g", "or a GPU-/MIG- UUID"},
        {"CUDA_DEVICE_MEMORY_LIMIT_gpu-1234=1g", "or a GPU-/MIG- UUID"},
        {"CUDA_DEVICE_MEMORY_LIMIT_GPU-1234=lots", "a size"},
        {"CUDA_DEVICE_MEMORY_SHARED_CACHE_x=/a", "for a GPU-/MIG- UUID"},
        {"CUDA_DEVICE_MEMORY_SHARED_CACHE_GPU-12=", "a usable path"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *one[] = {"CUDA_DEVICE_MEMORY_LIMIT=1g", (char *)bad[i][0], NULL};
        cudacfg_load(&c, one);
        if (c.state != CUDACFG_BROKEN || strstr(c.why, bad[i][1]) == NULL)
            fail_msg("%s: state %d, \"%s\"", bad[i][0], (int)c.state, c.why);
    }
    /* 65 devices by UUID: refused, never silently dropped */
    static char many[66][96];
    char *lots[67];
    for (int i = 0; i < 65; i++) {
        snprintf(many[i], sizeof many[i], "CUDA_DEVICE_MEMORY_LIMIT_GPU-%08x=1g", (unsigned)i);
        lots[i] = many[i];
    }
    lots[65] = NULL;
    cudacfg_load(&c, lots);
    assert_int_equal(c.state, CUDACFG_BROKEN);
    assert_non_null(strstr(c.why, "at most 64 devices"));
}

/* Limits written per container ordinal; a process that sets
 * CUDA_VISIBLE_DEVICES renumbers its devices and must still get the limit
 * of the GPU it uses (D11's CUDA_VISIBLE_DEVICES part). */
static void test_config_visible_devices(void **state)
{
    (void)state;
    static const struct {
        const char *visible; /* NULL: unset */
        int64_t want[4];     /* process ordinals 0..3 */
    } cases[] = {
        {NULL, {4 * GiB, 2 * GiB, 6 * GiB, 0}}, /* ordinal 3: no variable, no limit */
        {"CUDA_VISIBLE_DEVICES=1", {2 * GiB, 2 * GiB, 2 * GiB, 2 * GiB}},
        {"CUDA_VISIBLE_DEVICES=2,0", {6 * GiB, 4 * GiB, 2 * GiB, 2 * GiB}},
        {"CUDA_VISIBLE_DEVICES=2,1,0", {6 * GiB, 2 * GiB, 4 * GiB, 2 * GiB}},
        {"CUDA_VISIBLE_DEVICES=02", {6 * GiB, 2 * GiB, 2 * GiB, 2 * GiB}},
        /* Names: the smallest limit, whichever GPU they are. */
        {"CUDA_VISIBLE_DEVICES=GPU-6f1e2d3c-0000-1111-2222-333344445555",
         {2 * GiB, 2 * GiB, 2 * GiB, 2 * GiB}},
        {"CUDA_VISIBLE_DEVICES=MIG-1b2c,0", {2 * GiB, 4 * GiB, 2 * GiB, 2 * GiB}},
        {"CUDA_VISIBLE_DEVICES=2,-1,0", {6 * GiB, 2 * GiB, 4 * GiB, 2 * GiB}},
        {"CUDA_VISIBLE_DEVICES= 2", {2 * GiB, 2 * GiB, 2 * GiB, 2 * GiB}},
        {"CUDA_VISIBLE_DEVICES=64", {2 * GiB, 2 * GiB, 2 * GiB, 2 * GiB}},
        {"CUDA_VISIBLE_DEVICES=", {2 * GiB, 2 * GiB, 2 * GiB, 2 * GiB}},
        {"CUDA_VISIBLE_DEVICES=2,,0", {6 * GiB, 2 * GiB, 4 * GiB, 2 * GiB}},
        {"CUDA_VISIBLE_DEVICES=3", {0, 2 * GiB, 2 * GiB, 2 * GiB}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT_0=4g", "CUDA_DEVICE_MEMORY_LIMIT_1=2g",
                       "CUDA_DEVICE_MEMORY_LIMIT_2=6g", (char *)cases[i].visible, NULL};
        struct cudacfg c;
        cudacfg_load(&c, env);
        assert_int_equal(c.state, CUDACFG_ON);
        for (int k = 0; k < 4; k++) {
            int64_t got = cudacfg_limit(&c, k, 16 * GiB);
            if (got != cases[i].want[k])
                fail_msg("%s, process ordinal %d: %lld, want %lld",
                         cases[i].visible ? cases[i].visible : "unset", k, (long long)got,
                         (long long)cases[i].want[k]);
        }
        /* NVML's index is the container's, whatever CUDA_VISIBLE_DEVICES says. */
        assert_int_equal(cudacfg_container_limit(&c, 0, 16 * GiB), 4 * GiB);
        assert_int_equal(cudacfg_container_limit(&c, 2, 16 * GiB), 6 * GiB);
        assert_int_equal(cudacfg_container_limit(&c, 3, 16 * GiB), 0);
    }

    /* One limit for every GPU, or gpushare's share: a name gets that. */
    char *all[] = {"CUDA_VISIBLE_DEVICES=GPU-x", "CUDA_DEVICE_MEMORY_LIMIT=3g", NULL};
    struct cudacfg c;
    cudacfg_load(&c, all);
    assert_int_equal(cudacfg_limit(&c, 0, 16 * GiB), 3 * GiB);
    char *share[] = {"CUDA_VISIBLE_DEVICES=MIG-y", "ALIYUN_COM_GPU_MEM_CONTAINER=4",
                     "ALIYUN_COM_GPU_MEM_DEV=16", NULL};
    cudacfg_load(&c, share);
    assert_int_equal(cudacfg_limit(&c, 0, 16 * GiB), 4 * GiB);
    /* A 0 limit ("none") is not the smallest: a named GPU gets the tightest. */
    char *none0[] = {"CUDA_VISIBLE_DEVICES=GPU-z", "CUDA_DEVICE_MEMORY_LIMIT_0=0",
                     "CUDA_DEVICE_MEMORY_LIMIT_1=5g", NULL};
    cudacfg_load(&c, none0);
    assert_int_equal(cudacfg_limit(&c, 0, 16 * GiB), 5 * GiB);
    /* Without a limit variable CUDA_VISIBLE_DEVICES changes nothing. */
    char *off[] = {"CUDA_VISIBLE_DEVICES=1,0", NULL};
    cudacfg_load(&c, off);
    assert_int_equal(c.state, CUDACFG_OFF);
    assert_int_equal(cudacfg_limit(&c, 0, 16 * GiB), 0);
    /* More entries than the table holds: those past it get the smallest. */
    char many[4 * 70 + 32] = "CUDA_VISIBLE_DEVICES=";
    for (int k = 0; k < 70; k++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s%d", k ? "," : "", k % 3);
    char *long_list[] = {many, "CUDA_DEVICE_MEMORY_LIMIT_0=4g", "CUDA_DEVICE_MEMORY_LIMIT_1=2g",
                         "CUDA_DEVICE_MEMORY_LIMIT_2=6g", NULL};
    cudacfg_load(&c, long_list);
    assert_int_equal(cudacfg_limit(&c, 63, 16 * GiB), 4 * GiB); /* 63 % 3 == 0 */
    assert_int_equal(cudacfg_limit(&c, 62, 16 * GiB), 6 * GiB);
    assert_int_equal(cudacfg_limit(&c, 64, 16 * GiB), 2 * GiB);
    assert_int_equal(cudacfg_limit(&c, 1000, 16 * GiB), 2 * GiB);
    assert_int_equal(cudacfg_limit(&c, -1, 16 * GiB), 0);
}

/* ---- the node agent's pid maps ------------------------------------------------- */

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* The map beside the container's prefix and beside each claim's own prefix
 * are read; a damaged one adds nothing, and never a pair of its own making. */
static void test_pid_maps_beside_every_prefix(void **state)
{
    (void)state;
    char a[512], b[512], env_cache[640], env_uuid[700];
    snprintf(a, sizeof a, "%s/pm-a", dir);
    snprintf(b, sizeof b, "%s/pm-b", dir);
    assert_int_equal(mkdir(a, 0755), 0);
    assert_int_equal(mkdir(b, 0755), 0);
    snprintf(env_cache, sizeof env_cache, "CUDA_DEVICE_MEMORY_SHARED_CACHE=%s/region", a);
    snprintf(env_uuid, sizeof env_uuid,
             "CUDA_DEVICE_MEMORY_SHARED_CACHE_GPU_11111111_2222_3333_4444_555555555555=%s/region",
             b);
    char *env[] = {"CUDA_DEVICE_MEMORY_LIMIT=4g", env_cache, env_uuid, NULL};
    struct cudacfg c;
    cudacfg_load(&c, env);
    struct cudapid_pair out[8];
    assert_int_equal(cudapid_read(&c, out, 8), 0); /* no maps yet */
    char path[640];
    snprintf(path, sizeof path, "%s/pids", a);
    write_text(path, "gpupool-pids 1\n4242 7\n");
    snprintf(path, sizeof path, "%s/pids", b);
    write_text(path, "gpupool-pids 1\n5151 9\n");
    assert_int_equal(cudapid_read(&c, out, 8), 2);
    assert_int_equal(cudapid_host(&c, 7), 4242);
    assert_int_equal(cudapid_host(&c, 9), 5151);
    assert_int_equal(cudapid_host(&c, 8), 0);
    assert_int_equal(cudapid_read(&c, out, 1), 1); /* room for one: one */
    write_text(path, "gpupool-pids 2\n6161 10\n"); /* another version: nothing */
    assert_int_equal(cudapid_host(&c, 10), 0);
    write_text(path, "gpupool-pids 1\n6161 x\n");
    assert_int_equal(cudapid_host(&c, 10), 0);
}

/* ---- the region -------------------------------------------------------------- */

static void test_region_exact_to_the_byte(void **state)
{
    (void)state;
    char path[256], err[512];
    region_path(path, sizeof path, "exact");
    struct cudareg *r = cudareg_attach(path, 1000, err, sizeof err);
    assert_non_null(r);
    assert_true(cudareg_file_size() <= 64 * 1024);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((size_t)st.st_size, cudareg_file_size());
    assert_int_equal(st.st_mode & 0777, 0666);
    assert_int_equal(cudareg_limit(r), 1000);
    assert_int_equal(cudareg_reserve(r, 600), 0);
    assert_int_equal(cudareg_reserve(r, 401), 1);
    assert_int_equal(cudareg_reserve(r, 400), 0);
    assert_int_equal(cudareg_reserve(r, 1), 1);
    assert_int_equal(cudareg_reserve(r, INT64_MAX), 1);
    assert_int_equal(cudareg_reserve(r, -5), 1);
    assert_int_equal(cudareg_usage(r), 1000);
    cudareg_release(r, 400);
    assert_int_equal(cudareg_usage(r), 600);
    /* Giving back more than was taken never drives the counters negative. */
    cudareg_release(r, 1 << 30);
    assert_int_equal(cudareg_usage(r), 0);
    assert_int_equal(cudareg_reserve(r, 1000), 0);
    /* A second attach sees the same region and keeps its limit. */
    struct cudareg *again = cudareg_attach(path, 5000, err, sizeof err);
    assert_non_null(again);
    assert_int_equal(cudareg_limit(again), 1000);
    assert_int_equal(cudareg_usage(again), 1000);
    cudareg_detach(again);
    cudareg_detach(r);
}

/* The node agent reads a region's header and the slots below its high mark
 * only (cudareg_peek_size), and that prefix tells what the whole file does. */
static void test_region_peek_reads_the_prefix_below_high(void **state)
{
    (void)state;
    char path[256], err[512];
    region_path(path, sizeof path, "peek");
    struct cudareg *r = cudareg_attach(path, 1 << 20, err, sizeof err);
    assert_non_null(r);
    assert_int_equal(cudareg_reserve(r, 4096), 0);
    size_t len = cudareg_file_size();
    unsigned char *file = malloc(len);
    assert_non_null(file);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, file, len, 0), (ssize_t)len);
    close(fd);
    size_t need = cudareg_peek_size(file, CUDAREG_PEEK_FIRST);
    /* One process charged: the header and one slot, far below the file. */
    assert_true(need > 0 && need <= CUDAREG_PEEK_FIRST);
    assert_int_equal(cudareg_peek_size(file, len), need);
    struct cudareg_view whole, prefix;
    assert_int_equal(cudareg_peek(file, len, &whole, NULL, NULL), 0);
    assert_int_equal(cudareg_peek(file, need, &prefix, NULL, NULL), 0);
    assert_int_equal(prefix.used, 4096);
    assert_int_equal(prefix.used, whole.used);
    assert_int_equal(prefix.limit, whole.limit);
    assert_int_equal(prefix.live_slots, 1);
    /* Fewer bytes than the header, or more than a file: not a region. */
    assert_int_equal(cudareg_peek_size(file, 8), 0);
    assert_int_equal(cudareg_peek(file, 8, &prefix, NULL, NULL), -1);
    assert_int_equal(cudareg_peek(file, len + 1, &prefix, NULL, NULL), -1);
    /* A damaged header: not a region, nothing to read. */
    memset(file, 0xff, 8);
    assert_int_equal(cudareg_peek_size(file, len), 0);
    free(file);
    cudareg_detach(r);
}

static void test_region_bad_files(void **state)
{
    (void)state;
    char path[256], err[512];
    /* Wrong size. */
    region_path(path, sizeof path, "short");
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "junk", 4), 4);
    close(fd);
    assert_null(cudareg_attach(path, 1000, err, sizeof err));
    assert_non_null(strstr(err, "not a gpupool-cuda region"));
    /* Right size, wrong contents. */
    region_path(path, sizeof path, "garbage");
    fd = open(path, O_CREAT | O_WRONLY, 0600);
    char *junk = malloc(cudareg_file_size());
    memset(junk, 0x5a, cudareg_file_size());
    assert_int_equal(write(fd, junk, cudareg_file_size()), (ssize_t)cudareg_file_size());
    free(junk);
    close(fd);
    assert_null(cudareg_attach(path, 1000, err, sizeof err));
    assert_non_null(strstr(err, "not a gpupool-cuda region"));
    /* A FIFO must not hang us; a symlink is not followed; no directory. */
    region_path(path, sizeof path, "fifo");
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_null(cudareg_attach(path, 1000, err, sizeof err));
    assert_non_null(strstr(err, "not a regular file"));
    region_path(path, sizeof path, "link");
    assert_int_equal(symlink("/etc/passwd", path), 0);
    assert_null(cudareg_attach(path, 1000, err, sizeof err));
    region_path(path, sizeof path, "nodir/region");
    assert_null(cudareg_attach(path, 1000, err, sizeof err));
    assert_non_null(strstr(err, "cannot open"));
}

/* A child that takes bytes and leaves without giving them back. */
static void test_region_dead_processes_reclaimed(void **state)
{
    (void)state;
    char path[256], err[512];
    region_path(path, sizeof path, "reclaim");
    struct cudareg *r = cudareg_attach(path, 100 * MiB, err, sizeof err);
    assert_non_null(r);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t kid = fork_tied();
    assert_true(kid >= 0);
    if (kid == 0) {
        cudareg_after_fork(r);
        char ok = cudareg_reserve(r, 60 * MiB) == 0 ? 'y' : 'n';
        if (write(ready[1], &ok, 1) != 1)
            _exit(2);
        pause();
        _exit(0);
    }
    char ok;
    assert_int_equal(read(ready[0], &ok, 1), 1);
    assert_int_equal(ok, 'y');
    assert_int_equal(cudareg_usage(r), 60 * MiB);
    assert_int_equal(cudareg_reserve(r, 50 * MiB), 1); /* the child holds it */
    kill(kid, SIGKILL);
    /* A zombie (not yet waited for) is already dead to us. */
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    assert_int_equal(cudareg_reserve(r, 50 * MiB), 0);
    assert_int_equal(cudareg_usage(r), 50 * MiB);
    assert_int_equal(waitpid(kid, NULL, 0), kid);
    cudareg_release(r, 50 * MiB);
    close(ready[0]);
    close(ready[1]);
    cudareg_detach(r);
}

/* Processes killed at random instants, often inside the region's lock:
 * the region is never wedged and always ends up empty. */
static void test_region_sigkill_storm(void **state)
{
    (void)state;
    char path[256], err[512];
    region_path(path, sizeof path, "storm");
    struct cudareg *r = cudareg_attach(path, 64 * MiB, err, sizeof err);
    assert_non_null(r);
    srand(42);
    for (int round = 0; round < 200; round++) {
        pid_t kid = fork_tied();
        assert_true(kid >= 0);
        if (kid == 0) {
            cudareg_after_fork(r);
            for (;;) {
                if (cudareg_reserve(r, MiB) == 0)
                    cudareg_release(r, (rand() & 1) ? MiB : 0);
            }
        }
        struct timespec ts = {0, (rand() % 2000) * 1000};
        nanosleep(&ts, NULL);
        kill(kid, SIGKILL);
        assert_int_equal(waitpid(kid, NULL, 0), kid);
    }
    assert_int_equal(cudareg_usage(r), 0);
    assert_int_equal(cudareg_reserve(r, 64 * MiB), 0);
    cudareg_release(r, 64 * MiB);
    cudareg_detach(r);
}

/* 32 processes race for the last bytes: what they hold together never
 * exceeds the limit, and reaches it exactly. */
static void test_region_race_never_over(void **state)
{
    (void)state;
    char path[256], err[512];
    region_path(path, sizeof path, "race");
    const int64_t limit = GiB, chunk = 3 * MiB + 17;
    struct cudareg *r = cudareg_attach(path, limit, err, sizeof err);
    assert_non_null(r);
    assert_int_equal(cudareg_reserve(r, limit - 100 * MiB),
                     0); /* the race is for the last 100 MiB */
    int out[2];
    assert_int_equal(pipe(out), 0);
    enum { KIDS = 32 };
    pid_t kids[KIDS];
    for (int i = 0; i < KIDS; i++) {
        kids[i] = fork_tied();
        assert_true(kids[i] >= 0);
        if (kids[i] == 0) {
            cudareg_after_fork(r);
            int64_t held = 0;
            while (cudareg_reserve(r, chunk) == 0)
                held += chunk;
            /* then a byte at a time: fill to the exact limit */
            while (cudareg_reserve(r, 1) == 0)
                held += 1;
            if (write(out[1], &held, sizeof held) != sizeof held)
                _exit(2);
            pause();
            _exit(0);
        }
    }
    int64_t sum = 0;
    for (int i = 0; i < KIDS; i++) {
        int64_t held;
        assert_int_equal(read(out[0], &held, sizeof held), (ssize_t)sizeof held);
        sum += held;
    }
    assert_int_equal(sum, 100 * MiB);
    assert_int_equal(cudareg_usage(r), limit);
    for (int i = 0; i < KIDS; i++) {
        kill(kids[i], SIGKILL);
        waitpid(kids[i], NULL, 0);
    }
    /* A report looks for the dead at most every 250 ms. */
    assert_int_equal(usage_within(r, limit - 100 * MiB, 1000), limit - 100 * MiB);
    close(out[0]);
    close(out[1]);
    cudareg_detach(r);
}

/* ---- liveness -------------------------------------------------------------- */

/* Starts fn(arg) as pid 1 of a new pid namespace, as a restarted
 * container's first process is. Returns the pid of its parent, which exits
 * with fn's status (77: namespaces cannot be made here); *init: fn's
 * process, in our namespace (-1 if it never started). */
static pid_t spawn_in_new_pid_namespace(int (*fn)(void *), void *arg, pid_t *init)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t outer = fork_tied();
    assert_true(outer >= 0);
    if (outer == 0) {
        close(p[0]);
        if (unshare(CLONE_NEWPID) != 0)
            _exit(77);
        pid_t in = fork();
        if (in < 0)
            _exit(98);
        if (in == 0) {
            /* (its parent is outside its namespace: getppid() says 0) */
            if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
                _exit(96);
            close(p[1]);
            _exit(fn(arg));
        }
        if (write(p[1], &in, sizeof in) != (ssize_t)sizeof in)
            _exit(97);
        close(p[1]);
        int st;
        if (waitpid(in, &st, 0) != in)
            _exit(99);
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    }
    close(p[1]);
    if (read(p[0], init, sizeof *init) != (ssize_t)sizeof *init)
        *init = -1;
    close(p[0]);
    return outer;
}

/* The exit status of pid, 128 + the signal when killed. */
static int status_of(pid_t pid)
{
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int in_new_pid_namespace(int (*fn)(void *), void *arg)
{
    pid_t init;
    return status_of(spawn_in_new_pid_namespace(fn, arg, &init));
}

struct instance {
    const char *path;
    int report; /* pipe to write 'y' to once charged */
    bool stay;  /* once charged, wait to be killed instead of exiting */
};

/* A container instance's process, pid 1 of its namespace: attaches with a
 * 4 GiB limit and takes 3 GiB, then exits without detaching (frameworks
 * never free at exit) or waits to be killed. */
static int charge_3g(void *arg)
{
    const struct instance *in = arg;
    char err[512];
    struct cudareg *r = cudareg_attach(in->path, 4 * GiB, err, sizeof err);
    if (r == NULL || getpid() != 1 || cudareg_reserve(r, 3 * GiB) != 0)
        return 1;
    if (write(in->report, "y", 1) != 1)
        return 2;
    while (in->stay)
        pause();
    return 0;
}

/* The restarted instance's first process: the whole share is free at once. */
static int whole_share_free(void *arg)
{
    const struct instance *in = arg;
    char err[512];
    struct cudareg *r = cudareg_attach(in->path, 4 * GiB, err, sizeof err);
    if (r == NULL)
        return 1;
    /* The first report already shows nothing used. */
    int rc = cudareg_usage(r) != 0 ? 2 : cudareg_reserve(r, 4 * GiB) != 0 ? 3 : 0;
    cudareg_detach(r);
    return rc;
}

/* D1: pid 1 of one pid namespace takes 3 of 4 GiB and exits, or is killed;
 * pid 1 of a new namespace on the same region gets all 4 at once. */
static void test_region_restarted_container_starts_at_zero(void **state)
{
    (void)state;
    char path[256];
    for (int killed = 0; killed < 2; killed++) {
        region_path(path, sizeof path, killed ? "restart-killed" : "restart-exited");
        int ready[2];
        assert_int_equal(pipe(ready), 0);
        struct instance first = {path, ready[1], killed};
        pid_t init, old = spawn_in_new_pid_namespace(charge_3g, &first, &init);
        if (init < 0) {
            assert_int_equal(status_of(old), 77);
            skip();
        }
        char ok = 0;
        assert_int_equal(read(ready[0], &ok, 1), 1);
        assert_int_equal(ok, 'y');
        if (killed)
            assert_int_equal(kill(init, SIGKILL), 0);
        assert_int_equal(status_of(old), killed ? 128 + SIGKILL : 0);
        struct instance second = {path, -1, false};
        assert_int_equal(in_new_pid_namespace(whole_share_free, &second), 0);
        close(ready[0]);
        close(ready[1]);
    }
}

struct worker {
    struct cudareg *r;
    int report;
};

static void *worker_holds_3g(void *arg)
{
    const struct worker *w = arg;
    char ok = cudareg_reserve(w->r, 3 * GiB) == 0 ? 'y' : 'n';
    if (write(w->report, &ok, 1) != 1)
        _exit(2);
    for (;;)
        pause();
    return NULL;
}

/* /proc/<pid>/stat's state letter; 0 when it cannot be read. */
static char proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p != NULL && p[1] == ' ' ? p[2] : 0;
}

/* D5: a process whose main thread exited while a worker holds 3 GiB (its
 * leader shows as a zombie) keeps its charge until the worker is gone. */
static void test_region_zombie_leader_keeps_its_charge(void **state)
{
    (void)state;
    char path[256], err[512];
    region_path(path, sizeof path, "zombie");
    struct cudareg *r = cudareg_attach(path, 4 * GiB, err, sizeof err);
    assert_non_null(r);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t kid = fork_tied();
    assert_true(kid >= 0);
    if (kid == 0) {
        cudareg_after_fork(r);
        static struct worker w;
        w = (struct worker){r, ready[1]};
        pthread_t t;
        if (pthread_create(&t, NULL, worker_holds_3g, &w) != 0)
            _exit(3);
        pthread_exit(NULL);
    }
    char ok = 0;
    assert_int_equal(read(ready[0], &ok, 1), 1);
    assert_int_equal(ok, 'y');
    for (int i = 0; i < 2000 && proc_state(kid) != 'Z'; i++)
        sleep_ms(1);
    assert_int_equal(proc_state(kid), 'Z');
    assert_int_equal(cudareg_reserve(r, 2 * GiB), 1);
    sleep_ms(300); /* past the reports' 250 ms: the next report looks again */
    assert_int_equal(cudareg_usage(r), 3 * GiB);
    assert_int_equal(cudareg_reserve(r, GiB), 0);
    assert_int_equal(cudareg_reserve(r, 1), 1);
    kill(kid, SIGKILL);
    assert_int_equal(status_of(kid), 128 + SIGKILL);
    assert_int_equal(cudareg_reserve(r, 3 * GiB), 0);
    cudareg_detach(r);
    close(ready[0]);
    close(ready[1]);
}

static const char *self_exe;

/* The image a process execs into (main() runs it for "--exec-image PATH"):
 * it is the same process, with the same pid, and starts with nothing. */
static int exec_image(const char *path)
{
    char err[512];
    struct cudareg *r = cudareg_attach(path, 4 * GiB, err, sizeof err);
    if (r == NULL)
        return 1;
    int rc = cudareg_usage(r) != 0 ? 2 : cudareg_reserve(r, 4 * GiB) != 0 ? 3 : 0;
    cudareg_detach(r);
    return rc;
}

/* D8: a process takes 3 of 4 GiB and execs itself: the new image gets all
 * 4 (the driver freed the old image's memory at the exec). */
static void test_region_exec_gives_back_the_old_images_charge(void **state)
{
    (void)state;
    char path[256], err[512];
    region_path(path, sizeof path, "exec");
    struct cudareg *r = cudareg_attach(path, 4 * GiB, err, sizeof err);
    assert_non_null(r);
    pid_t kid = fork_tied();
    assert_true(kid >= 0);
    if (kid == 0) {
        cudareg_after_fork(r);
        if (cudareg_reserve(r, 3 * GiB) != 0)
            _exit(4);
        execl(self_exe, self_exe, "--exec-image", path, (char *)NULL);
        _exit(5);
    }
    assert_int_equal(status_of(kid), 0);
    cudareg_detach(r);
}

/* The pid namespace's init for D9: its first child takes 3 GiB and dies;
 * the next child is given the same pid (ns_last_pid) and gets 4 GiB. */
static int same_pid_again(void *arg)
{
    const char *path = arg;
    pid_t first = fork();
    if (first < 0)
        return 10;
    if (first == 0) {
        char err[512];
        struct cudareg *r = cudareg_attach(path, 4 * GiB, err, sizeof err);
        _exit(r != NULL && cudareg_reserve(r, 3 * GiB) == 0 ? 0 : 1);
    }
    int st;
    if (waitpid(first, &st, 0) != first || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 11;
    FILE *f = fopen("/proc/sys/kernel/ns_last_pid", "w");
    if (f == NULL)
        return 77;
    fprintf(f, "%d", (int)first - 1);
    if (fclose(f) != 0)
        return 77;
    pid_t again = fork();
    if (again < 0)
        return 12;
    if (again == 0)
        _exit(getpid() != first ? 13 : whole_share_free(&(struct instance){path, -1, false}));
    if (waitpid(again, &st, 0) != again || !WIFEXITED(st))
        return 14;
    return WEXITSTATUS(st);
}

/* D9: a dead process's slot is given back to a process with its pid. */
static void test_region_dead_slot_with_the_callers_pid_is_reaped(void **state)
{
    (void)state;
    char path[256];
    region_path(path, sizeof path, "pidreuse");
    int rc = in_new_pid_namespace(same_pid_again, path);
    if (rc == 77)
        skip();
    assert_int_equal(rc, 0);
}

/* A forked child shares nothing of its parent's liveness (neither through
 * the descriptor nor through the mapping it inherits): the parent killed
 * while its child lives gives its charge back; the child keeps its own. */
static void test_region_fork_child_does_not_keep_the_parent_alive(void **state)
{
    (void)state;
    char path[256], err[512];
    region_path(path, sizeof path, "fork");
    struct cudareg *r = cudareg_attach(path, 4 * GiB, err, sizeof err);
    assert_non_null(r);
    int ready[2], hold[2], pids[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(hold), 0);
    assert_int_equal(pipe(pids), 0);
    pid_t parent = fork_tied();
    assert_true(parent >= 0);
    if (parent == 0) {
        /* Its own attach, as a process started by exec has: the child
         * inherits its mapping as well as its descriptor. */
        struct cudareg *own = cudareg_attach(path, 4 * GiB, err, sizeof err);
        if (own == NULL || cudareg_reserve(own, GiB) != 0)
            _exit(1);
        pid_t child = fork();
        if (child == 0) {
            cudareg_after_fork(own);
            char ok = cudareg_reserve(own, GiB) == 0 ? 'y' : 'n';
            close(hold[1]);
            if (write(ready[1], &ok, 1) != 1)
                _exit(2);
            /* until the test closes its end or dies (it is not our parent) */
            while (read(hold[0], &ok, 1) != 0)
                ;
            _exit(0);
        }
        close(hold[1]);
        if (write(pids[1], &child, sizeof child) != (ssize_t)sizeof child)
            _exit(3);
        for (;;)
            pause();
    }
    pid_t child;
    char ok = 0;
    assert_int_equal(read(pids[0], &child, sizeof child), (ssize_t)sizeof child);
    assert_int_equal(read(ready[0], &ok, 1), 1);
    assert_int_equal(ok, 'y');
    assert_int_equal(cudareg_reserve(r, 2 * GiB + 1), 1);
    kill(parent, SIGKILL);
    assert_int_equal(status_of(parent), 128 + SIGKILL);
    assert_int_equal(cudareg_reserve(r, 3 * GiB), 0);
    assert_int_equal(cudareg_reserve(r, 1), 1); /* the orphaned child's GiB */
    close(hold[1]);                             /* the child exits */
    assert_int_equal(usage_within(r, 3 * GiB, 1000), 3 * GiB);
    (void)child;
    cudareg_detach(r);
    close(ready[0]);
    close(ready[1]);
    close(hold[0]);
    close(pids[0]);
    close(pids[1]);
}

/* D11: a process is held to the smaller of the region's limit and its own. */
static void test_region_own_limit_is_the_smaller(void **state)
{
    (void)state;
    char path[256], err[512];
    region_path(path, sizeof path, "limits");
    struct cudareg *made = cudareg_attach(path, 16 * GiB, err, sizeof err);
    assert_non_null(made);
    struct cudareg *low = cudareg_attach(path, 4 * GiB, err, sizeof err);
    assert_non_null(low);
    struct cudareg *high = cudareg_attach(path, 32 * GiB, err, sizeof err);
    assert_non_null(high);
    assert_int_equal(cudareg_limit(made), 16 * GiB);
    assert_int_equal(cudareg_limit(low), 4 * GiB);
    assert_int_equal(cudareg_limit(high), 16 * GiB);
    assert_int_equal(cudareg_reserve(low, 4 * GiB + 1), 1);
    assert_int_equal(cudareg_reserve(low, 3 * GiB), 0);
    assert_int_equal(cudareg_reserve(high, 13 * GiB + 1), 1);
    assert_int_equal(cudareg_reserve(high, 12 * GiB), 0);
    /* 15 GiB used in all: the low process has nothing left. */
    assert_int_equal(cudareg_reserve(low, 1), 1);
    cudareg_release(high, 12 * GiB);
    assert_int_equal(cudareg_reserve(low, GiB), 0);
    assert_int_equal(cudareg_reserve(low, 1), 1);
    cudareg_detach(high);
    cudareg_detach(low);
    cudareg_detach(made);
}

/* A version 1 region (a container instance that is gone left it: the
 * library cannot change under running processes) is made anew with the new
 * process's limit; a newer version still fails closed. */
static void test_region_older_version_is_made_anew(void **state)
{
    (void)state;
    char path[256], err[512];
    region_path(path, sizeof path, "v1");
    enum { V1_SIZE = 32904 };
    static unsigned char v1[V1_SIZE];
    const uint32_t head[4] = {0x52435047u, 1, V1_SIZE, 1024};
    const int64_t limit = 16 * GiB, used = 3 * GiB;
    const uint32_t ready = 1;
    memcpy(v1, head, sizeof head);
    memcpy(v1 + 16, &limit, sizeof limit);
    memcpy(v1 + 24, &ready, sizeof ready);
    memcpy(v1 + 32 + sizeof(pthread_mutex_t), &used, sizeof used);
    int fd = open(path, O_CREAT | O_WRONLY, 0666);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, v1, sizeof v1), (ssize_t)sizeof v1);
    close(fd);
    struct cudareg *r = cudareg_attach(path, 4 * GiB, err, sizeof err);
    assert_non_null(r);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((size_t)st.st_size, cudareg_file_size());
    assert_int_equal(cudareg_limit(r), 4 * GiB);
    assert_int_equal(cudareg_usage(r), 0);
    assert_int_equal(cudareg_reserve(r, 4 * GiB), 0);
    cudareg_detach(r);

    /* A newer version, and a version 1 header on a file of another size. */
    region_path(path, sizeof path, "v3");
    unsigned char *v3 = calloc(1, cudareg_file_size());
    assert_non_null(v3);
    const uint32_t head3[4] = {0x52435047u, 3, (uint32_t)cudareg_file_size(), 1024};
    memcpy(v3, head3, sizeof head3);
    memcpy(v3 + 16, &limit, sizeof limit);
    memcpy(v3 + 24, &ready, sizeof ready);
    fd = open(path, O_CREAT | O_WRONLY, 0666);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, v3, cudareg_file_size()), (ssize_t)cudareg_file_size());
    close(fd);
    free(v3);
    assert_null(cudareg_attach(path, 4 * GiB, err, sizeof err));
    assert_non_null(strstr(err, "not a gpupool-cuda region"));
    region_path(path, sizeof path, "v1-truncated");
    fd = open(path, O_CREAT | O_WRONLY, 0666);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, v1, V1_SIZE - 8), V1_SIZE - 8);
    close(fd);
    assert_null(cudareg_attach(path, 4 * GiB, err, sizeof err));
    assert_non_null(strstr(err, "not a gpupool-cuda region"));
}

/* D7: with 256 other live processes holding memory, a report costs no more
 * than a few microseconds (it used to look at every process under the
 * container's lock); a killed process's memory serves a charge at once and
 * shows as free within a second. */
static void test_region_reports_are_cheap_and_see_the_dead(void **state)
{
    (void)state;
    char path[256], err[512];
    region_path(path, sizeof path, "many");
    enum { KIDS = 256 };
    struct cudareg *r = cudareg_attach(path, KIDS * MiB, err, sizeof err);
    assert_non_null(r);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    static pid_t kids[KIDS];
    for (int i = 0; i < KIDS; i++) {
        kids[i] = fork_tied();
        assert_true(kids[i] >= 0);
        if (kids[i] == 0) {
            cudareg_after_fork(r);
            char ok = cudareg_reserve(r, MiB) == 0 ? 'y' : 'n';
            if (write(ready[1], &ok, 1) != 1)
                _exit(2);
            for (;;)
                pause();
        }
    }
    for (int i = 0; i < KIDS; i++) {
        char ok = 0;
        assert_int_equal(read(ready[0], &ok, 1), 1);
        assert_int_equal(ok, 'y');
    }
    struct timespec t0, t1;
    int calls = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        assert_int_equal(cudareg_usage(r), KIDS * MiB);
        clock_gettime(CLOCK_MONOTONIC, &t1);
    } while (++calls < 20000 && t1.tv_sec - t0.tv_sec < 2);
    double ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / calls;
    printf("# cudareg_usage with %d live processes: %.0f ns (%d calls)\n", KIDS, ns, calls);
    assert_true(ns < 10000);
    /* One killed: a charge that needs its memory gets it at once. */
    kill(kids[0], SIGKILL);
    assert_int_equal(status_of(kids[0]), 128 + SIGKILL);
    assert_int_equal(cudareg_reserve(r, MiB), 0);
    /* The others killed: reports show it within a second. */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 1; i < KIDS; i++)
        kill(kids[i], SIGKILL);
    assert_int_equal(usage_within(r, MiB, 1000), MiB);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_true(t1.tv_sec - t0.tv_sec < 2);
    for (int i = 1; i < KIDS; i++)
        assert_int_equal(status_of(kids[i]), 128 + SIGKILL);
    cudareg_detach(r);
    close(ready[0]);
    close(ready[1]);
}

/* Processes that claim slots, are refused (and so reap) and are killed at
 * random instants, next to holders that keep their memory: no live
 * holder's charge is ever taken for dead. */
static void test_region_reaping_never_frees_a_live_slot(void **state)
{
    (void)state;
    char path[256], err[512];
    region_path(path, sizeof path, "reap-race");
    enum { HOLDERS = 8, CHURNERS = 6 };
    const int64_t held = 4 * MiB;
    struct cudareg *r = cudareg_attach(path, 64 * MiB, err, sizeof err);
    assert_non_null(r);
    int ready[2], go[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    pid_t holders[HOLDERS];
    for (int i = 0; i < HOLDERS; i++) {
        holders[i] = fork_tied();
        assert_true(holders[i] >= 0);
        if (holders[i] == 0) {
            cudareg_after_fork(r);
            char ok = cudareg_reserve(r, held) == 0 ? 'y' : 'n';
            if (write(ready[1], &ok, 1) != 1 || read(go[0], &ok, 1) != 1)
                _exit(2);
            cudareg_release(r, held);
            _exit(0);
        }
        char ok = 0;
        assert_int_equal(read(ready[0], &ok, 1), 1);
        assert_int_equal(ok, 'y');
    }
    /* 32 MiB free, 6 churners wanting 7 MiB each: refusals all the time. */
    pid_t churners[CHURNERS];
    srand(3);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int round = 0;; round++) {
        for (int i = 0; i < CHURNERS; i++) {
            if (round > 0 && rand() % 3 != 0)
                continue;
            if (round > 0) {
                kill(churners[i], SIGKILL);
                assert_int_equal(status_of(churners[i]), 128 + SIGKILL);
            }
            churners[i] = fork_tied();
            assert_true(churners[i] >= 0);
            if (churners[i] == 0) {
                cudareg_after_fork(r);
                for (;;) {
                    if (cudareg_reserve(r, 7 * MiB) == 0)
                        cudareg_release(r, 7 * MiB);
                    (void)cudareg_usage(r);
                }
            }
        }
        sleep_ms(rand() % 5);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (t1.tv_sec - t0.tv_sec >= 2)
            break;
    }
    for (int i = 0; i < CHURNERS; i++) {
        kill(churners[i], SIGKILL);
        assert_int_equal(status_of(churners[i]), 128 + SIGKILL);
    }
    assert_int_equal(usage_within(r, HOLDERS * held, 1000), HOLDERS * held);
    /* Each holder still owns its slot: its release takes the total down.
     * All are let go at once: any holder may read any byte of the pipe, so
     * waiting for holder i after one byte could wait for ever. */
    for (int i = 0; i < HOLDERS; i++)
        assert_int_equal(write(go[1], "g", 1), 1);
    for (int i = 0; i < HOLDERS; i++)
        assert_int_equal(status_of(holders[i]), 0);
    assert_int_equal(cudareg_usage(r), 0);
    cudareg_detach(r);
    close(ready[0]);
    close(ready[1]);
    close(go[0]);
    close(go[1]);
}

/* ---- the ledger -------------------------------------------------------------- */

static int64_t given;
static void count_give(const struct cudaledger_entry *e, void *arg)
{
    (void)arg;
    given += e->bytes;
}

static void test_ledger_against_a_model(void **state)
{
    (void)state;
    enum { N = 20000 };
    static int64_t model[N]; /* bytes by handle index; 0: absent */
    memset(model, 0, sizeof model);
    srand(7);
    struct cudaledger_entry e, old;
    for (int step = 0; step < 200000; step++) {
        int i = rand() % N;
        uint64_t handle = 0x7f0000000000ull + (uint64_t)i * 512;
        if (model[i] == 0) {
            e = (struct cudaledger_entry){.handle = handle,
                                          .ctx = (uint64_t)(i % 3 + 1),
                                          .bytes = i + 1,
                                          .device = 0,
                                          .kind = LEDGER_POINTER};
            assert_int_equal(cudaledger_add(&e, &old), 0);
            assert_int_equal(old.kind, 0);
            model[i] = i + 1;
        } else {
            assert_true(cudaledger_take(LEDGER_POINTER, handle, &e));
            assert_int_equal(e.bytes, model[i]);
            model[i] = 0;
        }
        /* the same value under another kind is another entry */
        assert_false(cudaledger_take(LEDGER_ARRAY, handle, &e));
    }
    uint64_t live = 0;
    int64_t ctx2 = 0;
    for (int i = 0; i < N; i++) {
        live += model[i] != 0;
        if (model[i] != 0 && i % 3 + 1 == 2)
            ctx2 += model[i];
    }
    assert_int_equal(cudaledger_count(), live);
    given = 0;
    cudaledger_take_context(2, count_give, NULL);
    assert_int_equal(given, ctx2);
    for (int i = 0; i < N; i++) {
        uint64_t handle = 0x7f0000000000ull + (uint64_t)i * 512;
        bool want = model[i] != 0 && i % 3 + 1 != 2;
        assert_int_equal(cudaledger_take(LEDGER_POINTER, handle, &e), want);
    }
    assert_int_equal(cudaledger_count(), 0);
    /* A handle reused behind our back replaces the old entry and says so. */
    e = (struct cudaledger_entry){.handle = 5, .bytes = 10, .kind = LEDGER_HANDLE};
    assert_int_equal(cudaledger_add(&e, &old), 0);
    e.bytes = 20;
    assert_int_equal(cudaledger_add(&e, &old), 0);
    assert_int_equal(old.bytes, 10);
    assert_true(cudaledger_take(LEDGER_HANDLE, 5, &e));
    assert_int_equal(e.bytes, 20);
}

static void test_ledger_fork_child_starts_empty(void **state)
{
    (void)state;
    struct cudaledger_entry e = {.handle = 99, .bytes = 1, .kind = LEDGER_POINTER}, old;
    assert_int_equal(cudaledger_add(&e, &old), 0);
    cudaledger_before_fork();
    pid_t kid = fork();
    if (kid == 0) {
        cudaledger_after_fork_child();
        _exit(cudaledger_count() == 0 && !cudaledger_take(LEDGER_POINTER, 99, &e) ? 0 : 1);
    }
    cudaledger_after_fork_parent();
    int st;
    assert_int_equal(waitpid(kid, &st, 0), kid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_true(cudaledger_take(LEDGER_POINTER, 99, &e));
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--exec-image") == 0)
        return exec_image(argv[2]);
    self_exe = "/proc/self/exe";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_config_variables),
        cmocka_unit_test(test_config_broken_fails_closed),
        cmocka_unit_test(test_config_limits_by_uuid),
        cmocka_unit_test(test_config_visible_devices),
        cmocka_unit_test(test_pid_maps_beside_every_prefix),
        cmocka_unit_test(test_region_exact_to_the_byte),
        cmocka_unit_test(test_region_peek_reads_the_prefix_below_high),
        cmocka_unit_test(test_region_bad_files),
        cmocka_unit_test(test_region_dead_processes_reclaimed),
        cmocka_unit_test(test_region_sigkill_storm),
        cmocka_unit_test(test_region_race_never_over),
        cmocka_unit_test(test_region_restarted_container_starts_at_zero),
        cmocka_unit_test(test_region_zombie_leader_keeps_its_charge),
        cmocka_unit_test(test_region_exec_gives_back_the_old_images_charge),
        cmocka_unit_test(test_region_dead_slot_with_the_callers_pid_is_reaped),
        cmocka_unit_test(test_region_fork_child_does_not_keep_the_parent_alive),
        cmocka_unit_test(test_region_own_limit_is_the_smaller),
        cmocka_unit_test(test_region_older_version_is_made_anew),
        cmocka_unit_test(test_region_reports_are_cheap_and_see_the_dead),
        cmocka_unit_test(test_region_reaping_never_frees_a_live_slot),
        cmocka_unit_test(test_ledger_against_a_model),
        cmocka_unit_test(test_ledger_fork_child_starts_empty),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
