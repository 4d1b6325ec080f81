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
#include "cuda_region.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    pid_t kid = fork();
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
        pid_t kid = fork();
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
        kids[i] = fork();
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
    assert_int_equal(cudareg_usage(r), limit - 100 * MiB);
    close(out[0]);
    close(out[1]);
    cudareg_detach(r);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_config_variables),
        cmocka_unit_test(test_config_broken_fails_closed),
        cmocka_unit_test(test_config_visible_devices),
        cmocka_unit_test(test_region_exact_to_the_byte),
        cmocka_unit_test(test_region_bad_files),
        cmocka_unit_test(test_region_dead_processes_reclaimed),
        cmocka_unit_test(test_region_sigkill_storm),
        cmocka_unit_test(test_region_race_never_over),
        cmocka_unit_test(test_ledger_against_a_model),
        cmocka_unit_test(test_ledger_fork_child_starts_empty),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
