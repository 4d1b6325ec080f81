/* test_cuda_throttle.c -- the compute limiter's arithmetic (cuda_throttle.h)
 * on a clock the test drives, and the compute variables (cuda_config.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "cuda_config.h"
#include "cuda_throttle.h"

#define MS (1000ull * 1000)

/* A simulated container of one saturating process on an otherwise idle
 * device: it runs whenever the gate is open, the sampler measures every
 * 5 ms. Returns its share in percent over `total` ns. */
static double simulate(unsigned percent, uint64_t total, uint64_t step)
{
    struct throttle_shared s = {0};
    uint64_t t = 1000 * MS, end = t + total, busy = 0, unmeasured = 0, next_sample = t + 5 * MS;
    while (t < end) {
        if (throttle_delay(&s, t) == 0) {
            busy += step;
            unmeasured += step;
        }
        t += step;
        if (t >= next_sample) {
            throttle_account(&s, t, unmeasured, percent);
            unmeasured = 0;
            next_sample += 5 * MS;
        }
    }
    return 100.0 * (double)busy / (double)total;
}

static void test_lone_container_converges_to_its_percent(void **state)
{
    (void)state;
    static const unsigned targets[] = {10, 25, 30, 50, 70, 90};
    for (unsigned i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        double got = simulate(targets[i], 4000 * MS, 100 * 1000);
        assert_true(got > targets[i] - 1.0 && got < targets[i] + 1.0);
    }
}

static void test_kernel_length_does_not_matter(void **state)
{
    (void)state;
    /* 10 us kernels and 2 ms kernels: the same share (time is measured, not
     * launches or blocks). */
    double small = simulate(30, 4000 * MS, 10 * 1000), big = simulate(30, 4000 * MS, 2 * MS);
    assert_true(small > 29.0 && small < 31.0);
    assert_true(big > 29.0 && big < 31.5);
}

static void test_account_pushes_tat_by_busy_over_percent(void **state)
{
    (void)state;
    struct throttle_shared s = {0};
    uint64_t now = 5000 * MS;
    /* Idle for long: the floor is now - burst. */
    throttle_account(&s, now, 3 * MS, 30);
    assert_int_equal(s.tat_ns, now - THROTTLE_BURST_NS + 10 * MS);
    assert_int_equal(throttle_delay(&s, now), 0);
    throttle_account(&s, now, 6 * MS, 30); /* +20 ms: 10 ms past now */
    assert_int_equal(throttle_delay(&s, now), 10 * MS);
    assert_int_equal(throttle_delay(&s, now + 10 * MS), 0);
    assert_int_equal(s.busy_ns, 9 * MS);
    /* Nothing measured, or no limit: nothing changes. */
    throttle_account(&s, now, 0, 30);
    throttle_account(&s, now, 5 * MS, 0);
    assert_int_equal(throttle_delay(&s, now), 10 * MS);
}

static void test_a_tat_far_ahead_is_clamped(void **state)
{
    (void)state;
    /* A damaged file (or another time namespace) must not stop a container. */
    struct throttle_shared s = {.tat_ns = UINT64_MAX - 5};
    uint64_t now = 100 * MS;
    throttle_account(&s, now, MS, 50);
    assert_int_equal(throttle_delay(&s, now), 2 * MS);
}

static void test_samples_integrate_to_busy_time(void **state)
{
    (void)state;
    nvmlProcessUtilizationSample_t smp[] = {
        {.pid = 7, .timeStamp = 1000000 + 5000, .smUtil = 40},
        {.pid = 8, .timeStamp = 1000000 + 5000, .smUtil = 90},
        {.pid = 7, .timeStamp = 1000000 + 15000, .smUtil = 20},
    };
    unsigned long long last = 1000000;
    /* 40 % of 5 ms + 20 % of 10 ms, the other pid ignored. */
    assert_int_equal(throttle_busy_from_samples(smp, 3, 7, &last), 2 * MS + 2 * MS);
    assert_int_equal(last, 1015000);
    /* Seen already: nothing twice. */
    assert_int_equal(throttle_busy_from_samples(smp, 3, 7, &last), 0);
    /* A first look (lastSeen 0) or a long gap counts one second at most. */
    nvmlProcessUtilizationSample_t one = {.pid = 7, .timeStamp = 9000000, .smUtil = 150};
    last = 0;
    assert_int_equal(throttle_busy_from_samples(&one, 1, 7, &last), 1000 * MS);
}

static void test_priority_grace(void **state)
{
    (void)state;
    uint64_t now = 1000 * MS;
    assert_false(throttle_yields(0, now));
    assert_true(throttle_yields(now - 1 * MS, now));
    assert_true(throttle_yields(now + MS, now)); /* another process's clock read later */
    assert_false(throttle_yields(now - THROTTLE_PRIORITY_GRACE_NS, now));
}

static void test_config_sm_limits(void **state)
{
    (void)state;
    struct cudacfg cfg;
    char *env[] = {"CUDA_DEVICE_SM_LIMIT=30", "CUDA_DEVICE_SM_LIMIT_1=70", NULL};
    cudacfg_load(&cfg, env);
    assert_int_equal(cfg.state, CUDACFG_ON);
    assert_true(cfg.compute);
    assert_int_equal(cudacfg_sm_limit(&cfg, 0), 30);
    assert_int_equal(cudacfg_sm_limit(&cfg, 1), 70);
    /* No memory limit comes with it. */
    assert_int_equal(cudacfg_limit(&cfg, 0, 1LL << 34), 0);
    char *visible[] = {"CUDA_DEVICE_SM_LIMIT_1=70", "CUDA_VISIBLE_DEVICES=1", NULL};
    cudacfg_load(&cfg, visible);
    assert_int_equal(cudacfg_sm_limit(&cfg, 0), 70);
    char *none[] = {"CUDA_DEVICE_SM_LIMIT=100", NULL};
    cudacfg_load(&cfg, none);
    assert_int_equal(cudacfg_sm_limit(&cfg, 0), 0);
    char *zero[] = {"CUDA_DEVICE_SM_LIMIT=0", NULL};
    cudacfg_load(&cfg, zero);
    assert_int_equal(cudacfg_sm_limit(&cfg, 0), 0);
    char *bad[] = {"CUDA_DEVICE_SM_LIMIT=101", NULL};
    cudacfg_load(&cfg, bad);
    assert_int_equal(cfg.state, CUDACFG_BROKEN);
    char *badname[] = {"CUDA_DEVICE_SM_LIMIT_x=10", NULL};
    cudacfg_load(&cfg, badname);
    assert_int_equal(cfg.state, CUDACFG_BROKEN);
}

/* The DRA driver's form: a percent keyed by the device's UUID ('-' spelled
 * '_' as an environment name needs), exact, beside the ordinal forms. */
static void test_config_sm_limits_by_uuid(void **state)
{
    (void)state;
    struct cudacfg cfg;
    char *env[] = {"CUDA_DEVICE_SM_LIMIT_GPU_8c1e0c2a_0000_1111_2222_333344445555=30",
                   "CUDA_DEVICE_SM_LIMIT_GPU-ffff0000-0000-0000-0000-000000000000=100",
                   "CUDA_DEVICE_SM_LIMIT=70", NULL};
    cudacfg_load(&cfg, env);
    assert_int_equal(cfg.state, CUDACFG_ON);
    assert_true(cfg.compute);
    assert_int_equal(cudacfg_uuid_sm_limit(&cfg, "GPU-8c1e0c2a-0000-1111-2222-333344445555"), 30);
    assert_int_equal(cudacfg_uuid_sm_limit(&cfg, "GPU-8C1E0C2A-0000-1111-2222-333344445555"), 30);
    /* 100: all of it, named, so no limit (and not the ordinal form's 70) */
    assert_int_equal(cudacfg_uuid_sm_limit(&cfg, "GPU-ffff0000-0000-0000-0000-000000000000"), 0);
    /* not named: the ordinal forms decide */
    assert_int_equal(cudacfg_uuid_sm_limit(&cfg, "GPU-99990000-0000-0000-0000-000000000000"), -1);
    assert_int_equal(cudacfg_sm_limit(&cfg, 0), 70);
    /* a memory limit by UUID names no percent */
    char *mem[] = {"CUDA_DEVICE_MEMORY_LIMIT_GPU-8c1e0c2a-0000-1111-2222-333344445555=1g", NULL};
    cudacfg_load(&cfg, mem);
    assert_int_equal(cudacfg_uuid_sm_limit(&cfg, "GPU-8c1e0c2a-0000-1111-2222-333344445555"), -1);
    char *bad[] = {"CUDA_DEVICE_SM_LIMIT_GPU-8c1e0c2a-0000-1111-2222-333344445555=101", NULL};
    cudacfg_load(&cfg, bad);
    assert_int_equal(cfg.state, CUDACFG_BROKEN);
    assert_non_null(strstr(cfg.why, "is not a percent 0..100"));
}

static void test_config_priority(void **state)
{
    (void)state;
    struct cudacfg cfg;
    char *high[] = {"CUDA_TASK_PRIORITY=0", "GPUPOOL_PRIORITY_DIR=/run/gpupool-priority", NULL};
    cudacfg_load(&cfg, high);
    assert_int_equal(cfg.state, CUDACFG_ON);
    assert_true(cfg.compute);
    assert_true(cudacfg_high_priority(&cfg));
    assert_string_equal(cfg.priority_dir, "/run/gpupool-priority");
    char *alone[] = {"CUDA_TASK_PRIORITY=1", NULL};
    cudacfg_load(&cfg, alone);
    assert_false(cudacfg_high_priority(&cfg));
    assert_int_equal(cfg.state, CUDACFG_OFF); /* nothing to do without the directory */
    char *bad[] = {"CUDA_TASK_PRIORITY=high", NULL};
    cudacfg_load(&cfg, bad);
    assert_int_equal(cfg.state, CUDACFG_BROKEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lone_container_converges_to_its_percent),
        cmocka_unit_test(test_kernel_length_does_not_matter),
        cmocka_unit_test(test_account_pushes_tat_by_busy_over_percent),
        cmocka_unit_test(test_a_tat_far_ahead_is_clamped),
        cmocka_unit_test(test_samples_integrate_to_busy_time),
        cmocka_unit_test(test_priority_grace),
        cmocka_unit_test(test_config_sm_limits),
        cmocka_unit_test(test_config_sm_limits_by_uuid),
        cmocka_unit_test(test_config_priority),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
