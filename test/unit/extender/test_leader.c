/* Unit tests: leader.c without a reachable API server -- the flag rules,
 * the identity, and a candidate that never reaches the Lease: it refuses
 * every bind, never forwards, starts and stops cleanly (no release: it
 * held nothing). The election itself runs against the fake API server in
 * test/integration/test_extender_ha.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "leader.h"

static struct leader_config good(void)
{
    return (struct leader_config){.lease_namespace = "kube-system",
                                  .lease_name = "gpupool-scheduler-extender",
                                  .identity = "me_1",
                                  .bind_url = "http://10.0.0.1:39999/gpupool-scheduler/bind",
                                  .lease_duration_ms = 10000,
                                  .renew_deadline_ms = 7000,
                                  .retry_period_ms = 2000,
                                  .margin_ms = 2000};
}

static void test_config_rules(void **state)
{
    (void)state;
    char err[256];
    struct leader_config c = good();
    assert_int_equal(leader_config_check(&c, err, sizeof(err)), 0);
    c.renew_deadline_ms = 8000; /* = duration - margin: the fence would end at the step-down */
    assert_int_equal(leader_config_check(&c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "renew deadline"));
    c = good();
    c.retry_period_ms = 7000;
    assert_int_equal(leader_config_check(&c, err, sizeof(err)), -1);
    c = good();
    c.margin_ms = 0;
    assert_int_equal(leader_config_check(&c, err, sizeof(err)), -1);
    c = good();
    c.lease_duration_ms = 10500; /* leaseDurationSeconds is whole seconds */
    assert_int_equal(leader_config_check(&c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "whole seconds"));
    c = good();
    c.lease_name = "a/b";
    assert_int_equal(leader_config_check(&c, err, sizeof(err)), -1);
    c = good();
    c.lease_namespace = "";
    assert_int_equal(leader_config_check(&c, err, sizeof(err)), -1);
}

static void test_identity(void **state)
{
    (void)state;
    char a[LEADER_IDENTITY_MAX], b[LEADER_IDENTITY_MAX], err[256], host[256];
    assert_int_equal(leader_default_identity(a, sizeof(a), err, sizeof(err)), 0);
    assert_int_equal(leader_default_identity(b, sizeof(b), err, sizeof(err)), 0);
    assert_int_equal(gethostname(host, sizeof(host)), 0);
    assert_int_equal(strncmp(a, host, strlen(host)), 0);
    assert_int_equal(a[strlen(host)], '_');
    assert_int_equal(strlen(a), strlen(host) + 1 + 16);
    assert_string_not_equal(a, b); /* two processes on one host differ */
    char tiny[8];
    assert_int_equal(leader_default_identity(tiny, sizeof(tiny), err, sizeof(err)), -1);
}

static void test_role_names(void **state)
{
    (void)state;
    assert_string_equal(leader_role_name(LEADER_ROLE_CANDIDATE), "candidate");
    assert_string_equal(leader_role_name(LEADER_ROLE_FOLLOWER), "follower");
    assert_string_equal(leader_role_name(LEADER_ROLE_SYNCING), "syncing");
    assert_string_equal(leader_role_name(LEADER_ROLE_HOLDER), "holder");
    assert_string_equal(leader_role_name(LEADER_ROLES), "unknown");
}

static int acquired_calls;
static void on_acquired(void *ctx, uint64_t epoch)
{
    (void)ctx;
    (void)epoch;
    acquired_calls++;
}

/* An API server that refuses connections: the candidate stays one. */
static void test_unreachable_candidate_refuses(void **state)
{
    (void)state;
    char path[] = "/tmp/gp-test-leader-XXXXXX", err[256];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    static const char kc[] = "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
                             "clusters: [{name: t, cluster: {server: 'http://127.0.0.1:1'}}]\n"
                             "users: [{name: u, user: {token: x}}]\n"
                             "contexts: [{name: t, context: {cluster: t, user: u}}]\n";
    assert_int_equal(write(fd, kc, sizeof(kc) - 1), (ssize_t)(sizeof(kc) - 1));
    close(fd);
    struct kube_client_options opt = {.kubeconfig = path, .timeout_ms = 500, .retry = {1, 0, 0}};
    struct kube_client *client = kube_client_new(&opt, err, sizeof(err));
    assert_non_null(client);
    struct leader_config c = good();
    c.lease_duration_ms = 2000;
    c.renew_deadline_ms = 600;
    c.retry_period_ms = 100;
    c.margin_ms = 500;
    c.on_acquired = on_acquired;
    struct leader *l = leader_new(&c, client, err, sizeof(err));
    assert_non_null(l);
    assert_int_equal(leader_start(l, err, sizeof(err)), 0);
    usleep(400 * 1000); /* a few rounds, all failing */
    struct leader_permit p;
    leader_bind_begin(l, &p);
    assert_int_equal(p.verdict, LEADER_REFUSE);
    assert_non_null(strstr(p.why, "retry"));
    assert_int_equal(leader_role(l), LEADER_ROLE_CANDIDATE);
    assert_int_equal(leader_epoch(l), 0);
    leader_mark_synced(l, 0); /* not a holder: changes nothing */
    leader_bind_begin(l, &p);
    assert_int_equal(p.verdict, LEADER_REFUSE);
    assert_int_equal(acquired_calls, 0);
    leader_free(l); /* stops the thread; held nothing, so writes nothing */
    kube_client_free(client);
    unlink(path);
}

static void test_bad_config_is_refused_by_new(void **state)
{
    (void)state;
    char err[256];
    struct leader_config c = good();
    c.margin_ms = -1;
    assert_null(leader_new(&c, NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "margin"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_rules),
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_role_names),
        cmocka_unit_test(test_unreachable_candidate_refuses),
        cmocka_unit_test(test_bad_config_is_refused_by_new),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
